// RequestLimits: how much one API request may ask for, beyond what the
// transport (body and header bytes) and the model (context length) bound.
// Each refusal is a 400 that names the limit and, where there is one, the
// flag that changes it; docs/security.md has the table. Plain data, set once
// by `tern serve` in the ServingContext.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "server/api/api_error.h"

namespace tern::server {

struct RequestLimits {
  int64_t max_n = 128;                    // choices per prompt (the engine's bound)
  int max_logprobs = kMaxLogprobs;        // --max-logprobs: logprobs, top_logprobs, prompt_logprobs, top_n_tokens
  size_t max_stop = kMaxStopStrings;      // stop strings per request
  size_t max_stop_bytes = 1024;           // bytes in one stop string
  size_t max_logit_bias = 1024;           // --max-logit-bias: logit_bias entries
  size_t max_prompts = 256;               // prompts in one /v1/completions request
};

// "`field` must be between 0 and N (--max-logprobs)" when value is out of range.
std::optional<ApiError> check_logprobs(const char* field, int64_t value, const RequestLimits& limits);
// The stop list's length and each stop string's size.
std::optional<ApiError> check_stop(const std::vector<std::string>& stop, const RequestLimits& limits);
// The number of logit_bias entries.
std::optional<ApiError> check_logit_bias(size_t entries, const RequestLimits& limits);

}  // namespace tern::server
