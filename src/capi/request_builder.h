// tern_sampling_params -> an engine Request: the C API's side of what
// server/api/openai_request.cpp does for HTTP, with the same checks
// (SamplingParams::validate), the same generation_config.json defaults and
// the same context fitting. Every field is either honoured or refused.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/status.h"
#include "engine/request.h"
#include "model/model_config.h"
#include "tern/tern.h"

namespace tern::capi {

// vLLM's SamplingParams defaults, with `defaults` (generation_config.json) on top when given.
tern_sampling_params default_sampling_params(const GenerationDefaults* defaults);

struct RequestLimits {
  int64_t vocab_size = 0;     // prompt and parameter ids must be below it
  int64_t max_model_len = 0;  // prompt + output
};

// The request for `prompt` (ids checked against the vocabulary) with `params`; the id is left for the caller.
// Errors name the field: kInvalidArgument for a bad value, kOutOfRange when the prompt or max_tokens do not fit.
Result<Request> build_request(const int32_t* prompt, size_t num_prompt, const tern_sampling_params& params,
                              const RequestLimits& limits);

}  // namespace tern::capi
