// OpenAI request parsing. Type checks come before every access: the body is
// untrusted and nlohmann throws on a wrong type.
#include "server/api/openai_request.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "server/api/request_json.h"

namespace tern::server {
namespace {

using nlohmann::json;

std::string type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

// Each getter: nullopt + no error when absent or null; an error for a wrong type.
std::optional<ApiError> get_number(const json& j, const char* key, std::optional<double>& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return bad_request(std::string(key) + " must be a number, got " + type_name(*it), key);
  double v = it->get<double>();
  if (!std::isfinite(v)) return bad_request(std::string(key) + " must be finite", key);
  out = v;
  return std::nullopt;
}

std::optional<ApiError> get_int(const json& j, const char* key, std::optional<int64_t>& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_number_float()) {
    double v = it->get<double>();
    if (v == std::floor(v) && std::fabs(v) < 9e15) {
      out = static_cast<int64_t>(v);
      return std::nullopt;
    }
  }
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return bad_request(std::string(key) + " is too large", key);
  if (!it->is_number_integer()) return bad_request(std::string(key) + " must be an integer, got " + type_name(*it), key);
  out = it->get<int64_t>();
  return std::nullopt;
}

std::optional<ApiError> get_bool(const json& j, const char* key, std::optional<bool>& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return bad_request(std::string(key) + " must be a boolean, got " + type_name(*it), key);
  out = it->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> get_string(const json& j, const char* key, std::optional<std::string>& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return bad_request(std::string(key) + " must be a string, got " + type_name(*it), key);
  out = it->get<std::string>();
  return std::nullopt;
}

#define TRY(expr)                      \
  do {                                 \
    if (auto e_ = (expr)) return *e_;  \
  } while (0)

std::optional<ApiError> parse_stop(const json& j, SamplingParams& p) {
  auto it = j.find("stop");
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) {
    if (!it->get<std::string>().empty()) p.stop.push_back(it->get<std::string>());
    return std::nullopt;
  }
  if (!it->is_array()) return bad_request("stop must be a string or a list of strings", "stop");
  for (const auto& s : *it) {
    if (!s.is_string()) return bad_request("stop must be a string or a list of strings", "stop");
    if (!s.get<std::string>().empty()) p.stop.push_back(s.get<std::string>());
  }
  return std::nullopt;
}

std::optional<ApiError> parse_token_list(const json& j, const char* key, std::vector<int32_t>& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_array()) return bad_request(std::string(key) + " must be a list of token ids", key);
  for (const auto& t : *it) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      return bad_request(std::string(key) + " must be a list of non-negative token ids", key);
    out.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_logit_bias(const json& j, const RequestLimits& limits, SamplingParams& p) {
  auto it = j.find("logit_bias");
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) return bad_request("logit_bias must be an object of token id -> bias", "logit_bias");
  TRY(check_logit_bias(it->size(), limits));
  for (const auto& [key, value] : it->items()) {
    if (!value.is_number()) return bad_request("logit_bias values must be numbers", "logit_bias");
    // Only an integer in the usual form: no spaces, no '+' (std::stoll took " 5" as 5).
    int64_t id = 0;
    auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (key.empty() || ec != std::errc() || end != key.data() + key.size()) {
      return bad_request("logit_bias keys must be token ids, got '" + key.substr(0, 40) + "'", "logit_bias");
    }
    p.logit_bias[id] = value.get<double>();
  }
  return std::nullopt;
}

// A request field tern does not implement, and the values that ask for
// nothing (so clients that always send the field still work).
struct UnimplementedField {
  const char* name;
  const char* why;
  bool (*neutral)(const json& v);
};

bool is_false(const json& v) { return v.is_boolean() && !v.get<bool>(); }
bool is_true(const json& v) { return v.is_boolean() && v.get<bool>(); }
bool is_empty(const json& v) { return (v.is_array() || v.is_object() || v.is_string()) && v.empty(); }
bool is_one(const json& v) { return v.is_number() && v.get<double>() == 1; }
bool no_tool_choice(const json& v) { return v.is_string() && (v == "none" || v == "auto"); }

constexpr UnimplementedField kUnimplemented[] = {
    {"continue_final_message", "continuing the last assistant message", is_false},
    {"use_beam_search", "beam search", is_false},
    {"length_penalty", "beam search's length penalty", is_one},
    {"allowed_token_ids", "restricting the vocabulary", is_empty},
    {"bad_words", "banned words", is_empty},
    {"truncate_prompt_tokens", "prompt truncation", [](const json&) { return false; }},
    {"guided_regex", "guided decoding", [](const json&) { return false; }},
    {"guided_choice", "guided decoding", is_empty},
    {"guided_grammar", "guided decoding", [](const json&) { return false; }},
    {"structural_tag", "guided decoding", [](const json&) { return false; }},
    {"logits_processors", "custom logits processors", is_empty},
    {"chat_template", "a chat template given per request", [](const json&) { return false; }},
    {"documents", "documents for the chat template", is_empty},
    {"tool_choice", "function calling", no_tool_choice},
    {"functions", "function calling", is_empty},
    {"function_call", "function calling", no_tool_choice},
    {"spaces_between_special_tokens", "leaving out the spaces between special tokens", is_true},
    {"return_tokens_as_token_ids", "tokens as token ids in logprobs", is_false},
    {"modalities", "output modalities other than text",
     [](const json& v) { return v.is_array() && v.size() == 1 && v[0] == "text"; }},
    {"audio", "audio output", [](const json&) { return false; }},
    {"prediction", "predicted outputs", [](const json&) { return false; }},
    {"web_search_options", "web search", [](const json&) { return false; }},
    {"mm_processor_kwargs", "multi-modal inputs", is_empty},
    {"kv_transfer_params", "disaggregated prefill", is_empty},
    {"vllm_xargs", "vLLM's extra arguments", is_empty},
};

std::optional<ApiError> refuse_unimplemented(const json& j) {
  for (const UnimplementedField& f : kUnimplemented) {
    auto it = j.find(f.name);
    if (it == j.end() || it->is_null() || f.neutral(*it)) continue;
    return bad_request(std::string(f.name) + " (" + f.why + ") is not supported by this server; omit " + f.name,
                       f.name);
  }
  return std::nullopt;
}

std::optional<ApiError> unsupported_features(const json& j) {
  if (auto it = j.find("response_format"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return bad_request("response_format must be an object", "response_format");
    auto type = it->find("type");
    if (type == it->end() || !type->is_string() || type->get<std::string>() != "text") {
      return bad_request("response_format of type json_object or json_schema needs guided decoding, which this "
                         "server does not support yet; omit response_format or use {\"type\": \"text\"}",
                         "response_format");
    }
  }
  if (auto it = j.find("tools"); it != j.end() && !it->is_null() && !(it->is_array() && it->empty())) {
    return bad_request("tools (function calling) are not supported yet by this server; omit tools", "tools");
  }
  if (auto it = j.find("guided_json"); it != j.end() && !it->is_null())
    return bad_request("guided decoding is not supported yet by this server", "guided_json");
  // Accepted by vLLM or OpenAI but not implemented here: refused by name
  // when set to anything but its neutral value, never silently ignored
  // (docs/api.md has the audit of every field).
  if (auto e = refuse_unimplemented(j)) return e;
  if (auto it = j.find("suffix"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) return bad_request("suffix must be a string", "suffix");
    if (!it->get<std::string>().empty())
      return bad_request("suffix (fill-in-the-middle) is not supported by this model or server; omit it", "suffix");
  }
  if (auto it = j.find("best_of"); it != j.end() && !it->is_null()) {
    auto n = j.find("n");
    const int64_t choices = n != j.end() && n->is_number_integer() ? n->get<int64_t>() : 1;
    if (!it->is_number_integer() || it->get<int64_t>() != choices) {
      return bad_request("best_of other than n (generating more sequences and returning the best) is not supported "
                         "by this server; omit best_of or set it to n",
                         "best_of");
    }
  }
  return std::nullopt;
}

}  // namespace

ApiError api_error_from_status(const Status& s) {
  switch (s.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kOutOfRange:
    case ErrorCode::kParse:
      return bad_request(s.message());
    case ErrorCode::kNotFound:
      return {404, s.message(), {}, 0};
    case ErrorCode::kResourceExhausted:
      // A request that can never fit is the client's to fix; a full queue is temporary.
      if (s.message().find("queue") != std::string::npos) return {503, s.message(), {}, 1};
      return bad_request(s.message());
    case ErrorCode::kCancelled:
      return {503, s.message(), {}, 5};
    default:
      return {500, s.message(), {}, 0};
  }
}

std::optional<std::string> message_text(const json& content) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return std::nullopt;
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object()) return std::nullopt;
    auto type = part.find("type");
    auto t = part.find("text");
    if (type == part.end() || !type->is_string() || type->get<std::string>() != "text" || t == part.end() ||
        !t->is_string())
      return std::nullopt;
    if (!text.empty()) text += "\n";
    text += t->get<std::string>();
  }
  return text;
}

std::optional<ApiError> parse_sampling_fields(const json& j, const ServingContext& ctx, SamplingParams& p) {
  const GenerationDefaults& d = ctx.generation_defaults;
  bool use_defaults = ctx.use_generation_defaults;
  std::optional<double> temperature, top_p, min_p, presence, frequency, repetition;
  std::optional<int64_t> top_k, seed, min_tokens;
  std::optional<bool> ignore_eos, skip_special, include_stop;
  TRY(get_number(j, "temperature", temperature));
  TRY(get_number(j, "top_p", top_p));
  TRY(get_number(j, "min_p", min_p));
  TRY(get_number(j, "presence_penalty", presence));
  TRY(get_number(j, "frequency_penalty", frequency));
  TRY(get_number(j, "repetition_penalty", repetition));
  TRY(get_int(j, "top_k", top_k));
  TRY(get_int(j, "seed", seed));
  TRY(get_int(j, "min_tokens", min_tokens));
  TRY(get_bool(j, "ignore_eos", ignore_eos));
  TRY(get_bool(j, "skip_special_tokens", skip_special));
  TRY(get_bool(j, "include_stop_str_in_output", include_stop));

  bool do_sample = !use_defaults || d.do_sample.value_or(true);
  p.temperature = temperature.value_or(use_defaults && do_sample ? d.temperature.value_or(1.0) : (do_sample ? 1.0 : 0.0));
  p.top_p = top_p.value_or(use_defaults ? d.top_p.value_or(1.0) : 1.0);
  p.top_k = top_k.value_or(use_defaults ? d.top_k.value_or(0) : 0);
  p.min_p = min_p.value_or(0.0);
  p.presence_penalty = presence.value_or(0.0);
  p.frequency_penalty = frequency.value_or(0.0);
  p.repetition_penalty = repetition.value_or(use_defaults ? d.repetition_penalty.value_or(1.0) : 1.0);
  if (seed) p.seed = static_cast<uint64_t>(*seed);
  p.min_tokens = min_tokens.value_or(0);
  p.ignore_eos = ignore_eos.value_or(false);
  p.skip_special_tokens = skip_special.value_or(true);
  p.include_stop_str_in_output = include_stop.value_or(false);
  TRY(parse_stop(j, p));
  TRY(check_stop(p.stop, ctx.limits));
  TRY(parse_token_list(j, "stop_token_ids", p.stop_token_ids));
  TRY(parse_logit_bias(j, ctx.limits, p));
  return std::nullopt;
}

std::optional<ApiError> check_prompt_bytes(size_t bytes, const ServingContext& ctx, const std::string& param) {
  const int64_t limit = ctx.max_model_len * kMaxPromptBytesPerToken;
  if (static_cast<int64_t>(bytes) <= limit) return std::nullopt;
  return bad_request("This model's maximum context length is " + std::to_string(ctx.max_model_len) +
                         " tokens. However, your prompt is " + std::to_string(bytes) + " bytes of text, more than " +
                         std::to_string(ctx.max_model_len) + " tokens can hold (at most " +
                         std::to_string(kMaxPromptBytesPerToken) + " bytes each). Please reduce the length of the " +
                         (param == "messages" ? "messages." : "prompt."),
                     param);
}

std::optional<ApiError> fit_context(Request& r, std::optional<int64_t> asked, int64_t default_max,
                                    const ServingContext& ctx, bool allow_zero, const std::string& field) {
  int64_t len = static_cast<int64_t>(r.prompt.size());
  const std::string limit = "This model's maximum context length is " + std::to_string(ctx.max_model_len) + " tokens. ";
  const std::string flag = " (The server's limit: --max-model-len.)";
  if (len >= ctx.max_model_len) {
    return bad_request(limit + "However, your request has " + std::to_string(len) +
                       " input tokens. Please reduce the length of the input messages." + flag);
  }
  if (asked && *asked < (allow_zero ? 0 : 1)) {
    return bad_request(field + " must be at least 1, got " + std::to_string(*asked) + "." +
                           (*asked == 0 ? " (0, the prompt alone, needs echo on /v1/completions.)" : ""),
                       field);
  }
  int64_t room = ctx.max_model_len - len;
  if (asked && *asked > room) {
    return bad_request(limit + "However, you requested " + std::to_string(len + *asked) + " tokens (" +
                           std::to_string(len) + " in the messages, " + std::to_string(*asked) +
                           " in the completion, " + field + "). Please reduce the length of the messages or "
                           "completion." + flag,
                       field);
  }
  r.params.max_tokens = asked ? *asked : (default_max > 0 ? std::min(default_max, room) : room);
  return std::nullopt;
}

ApiResult<GenerationJob> parse_generation_request(std::string_view body, ApiKind kind, const ServingContext& ctx) {
  auto parsed = parse_request_json(body);
  if (auto* error = std::get_if<std::string>(&parsed)) return bad_request(*error);
  json j = std::move(std::get<json>(parsed));
  if (!j.is_object()) return bad_request("the request body must be a JSON object");
  if (auto e = unsupported_features(j)) return *e;

  GenerationJob job;
  job.kind = kind;
  std::optional<std::string> model, user;
  TRY(get_string(j, "model", model));
  TRY(get_string(j, "user", user));
  job.model = model.value_or(ctx.model_name);
  job.user = user.value_or("");
  if (model && *model != ctx.model_name) {
    return ApiError{404, "The model `" + *model + "` does not exist.", "model", 0};
  }

  std::optional<bool> stream, echo, logprobs_flag;
  TRY(get_bool(j, "stream", stream));
  job.stream = stream.value_or(false);
  if (auto so = j.find("stream_options"); so != j.end() && !so->is_null()) {
    if (!so->is_object()) return bad_request("stream_options must be an object", "stream_options");
    if (!job.stream) return bad_request("stream_options can only be given with stream: true", "stream_options");
    std::optional<bool> usage, continuous;
    TRY(get_bool(*so, "include_usage", usage));
    TRY(get_bool(*so, "continuous_usage_stats", continuous));
    job.include_usage = usage.value_or(false);
    job.continuous_usage = continuous.value_or(false);
  }

  SamplingParams params;
  TRY(parse_sampling_fields(j, ctx, params));
  std::optional<int64_t> n, max_tokens, max_completion_tokens, top_logprobs, priority, logprobs_int;
  TRY(get_int(j, "n", n));
  TRY(get_int(j, "max_tokens", max_tokens));
  TRY(get_int(j, "max_completion_tokens", max_completion_tokens));
  TRY(get_int(j, "priority", priority));
  std::optional<std::string> cache_salt;
  TRY(get_string(j, "cache_salt", cache_salt));
  const std::string max_tokens_field = max_completion_tokens ? "max_completion_tokens" : "max_tokens";
  if (max_completion_tokens) max_tokens = max_completion_tokens;
  if (n && (*n < 1 || *n > ctx.limits.max_n)) {
    return bad_request("n must be between 1 and " + std::to_string(ctx.limits.max_n) + ", got " + std::to_string(*n) +
                           " (the server's limit on choices per prompt, --max-n).",
                       "n");
  }

  if (kind == ApiKind::kChat) {
    TRY(get_bool(j, "logprobs", logprobs_flag));
    TRY(get_int(j, "top_logprobs", top_logprobs));
    if (top_logprobs) TRY(check_logprobs("top_logprobs", *top_logprobs, ctx.limits));
    if (logprobs_flag.value_or(false)) job.logprobs = static_cast<int>(top_logprobs.value_or(0));
    else if (top_logprobs && *top_logprobs > 0)
      return bad_request("top_logprobs needs logprobs to be true", "top_logprobs");
  } else {
    TRY(get_int(j, "logprobs", logprobs_int));
    TRY(get_bool(j, "echo", echo));
    if (logprobs_int) TRY(check_logprobs("logprobs", *logprobs_int, ctx.limits));
    if (logprobs_int) job.logprobs = static_cast<int>(*logprobs_int);
    job.echo = echo.value_or(false);
  }
  if (job.logprobs) params.logprobs = *job.logprobs;
  // vLLM's prompt_logprobs; completions' echo with logprobs asks for them too.
  std::optional<int64_t> prompt_logprobs;
  TRY(get_int(j, "prompt_logprobs", prompt_logprobs));
  if (prompt_logprobs) TRY(check_logprobs("prompt_logprobs", *prompt_logprobs, ctx.limits));
  if (prompt_logprobs) job.prompt_logprobs = static_cast<int>(*prompt_logprobs);
  if (job.echo && job.logprobs) job.echo_logprobs = true;
  if (job.prompt_logprobs || job.echo_logprobs) {
    params.prompt_logprobs = std::max(job.prompt_logprobs.value_or(0), job.echo_logprobs ? *job.logprobs : 0);
    if (job.stream) {
      return bad_request(std::string(job.prompt_logprobs ? "prompt_logprobs" : "echo with logprobs") +
                             " is answered in one response: set stream to false",
                         job.prompt_logprobs ? "prompt_logprobs" : "echo");
    }
  }

  // Prompts.
  std::vector<std::vector<int32_t>> prompts;
  if (kind == ApiKind::kChat) {
    auto msgs = j.find("messages");
    if (msgs == j.end() || !msgs->is_array() || msgs->empty())
      return bad_request("messages must be a non-empty list", "messages");
    json clean = json::array();
    size_t chat_bytes = 0;
    for (const auto& m : *msgs) {
      if (!m.is_object()) return bad_request("each message must be an object", "messages");
      auto role = m.find("role");
      if (role == m.end() || !role->is_string()) return bad_request("each message needs a string role", "messages");
      auto content = m.find("content");
      const std::string r = role->get<std::string>();
      if ((content == m.end() || content->is_null()) && r != "assistant" && r != "tool") {
        return bad_request("a " + r + " message needs content (a string or a list of text parts)", "messages");
      }
      std::optional<std::string> text = content == m.end() ? std::optional<std::string>("") : message_text(*content);
      if (!text) return bad_request("message content must be a string or a list of text parts", "messages");
      chat_bytes += text->size();
      TRY(check_prompt_bytes(chat_bytes, ctx, "messages"));
      json cm = m;
      cm["content"] = *text;
      clean.push_back(std::move(cm));
    }
    std::optional<bool> add_gen;
    TRY(get_bool(j, "add_generation_prompt", add_gen));
    // vLLM's default for chat: the template writes the special tokens itself.
    std::optional<bool> add_special;
    TRY(get_bool(j, "add_special_tokens", add_special));
    json kwargs = json::object();
    if (auto k = j.find("chat_template_kwargs"); k != j.end() && !k->is_null()) {
      if (!k->is_object()) return bad_request("chat_template_kwargs must be an object", "chat_template_kwargs");
      kwargs = *k;
    }
    auto rendered = ctx.render_chat(clean, add_gen.value_or(true), kwargs);
    if (!rendered.is_ok()) return bad_request("the chat template failed: " + rendered.status().message(), "messages");
    job.prompt_texts.push_back(*rendered);
    prompts.push_back(ctx.tokenizer->encode(*rendered, add_special.value_or(false)));
  } else {
    auto p = j.find("prompt");
    if (p == j.end() || p->is_null()) return bad_request("prompt is required", "prompt");
    const std::string too_many = "prompt holds more than " + std::to_string(ctx.limits.max_prompts) +
                                 " prompts; the server's limit is " + std::to_string(ctx.limits.max_prompts) +
                                 " prompts per request (--max-prompts-per-request)";
    if (p->is_array() && !p->empty() && !p->at(0).is_number_integer() && p->size() > ctx.limits.max_prompts)
      return bad_request(too_many, "prompt");
    std::optional<bool> add_special;
    TRY(get_bool(j, "add_special_tokens", add_special));
    auto add_text = [&](const std::string& s) -> std::optional<ApiError> {
      TRY(check_prompt_bytes(s.size(), ctx, "prompt"));
      job.prompt_texts.push_back(s);
      prompts.push_back(ctx.tokenizer->encode(s, add_special.value_or(true)));
      return std::nullopt;
    };
    auto add_ids = [&](const json& ids) -> std::optional<ApiError> {
      std::vector<int32_t> v;
      for (const auto& t : ids) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= ctx.vocab_size)
          return bad_request("prompt token ids must be integers in [0, " + std::to_string(ctx.vocab_size) + ")", "prompt");
        v.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
      job.prompt_texts.push_back(ctx.tokenizer->decode(v, false));
      prompts.push_back(std::move(v));
      return std::nullopt;
    };
    if (p->is_string()) {
      TRY(add_text(p->get<std::string>()));
    } else if (p->is_array() && !p->empty() && p->at(0).is_number_integer()) {
      TRY(add_ids(*p));
    } else if (p->is_array() && !p->empty()) {
      for (const auto& e : *p) {
        if (e.is_string()) TRY(add_text(e.get<std::string>()));
        else if (e.is_array() && !e.empty()) TRY(add_ids(e));
        else return bad_request("prompt must be a string, a list of strings, or token ids", "prompt");
      }
    } else {
      return bad_request("prompt must be a string, a list of strings, or token ids", "prompt");
    }
    if (prompts.size() > ctx.limits.max_prompts) return bad_request(too_many, "prompt");
  }

  for (auto& ids : prompts) {
    if (ids.empty()) return bad_request("the prompt is empty", kind == ApiKind::kChat ? "messages" : "prompt");
    Request r;
    r.prompt = std::move(ids);
    r.params = params;
    r.n = static_cast<int>(n.value_or(1));
    r.priority = static_cast<int>(priority.value_or(0));
    r.cache_salt = cache_salt.value_or("");
    TRY(fit_context(r, max_tokens, kind == ApiKind::kChat ? 0 : 16, ctx, job.echo, max_tokens_field));
    Status st = r.params.validate(ctx.vocab_size, ctx.limits.max_logprobs);
    if (!st.is_ok()) return bad_request(st.message());
    job.requests.push_back(std::move(r));
  }
  return job;
}

}  // namespace tern::server
