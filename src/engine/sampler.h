// Picks a sequence's next token from a row of logits with vLLM's semantics:
// logit_bias, min_tokens, repetition / presence / frequency penalties,
// greedy or temperature with top-k, top-p and min-p, and logprobs.
// One Sampler per sequence, alive as long as the sequence (across
// preemption): it owns the sequence's random generator, so a seeded request
// draws the same tokens whatever else runs beside it, and it keeps the
// output-token counts the penalties need. Not thread-safe; engine thread only.
//
// Order of operations in sample(), on the one row of logits:
//   0. logprobs (when params.logprobs is set) are taken from the RAW logits,
//      log_softmax over the whole vocabulary before any processing, as
//      vLLM V1 does by default ("raw_logprobs").
//   1. logit_bias: logits[id] += clamp(bias, -100, 100).
//   2. min_tokens: while output_tokens.size() < min_tokens, every id in
//      ctx.stop_ids and params.stop_token_ids is set to -inf.
//   3. penalties: repetition (ids in prompt or output: x > 0 ? x / r : x * r),
//      then frequency (-= f * count) and presence (-= p * (count > 0)) over
//      output tokens only.
//   Greedy (temperature < 1e-5 or top_k == 1) returns the argmax here
//   (lowest id on ties).
//   4. temperature: x / T.
//   5. top-k: keep the k largest (lowest id first on ties).
//   6. top-p: keep the smallest most-likely set whose mass reaches top_p.
//   7. min-p: drop tokens with p < min_p * p(max).
//   8. draw one token from what is left, renormalised.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/sampling_params.h"

namespace tern {

// What the sampler needs to know about the sequence; views the engine owns,
// valid for the duration of one sample() call.
struct SamplingContext {
  // The same prompt on every call for one Sampler (it is read once).
  std::span<const int32_t> prompt_tokens;
  // Tokens generated so far; append-only between calls (only the new tail is
  // read each step; if it shrinks, the counts are rebuilt from scratch).
  std::span<const int32_t> output_tokens;
  // eos and other stop ids masked while min_tokens is not yet reached. The
  // engine leaves eos out when ignore_eos is set.
  std::span<const int32_t> stop_ids;
};

struct TokenLogprob {
  int32_t id;
  float logprob;
};

struct SampleResult {
  int32_t token;
  // The sampled token's log-probability under the raw logits; NaN when
  // params.logprobs is unset.
  float logprob;
  // The params.logprobs most likely tokens of the raw logits, most likely
  // first (lowest id first on ties); empty when logprobs is unset or 0.
  std::vector<TokenLogprob> top;
  // 1 + the number of tokens more likely than `token` (prompt logprobs
  // only; 0 where not computed).
  int32_t rank = 0;
};

// The log-probability of `token` under the raw logits `raw`, its rank and the
// `top` most likely tokens (most likely first, lowest id first on ties): a
// prompt token's entry of prompt_logprobs.
SampleResult score_token(std::span<const float> raw, int32_t token, int top);

// Steps 1-3 of one row as per-id adjustments, for a runner that samples on
// its device, applied phase by phase: 0 x += a (logit_bias), 1 x = -inf
// (min_tokens), 2 x = x > 0 ? x / a : x * a (repetition), 3 x -= a then
// x -= b (frequency, presence); the ids within a phase are distinct but for
// repeated masks. The same float operations as sample(), so the adjusted
// row is bit for bit the host's.
struct LogitAdjust {
  int32_t id = 0;
  int32_t phase = 0;
  float a = 0, b = 0;
};

// Applies adjustments to a row phase by phase: how sample() does steps 1-3,
// and what a runner that samples on its device must do with plan_device's.
void apply_adjustments(std::span<float> logits, std::span<const LogitAdjust> adjust);

// What a device needs to sample one row as sample() would (steps 4-8 with
// the row's adjustments first); the draw is keyed by `key`, one value of
// the sequence's generator per step, so a seeded request repeats its tokens
// on a given runner (not the host's token for token: the draw differs).
struct DeviceSampling {
  bool greedy = false;
  float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f;
  int32_t top_k = 0;
  uint64_t key = 0;
  uint32_t adjust_begin = 0, adjust_end = 0;  // range in the step's LogitAdjust list
};

class Sampler {
 public:
  // Seeds the generator from params.seed, or from std::random_device.
  explicit Sampler(const SamplingParams& params);

  // `logits` holds one score per vocabulary id. It is overwritten: on return
  // it holds the logits after steps 1-3 (bias, min_tokens, penalties).
  SampleResult sample(std::span<float> logits, const SamplingContext& ctx);
  // For callers without history (tern generate): penalties and min_tokens
  // see an empty prompt and output, so leave them off.
  int32_t sample(std::span<float> logits);

  const SamplingParams& params() const { return params_; }

  // This step's row as DeviceSampling, its adjustments appended to `adjust`;
  // draws the key from the generator. No logprobs (those need the row here).
  DeviceSampling plan_device(const SamplingContext& ctx, size_t vocab, std::vector<LogitAdjust>& adjust);

 private:
  struct Candidate {
    float logit;
    int32_t id;
    double weight;  // exp((logit - max) / T), unnormalised
  };

  void fill_logprobs(std::span<const float> raw, SampleResult& out);
  // Steps 1-3 as adjustments (sample() applies them here, plan_device() hands them to a device).
  void list_adjustments(const SamplingContext& ctx, size_t vocab, std::vector<LogitAdjust>& adjust);
  void update_history(const SamplingContext& ctx, size_t vocab);
  int32_t draw(std::span<const float> logits);
  int32_t draw_nucleus(std::span<const float> logits, float max, float min);
  int32_t draw_top_k(std::span<const float> logits, float max);

  SamplingParams params_;
  std::mt19937_64 rng_;

  // Penalty state, kept only when a penalty is on. Per step the work is
  // O(distinct ids seen), never O(output length).
  bool prompt_read_ = false;
  size_t prompt_len_ = 0;
  std::vector<int32_t> prompt_ids_;  // distinct valid prompt ids, sorted
  size_t outputs_counted_ = 0;
  std::unordered_map<int32_t, int32_t> output_counts_;
  std::vector<int32_t> output_only_ids_;  // distinct output ids not in the prompt

  // Scratch reused across steps.
  std::vector<Candidate> candidates_;
  std::vector<float> weights_;  // per id, draw_nucleus
  std::vector<double> mass_;    // per logit bucket, draw_nucleus
  std::vector<float> raw_;
  std::vector<LogitAdjust> adjust_;
  std::vector<int32_t> order_;
};

// Index of the largest value; the lowest index wins ties (as torch.argmax).
// NaNs are never chosen unless every value is NaN (then 0).
int32_t argmax(std::span<const float> values);

}  // namespace tern
