// Sampling parameters from C structs, checked as the HTTP API checks them.
#include "capi/request_builder.h"

#include <string>

namespace tern::capi {

tern_sampling_params default_sampling_params(const GenerationDefaults* d) {
  tern_sampling_params p{};
  p.n = 1;
  p.max_tokens = 16;
  p.temperature = 1.0;
  p.top_p = 1.0;
  p.top_k = 0;
  p.repetition_penalty = 1.0;
  p.logprobs = -1;
  p.skip_special_tokens = 1;
  if (d != nullptr) {
    // As the server does for a request that leaves these out: do_sample false means greedy.
    const bool do_sample = d->do_sample.value_or(true);
    p.temperature = do_sample ? d->temperature.value_or(1.0) : 0.0;
    p.top_p = d->top_p.value_or(1.0);
    p.top_k = d->top_k.value_or(0);
    p.repetition_penalty = d->repetition_penalty.value_or(1.0);
  }
  return p;
}

namespace {

Status missing_array(const char* name) {
  return invalid_argument(std::string(name) + " is NULL but its count is not 0");
}

Result<SamplingParams> sampling_params(const tern_sampling_params& c) {
  SamplingParams p;
  p.temperature = c.temperature;
  p.top_p = c.top_p;
  p.top_k = c.top_k;
  p.min_p = c.min_p;
  p.repetition_penalty = c.repetition_penalty;
  p.presence_penalty = c.presence_penalty;
  p.frequency_penalty = c.frequency_penalty;
  p.min_tokens = c.min_tokens;
  if (c.has_seed != 0) p.seed = c.seed;
  if (c.logprobs < -1 || c.logprobs > kMaxLogprobs) {
    return invalid_argument("logprobs must be -1 (none) or between 0 and " + std::to_string(kMaxLogprobs) +
                            ", got " + std::to_string(c.logprobs));
  }
  if (c.logprobs >= 0) p.logprobs = c.logprobs;
  p.ignore_eos = c.ignore_eos != 0;
  p.skip_special_tokens = c.skip_special_tokens != 0;
  p.include_stop_str_in_output = c.include_stop_str_in_output != 0;
  if (c.num_stop > 0 && c.stop == nullptr) return missing_array("stop");
  for (size_t i = 0; i < c.num_stop; ++i) {
    if (c.stop[i] == nullptr) return invalid_argument("stop[" + std::to_string(i) + "] is NULL");
    p.stop.emplace_back(c.stop[i]);
  }
  if (c.num_stop_token_ids > 0 && c.stop_token_ids == nullptr) return missing_array("stop_token_ids");
  for (size_t i = 0; i < c.num_stop_token_ids; ++i) {
    if (c.stop_token_ids[i] < 0) return invalid_argument("stop_token_ids must be non-negative token ids");
    p.stop_token_ids.push_back(c.stop_token_ids[i]);
  }
  if (c.num_logit_bias > 0 && (c.logit_bias_ids == nullptr || c.logit_bias_values == nullptr)) {
    return missing_array("logit_bias_ids or logit_bias_values");
  }
  for (size_t i = 0; i < c.num_logit_bias; ++i) p.logit_bias[c.logit_bias_ids[i]] = c.logit_bias_values[i];
  return p;
}

}  // namespace

Result<Request> build_request(const int32_t* prompt, size_t num_prompt, const tern_sampling_params& params,
                              const RequestLimits& limits) {
  if (prompt == nullptr && num_prompt > 0) return missing_array("prompt_ids");
  if (num_prompt == 0) return invalid_argument("the prompt is empty: give at least one token id");
  if (params.n < 1 || params.n > 128) {
    return invalid_argument("n must be between 1 and 128, got " + std::to_string(params.n) + ".");
  }
  Request r;
  r.prompt.assign(prompt, prompt + num_prompt);
  for (size_t i = 0; i < num_prompt; ++i) {
    if (prompt[i] < 0 || prompt[i] >= limits.vocab_size) {
      return invalid_argument("prompt_ids[" + std::to_string(i) + "] is " + std::to_string(prompt[i]) +
                              "; token ids must be in [0, " + std::to_string(limits.vocab_size) + ")");
    }
  }
  TERN_ASSIGN_OR_RETURN(r.params, sampling_params(params));
  r.n = params.n;
  r.priority = params.priority;
  if (params.cache_salt != nullptr) r.cache_salt = params.cache_salt;

  const int64_t len = static_cast<int64_t>(num_prompt);
  const std::string limit = "the model's maximum context length is " + std::to_string(limits.max_model_len) +
                            " tokens";
  if (len >= limits.max_model_len) {
    return out_of_range(limit + ", and the prompt has " + std::to_string(len) + " tokens");
  }
  if (params.max_tokens < 0) {
    return invalid_argument("max_tokens must be at least 1 (or 0 for up to the context length), got " +
                            std::to_string(params.max_tokens) + ".");
  }
  const int64_t room = limits.max_model_len - len;
  if (params.max_tokens > room) {
    return out_of_range(limit + ", and max_tokens " + std::to_string(params.max_tokens) + " with a prompt of " +
                        std::to_string(len) + " tokens asks for " + std::to_string(len + params.max_tokens));
  }
  r.params.max_tokens = params.max_tokens > 0 ? params.max_tokens : room;
  TERN_RETURN_IF_ERROR(r.params.validate(limits.vocab_size));
  return r;
}

}  // namespace tern::capi
