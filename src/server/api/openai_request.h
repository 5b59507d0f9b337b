// Parsing and validating OpenAI-style request bodies (/v1/chat/completions,
// /v1/completions; TGI's parameters map onto the same GenerationJob) into
// engine Requests. Every problem is an ApiError naming the field; unknown
// fields are ignored. No I/O: the tokenizer and chat template come from the
// ServingContext.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "engine/request.h"
#include "server/api/api_error.h"
#include "server/api/serving_context.h"

namespace tern::server {

enum class ApiKind { kChat, kCompletion };

// One client request, ready for the engine: one engine Request per prompt
// (a completions prompt may be a list), each with n choices.
struct GenerationJob {
  ApiKind kind = ApiKind::kChat;
  std::vector<Request> requests;  // ids filled by the route
  std::vector<std::string> prompt_texts;  // for echo
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;
  bool echo = false;
  std::optional<int> logprobs;  // chat: top_logprobs when logprobs=true; completions: logprobs
  std::optional<int> prompt_logprobs;  // vLLM's prompt_logprobs field
  bool echo_logprobs = false;          // completions: echo with logprobs, the prompt's logprobs first
  std::string model;
  std::string user;
};

template <typename T>
using ApiResult = std::variant<T, ApiError>;

// Parses a JSON body (text) into a job. `kind` selects the schema.
ApiResult<GenerationJob> parse_generation_request(std::string_view body, ApiKind kind, const ServingContext& ctx);

// Shared by every API: fills SamplingParams from JSON fields, with the
// model's generation_config.json defaults for the ones left out.
std::optional<ApiError> parse_sampling_fields(const nlohmann::json& j, const ServingContext& ctx,
                                              SamplingParams& p);

// Checks prompt length and max_tokens against max_model_len with vLLM's
// wording, setting max_tokens when the client left it out (`default_max`,
// 0 meaning "the rest of the context"); max_tokens 0 only when allow_zero
// (completions' echo: the prompt alone).
// `field` names the field the client set (max_tokens or max_completion_tokens).
std::optional<ApiError> fit_context(Request& r, std::optional<int64_t> asked_max_tokens, int64_t default_max,
                                    const ServingContext& ctx, bool allow_zero = false,
                                    const std::string& field = "max_tokens");

// Prompt text longer than max_model_len times this many bytes cannot fit the
// context with any tokenizer tern loads; it is refused before tokenizing
// (linear, but megabytes would hold an io thread for seconds).
inline constexpr int64_t kMaxPromptBytesPerToken = 64;

// The 400 for `bytes` of prompt text (the field `param`) past that bound, else nullopt.
std::optional<ApiError> check_prompt_bytes(size_t bytes, const ServingContext& ctx, const std::string& param);

// The text of a message's content: a string, null, or a list of
// {"type": "text", "text": ...} parts.
std::optional<std::string> message_text(const nlohmann::json& content);

}  // namespace tern::server
