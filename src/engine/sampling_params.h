// What a request asks of the sampler and of the engine's stop logic. Plain
// data filled by the CLI or the server (after applying generation_config.json
// defaults) and read by the Sampler and the engine; no JSON here. Semantics
// and validate() wording follow vLLM's SamplingParams.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace tern {

// Temperatures below this are greedy (vLLM's _SAMPLING_EPS).
inline constexpr double kGreedyTemperature = 1e-5;
// Most top logprobs a request may ask for by default (vLLM's max_logprobs;
// EngineConfig::max_logprobs, --max-logprobs, changes it).
inline constexpr int kMaxLogprobs = 20;
// Most stop strings in one request.
inline constexpr size_t kMaxStopStrings = 16;
// logit_bias values are clamped to [-kMaxLogitBias, kMaxLogitBias] (OpenAI).
inline constexpr double kMaxLogitBias = 100.0;

struct SamplingParams {
  // --- read by the Sampler ---
  double temperature = 1.0;  // < kGreedyTemperature means greedy
  double top_p = 1.0;        // nucleus mass in (0, 1]
  int64_t top_k = 0;         // 0 or -1: no limit
  double min_p = 0.0;        // drop tokens below min_p * p(max), in [0, 1]
  // 1.0 is off. For every id seen in the prompt or the output, a positive
  // logit is divided by it and a negative one multiplied (HF / vLLM).
  double repetition_penalty = 1.0;
  // OpenAI style, over output tokens only, in [-2, 2]:
  // logit -= presence_penalty * (count > 0) + frequency_penalty * count.
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  // Token id -> bias added to its logit before anything else; clamped to
  // [-100, 100] when applied. Keys are 64-bit so a client's huge id reaches
  // validate() intact and is named in the error.
  std::map<int64_t, double> logit_bias;
  // Stop ids (stop_token_ids and the ids the engine passes as eos) are
  // masked to -inf while fewer than min_tokens tokens have been generated.
  int64_t min_tokens = 0;
  // Number of top logprobs to report, 0..kMaxLogprobs. When set (even to 0)
  // the sampled token's logprob is reported too. Logprobs are those of the
  // raw model output (vLLM V1's default), before bias, penalties, temperature.
  std::optional<int> logprobs;
  // vLLM's prompt_logprobs: when set (0..kMaxLogprobs), the log-probability
  // of every prompt token after the first under the model given the tokens
  // before it, its rank, and this many most likely alternatives. Such a
  // request computes its whole prompt (no prefix-cache hit).
  std::optional<int> prompt_logprobs;
  // A seeded request draws the same tokens whatever else runs beside it.
  std::optional<uint64_t> seed;

  // --- read by the engine (carried and validated here) ---
  // 0 computes the prompt only (its prompt_logprobs) and ends with "length".
  int64_t max_tokens = 16;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // besides the model's default stop ids
  std::vector<std::string> stop;        // matched on detokenized text
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;

  bool greedy() const { return temperature < kGreedyTemperature || top_k == 1; }
  bool has_penalties() const {
    return repetition_penalty != 1.0 || presence_penalty != 0.0 || frequency_penalty != 0.0;
  }
  // Range checks with vLLM's messages, e.g. "temperature must be
  // non-negative, got -1.0.". Token ids in logit_bias are checked against
  // `vocab_size` when it is given (negative ids are always rejected).
  Status validate(std::optional<int64_t> vocab_size = std::nullopt, int max_logprobs = kMaxLogprobs) const;
};

// A double the way Python's repr() prints it ("-1.0", "0.5", "1e+20", "nan"),
// so error messages read exactly like vLLM's.
std::string python_float(double v);

}  // namespace tern
