// What a client hands the engine (Request) and what the engine sends back on
// the request's stream (RequestOutput events). Plain data, no JSON: the
// server maps API fields onto these.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"

namespace tern {

using SteadyTime = std::chrono::steady_clock::time_point;

enum class FinishReason { kStop, kLength, kAbort, kError };
std::string_view finish_reason_name(FinishReason reason);  // "stop", "length", "abort", "error"

struct Request {
  std::string id;                 // unique among live requests
  std::vector<int32_t> prompt;    // token ids, at least one
  SamplingParams params;
  int n = 1;                      // independent samples of the same prompt
  int priority = 0;               // lower runs first; FCFS among equals
  std::string cache_salt;         // keeps prefix-cache entries of tenants apart
  SteadyTime arrival = std::chrono::steady_clock::now();
};

// News about one of a request's n sequences.
struct SequenceOutput {
  int index = 0;
  std::vector<int32_t> token_ids;      // tokens sampled since the last event
  std::vector<SampleResult> logprobs;  // one per token when logprobs were asked for
  std::string text;                    // new text: whole UTF-8 characters, stop strings withheld
  std::optional<FinishReason> finish;  // set on the sequence's last event
  std::string stop_reason;             // the stop string or token id that ended it, if any
};

// One event on a request's stream. The last one has `finished` set.
struct RequestOutput {
  std::vector<SequenceOutput> sequences;
  bool finished = false;
  Status error;                 // a request that failed carries why
  int64_t num_prompt_tokens = 0;
  // With params.prompt_logprobs, on the first event after the prompt is
  // computed (before or with the first token): one entry per prompt token
  // from the second on (the first has no context; APIs show it as null).
  std::vector<SampleResult> prompt_logprobs;
  int64_t num_cached_tokens = 0;  // prompt tokens served from the prefix cache
  int64_t num_output_tokens = 0;  // all sequences, so far
  double queue_ms = 0;            // arrival -> first scheduled
  double ttft_ms = 0;             // arrival -> first token (0 until then)
  double elapsed_ms = 0;          // arrival -> this event
};

}  // namespace tern
