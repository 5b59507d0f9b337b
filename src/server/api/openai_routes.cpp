// OpenAI/vLLM routes. Streaming chunks for plain text reuse pre-serialized
// JSON around the escaped text (SseChunkTemplate); chunks with logprobs or a
// finish reason are built as JSON.
#include "server/api/openai_routes.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>

#include "base/utf8.h"
#include "server/api/generation_session.h"
#include "server/api/openai_request.h"
#include "server/api/request_json.h"
#include "server/http/error.h"
#include "server/http/sse.h"

namespace tern::server {
namespace {

using nlohmann::json;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

json token_entry(const ServingContext& ctx, int32_t id, float logprob) {
  std::string bytes = ctx.tokenizer->token_bytes(id);
  json b = json::array();
  for (unsigned char c : bytes) b.push_back(c);
  return {{"token", utf8_sanitize(bytes)}, {"logprob", std::isfinite(logprob) ? logprob : -9999.0f}, {"bytes", b}};
}

// Chat logprobs: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
json chat_logprobs(const ServingContext& ctx, const ChoiceUpdate& u) {
  json content = json::array();
  for (const SampleResult& s : u.logprobs) {
    json e = token_entry(ctx, s.token, s.logprob);
    json top = json::array();
    for (const TokenLogprob& t : s.top) top.push_back(token_entry(ctx, t.id, t.logprob));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return {{"content", std::move(content)}};
}

// Completions logprobs: {tokens, token_logprobs, top_logprobs, text_offset}.
json completion_logprobs(const ServingContext& ctx, const ChoiceUpdate& u, size_t text_offset) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const SampleResult& s : u.logprobs) {
    std::string t = utf8_sanitize(ctx.tokenizer->token_bytes(s.token));
    tokens.push_back(t);
    lps.push_back(std::isfinite(s.logprob) ? s.logprob : -9999.0f);
    json top = json::object();
    for (const TokenLogprob& tl : s.top) top[utf8_sanitize(ctx.tokenizer->token_bytes(tl.id))] = tl.logprob;
    tops.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += t.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

// vLLM's prompt_logprobs: null for the first prompt token (no context), then
// per token {"<id>": {logprob, rank, decoded_token}} for the prompt's token
// and the most likely alternatives.
json prompt_logprobs_json(const ServingContext& ctx, const std::vector<SampleResult>& scored) {
  json out = json::array({nullptr});
  for (const SampleResult& s : scored) {
    json e = json::object();
    auto add = [&](int32_t id, float logprob, int32_t rank) {
      e[std::to_string(id)] = {{"logprob", std::isfinite(logprob) ? logprob : -9999.0f},
                               {"rank", rank},
                               {"decoded_token", utf8_sanitize(ctx.tokenizer->token_bytes(id))}};
    };
    add(s.token, s.logprob, s.rank);
    for (size_t r = 0; r < s.top.size(); ++r)
      if (s.top[r].id != s.token) add(s.top[r].id, s.top[r].logprob, static_cast<int32_t>(r + 1));
    out.push_back(std::move(e));
  }
  return out;
}

// Completions' echo with logprobs: the prompt's tokens lead the logprobs
// (the first with null), then the completion's, whose text offsets already
// count the echoed prompt.
json echo_logprobs_json(const ServingContext& ctx, const std::vector<int32_t>& prompt,
                        const std::vector<SampleResult>& scored, const json& completion) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const std::string text = utf8_sanitize(ctx.tokenizer->token_bytes(prompt[i]));
    tokens.push_back(text);
    offsets.push_back(offset);
    offset += text.size();
    if (i == 0 || i - 1 >= scored.size()) {
      lps.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    const SampleResult& s = scored[i - 1];
    lps.push_back(std::isfinite(s.logprob) ? s.logprob : -9999.0f);
    json top = json::object();
    top[text] = std::isfinite(s.logprob) ? s.logprob : -9999.0f;
    for (const TokenLogprob& t : s.top) top[utf8_sanitize(ctx.tokenizer->token_bytes(t.id))] = t.logprob;
    tops.push_back(std::move(top));
  }
  if (completion.is_object()) {
    for (const auto& v : completion["tokens"]) tokens.push_back(v);
    for (const auto& v : completion["token_logprobs"]) lps.push_back(v);
    for (const auto& v : completion["top_logprobs"]) tops.push_back(v);
    for (const auto& v : completion["text_offset"]) offsets.push_back(v);
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json usage_json(const SessionUsage& u) {
  json j = {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  if (u.cached_tokens > 0) j["prompt_tokens_details"] = {{"cached_tokens", u.cached_tokens}};
  return j;
}

json tern_json(const SessionUsage& u) {
  return {{"ttft_ms", u.ttft_ms}, {"tokens_per_second", u.tokens_per_second}, {"total_ms", u.elapsed_ms}};
}

json finish_json(const ChoiceUpdate& u) {
  return u.finish ? json(std::string(finish_reason_name(*u.finish))) : json(nullptr);
}

// vLLM's stop_reason: the stop string that matched, or the stop token id (an
// integer). The engine reports both as text; a stop string of digits ("42")
// stays a string.
json stop_reason_json(const ChoiceUpdate& u, const std::vector<std::string>& stop_strings) {
  const std::string& r = u.stop_reason;
  if (r.empty()) return nullptr;
  if (std::find(stop_strings.begin(), stop_strings.end(), r) != stop_strings.end()) return r;
  int64_t id = 0;
  auto [end, ec] = std::from_chars(r.data(), r.data() + r.size(), id);
  if (ec == std::errc() && end == r.data() + r.size()) return id;
  return r;
}

struct ChoiceState {
  std::string text;
  size_t text_offset = 0;
  std::vector<SampleResult> logprobs;
  std::optional<FinishReason> finish;
  std::string stop_reason;
  int64_t tokens = 0;
};

// Starts the SSE response: the role delta of every chat choice, or the
// echoed prompt of every completion choice.
Task<bool> begin_event_stream(Responder& res, bool chat, bool echo, const json& base,
                              const std::vector<ChoiceState>& state) {
  // The transport adds Cache-Control and X-Accel-Buffering to event streams.
  std::string content_type(kSseContentType);
  if (!co_await res.begin_stream(200, std::move(content_type))) co_return false;
  std::string out;
  for (size_t c = 0; c < state.size(); ++c) {
    json choice;
    if (chat) {
      choice = {{"index", c}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                {"finish_reason", nullptr}};
    } else if (echo) {
      choice = {{"index", c}, {"text", state[c].text}, {"logprobs", nullptr}, {"finish_reason", nullptr},
                {"stop_reason", nullptr}};
    } else {
      continue;
    }
    json j = base;
    j["choices"] = json::array();
    j["choices"].push_back(std::move(choice));
    append_sse_event(out, dump_json(j));
  }
  co_return co_await res.write_chunk(out);
}

Task<void> run_generation(ServingContext& ctx, GenerationJob job, Responder& res) {
  const bool chat = job.kind == ApiKind::kChat;
  const std::string id = ctx.new_request_id(chat ? "chatcmpl" : "cmpl");
  const int64_t created = unix_now();
  const std::string object = chat ? "chat.completion" : "text_completion";
  const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
  // Every prompt of a job shares its sampling parameters.
  const std::vector<std::string> stop_strings = job.requests.empty() ? std::vector<std::string>{}
                                                                     : job.requests.front().params.stop;
  GenerationSession session(ctx, res, std::move(job.requests), id, chat ? "chat" : "completions");
  if (auto err = session.start()) {
    co_await respond_error(res, *err);
    co_return;
  }
  const int choices = session.num_choices();
  std::vector<ChoiceState> state(static_cast<size_t>(choices));
  if (job.echo) {
    for (int c = 0; c < choices; ++c) {
      state[static_cast<size_t>(c)].text = job.prompt_texts[static_cast<size_t>(c / session.n())];
      state[static_cast<size_t>(c)].text_offset = state[static_cast<size_t>(c)].text.size();
    }
  }

  json base = {{"id", id}, {"object", chunk_object}, {"created", created}, {"model", ctx.model_name}};
  bool streaming = job.stream;
  bool stream_started = false;
  // vLLM's stream_options.continuous_usage_stats (with include_usage): every
  // chunk carries the usage so far, so no chunk takes the pre-serialized path.
  const bool continuous_usage = streaming && job.include_usage && job.continuous_usage;

  // Plain text deltas: pre-serialized around the escaped text.
  std::vector<SseChunkTemplate> text_chunk;
  for (int c = 0; c < choices; ++c) {
    std::string head = dump_json(base);
    head.pop_back();  // drop the closing brace
    if (chat) {
      text_chunk.emplace_back(head + ",\"choices\":[{\"index\":" + std::to_string(c) + ",\"delta\":{\"content\":\"",
                              "\"},\"logprobs\":null,\"finish_reason\":null}]}");
    } else {
      text_chunk.emplace_back(head + ",\"choices\":[{\"index\":" + std::to_string(c) + ",\"text\":\"",
                              "\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}]}");
    }
  }

  for (;;) {
    auto updates = co_await session.next();
    if (!updates) {
      if (!session.error()) co_return;  // client gone: the session cancelled everything
      if (streaming && stream_started) {
        ApiError e = *session.error();
        co_await res.write_chunk(sse_event(openai_error_body(e.status, e.message)));
        co_await res.write_chunk(kSseDone);
      } else {
        co_await respond_error(res, *session.error());
      }
      co_return;
    }
    if (streaming && !stream_started) {
      stream_started = true;
      if (!co_await begin_event_stream(res, chat, job.echo, base, state)) co_return;
    }
    std::string out;
    for (ChoiceUpdate& u : *updates) {
      ChoiceState& s = state[static_cast<size_t>(u.choice)];
      s.tokens += static_cast<int64_t>(u.token_ids.size());
      if (streaming) {
        bool plain = u.logprobs.empty() && !u.finish && !continuous_usage;
        if (plain) {
          if (!u.text.empty()) text_chunk[static_cast<size_t>(u.choice)].append(out, u.text);
        } else {
          json choice = {{"index", u.choice}, {"finish_reason", finish_json(u)}};
          if (chat) {
            choice["delta"] = u.text.empty() && u.finish ? json::object() : json{{"content", u.text}};
            choice["logprobs"] = u.logprobs.empty() ? json(nullptr) : chat_logprobs(ctx, u);
          } else {
            choice["text"] = u.text;
            choice["logprobs"] = u.logprobs.empty() ? json(nullptr) : completion_logprobs(ctx, u, s.text_offset);
          }
          if (u.finish) choice["stop_reason"] = stop_reason_json(u, stop_strings);
          json j = base;
          j["choices"] = json::array({choice});
          if (u.finish && session.done()) j["tern"] = tern_json(session.usage());
          if (continuous_usage) j["usage"] = usage_json(session.usage());
          append_sse_event(out, dump_json(j));
        }
      }
      s.text_offset += u.text.size();
      s.text += u.text;
      s.logprobs.insert(s.logprobs.end(), u.logprobs.begin(), u.logprobs.end());
      if (u.finish) {
        s.finish = u.finish;
        s.stop_reason = u.stop_reason;
      }
    }
    if (streaming && !out.empty() && !co_await res.write_chunk(out)) co_return;
    if (session.done()) break;
  }

  SessionUsage usage = session.usage();
  if (streaming) {
    std::string out;
    if (job.include_usage) {
      json j = base;
      j["choices"] = json::array();
      j["usage"] = usage_json(usage);
      j["tern"] = tern_json(usage);
      append_sse_event(out, dump_json(j));
    }
    out += kSseDone;
    co_await res.write_chunk(out);
    co_await res.end_stream();
    co_return;
  }

  json choices_json = json::array();
  for (int c = 0; c < choices; ++c) {
    ChoiceState& s = state[static_cast<size_t>(c)];
    ChoiceUpdate all;
    all.logprobs = s.logprobs;
    all.finish = s.finish;
    all.stop_reason = s.stop_reason;
    json choice = {{"index", c},
                   {"finish_reason", finish_json(all)},
                   {"stop_reason", stop_reason_json(all, stop_strings)}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", s.text}};
      choice["logprobs"] = s.logprobs.empty() && !job.logprobs ? json(nullptr) : chat_logprobs(ctx, all);
    } else {
      choice["text"] = s.text;
      const auto request = static_cast<size_t>(c / session.n());
      size_t offset = job.echo ? job.prompt_texts[request].size() : 0;
      json lp = s.logprobs.empty() && !job.logprobs ? json(nullptr) : completion_logprobs(ctx, all, offset);
      if (job.echo_logprobs) lp = echo_logprobs_json(ctx, session.prompt(request), session.prompt_logprobs(request), lp);
      choice["logprobs"] = std::move(lp);
      if (job.prompt_logprobs) choice["prompt_logprobs"] = prompt_logprobs_json(ctx, session.prompt_logprobs(request));
    }
    choices_json.push_back(std::move(choice));
  }
  json body = {{"id", id},         {"object", object},         {"created", created}, {"model", ctx.model_name},
               {"choices", choices_json}, {"usage", usage_json(usage)}, {"tern", tern_json(usage)}};
  if (chat && job.prompt_logprobs) body["prompt_logprobs"] = prompt_logprobs_json(ctx, session.prompt_logprobs(0));
  co_await res.respond(200, std::string(kJsonContentType), dump_json(body));
}

// /tokenize: vLLM's request, a prompt or chat messages; every field checked
// (a flag of the wrong type is refused, not read as its default).
struct TokenizeJob {
  std::vector<int32_t> ids;
  bool token_strs = false;
};

std::optional<ApiError> read_flag(const json& j, const char* key, bool& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return bad_request(std::string(key) + " must be a boolean", key);
  out = it->get<bool>();
  return std::nullopt;
}

ApiResult<TokenizeJob> parse_tokenize_request(std::string_view body, const ServingContext& ctx) {
  auto parsed = parse_request_json(body);
  if (auto* error = std::get_if<std::string>(&parsed)) return bad_request(*error);
  const json& j = std::get<json>(parsed);
  if (!j.is_object()) return bad_request("the request body must be a JSON object");
  bool add_special = true, add_generation_prompt = true;
  TokenizeJob job;
  if (auto e = read_flag(j, "add_special_tokens", add_special)) return *e;
  if (auto e = read_flag(j, "add_generation_prompt", add_generation_prompt)) return *e;
  if (auto e = read_flag(j, "return_token_strs", job.token_strs)) return *e;
  auto p = j.find("prompt");
  auto m = j.find("messages");
  if (p != j.end() && !p->is_null()) {
    if (!p->is_string()) return bad_request("prompt must be a string", "prompt");
    if (auto e = check_prompt_bytes(p->get_ref<const std::string&>().size(), ctx, "prompt")) return *e;
    job.ids = ctx.tokenizer->encode(p->get<std::string>(), add_special);
    return job;
  }
  if (m == j.end() || !m->is_array()) return bad_request("give a string prompt or a list of messages", "prompt");
  json clean = json::array();
  size_t bytes = 0;
  for (const auto& msg : *m) {
    auto role = msg.is_object() ? msg.find("role") : msg.end();
    auto content = msg.is_object() ? msg.find("content") : msg.end();
    auto text = content != msg.end() ? message_text(*content) : std::nullopt;
    if (!msg.is_object() || role == msg.end() || !role->is_string() || !text)
      return bad_request("each message needs a string role and text content", "messages");
    bytes += text->size();
    if (auto e = check_prompt_bytes(bytes, ctx, "messages")) return *e;
    clean.push_back({{"role", *role}, {"content", *text}});
  }
  auto rendered = ctx.render_chat(clean, add_generation_prompt, json::object());
  if (!rendered.is_ok()) return bad_request("the chat template failed: " + rendered.status().message(), "messages");
  job.ids = ctx.tokenizer->encode(*rendered, false);
  return job;
}

Handler generation_handler(ServingContext& ctx, ApiKind kind) {
  return [&ctx, kind](HttpRequest& req, Responder& res) -> Task<void> {
    if (!ctx.ready.load()) {
      co_await respond_error(res, ApiError{503, "the model is still loading", {}, 5});
      co_return;
    }
    auto parsed = parse_generation_request(req.body, kind, ctx);
    if (auto* err = std::get_if<ApiError>(&parsed)) {
      co_await respond_error(res, *err);
      co_return;
    }
    co_await run_generation(ctx, std::move(std::get<GenerationJob>(parsed)), res);
  };
}

Task<void> respond_json(Responder& res, const json& j, int status = 200) {
  co_await res.respond(status, std::string(kJsonContentType), dump_json(j));
}

}  // namespace

Task<void> respond_error(Responder& res, const ApiError& e) {
  std::vector<HttpHeader> headers;
  if (e.retry_after_s > 0) headers.push_back({"Retry-After", std::to_string(e.retry_after_s)});
  co_await res.respond(e.status, std::string(kJsonContentType), openai_error_body(e.status, e.message, {}, e.param),
                       std::move(headers));
}

void add_openai_routes(Router& router, ServingContext& ctx) {
  router.post("/v1/chat/completions", generation_handler(ctx, ApiKind::kChat));
  router.post("/v1/completions", generation_handler(ctx, ApiKind::kCompletion));

  router.get("/v1/models", [&ctx](HttpRequest&, Responder& res) -> Task<void> {
    int64_t created = std::chrono::duration_cast<std::chrono::seconds>(ctx.started.time_since_epoch()).count();
    // The sampling values a request that sets none gets (from generation_config.json under
    // --generation-config auto), for clients such as the chat page to show.
    SamplingParams defaults;
    (void)parse_sampling_fields(json::object(), ctx, defaults);
    json generation_config = {{"temperature", defaults.temperature}, {"top_p", defaults.top_p},
                              {"top_k", defaults.top_k}, {"repetition_penalty", defaults.repetition_penalty}};
    json model = {{"id", ctx.model_name},  {"object", "model"},        {"created", created},
                  {"owned_by", "tern"},    {"root", ctx.model_path},   {"parent", nullptr},
                  {"max_model_len", ctx.max_model_len}, {"generation_config", generation_config}};
    if (!ctx.model_notice.empty()) model["notice"] = ctx.model_notice;
    json body = {{"object", "list"}, {"data", json::array({model})}};
    co_await respond_json(res, body);
  });

  router.get("/health", [&ctx](HttpRequest&, Responder& res) -> Task<void> {
    if (ctx.ready.load()) {
      co_await res.respond(200, "text/plain", "");
    } else {
      std::vector<HttpHeader> headers;
      headers.push_back({"Retry-After", "1"});
      co_await res.respond(503, std::string(kJsonContentType), openai_error_body(503, "the model is loading"),
                           std::move(headers));
    }
  });
  router.get("/ping", [&ctx](HttpRequest&, Responder& res) -> Task<void> {
    co_await res.respond(ctx.ready.load() ? 200 : 503, "text/plain", "");
  });
  router.post("/ping", [&ctx](HttpRequest&, Responder& res) -> Task<void> {
    co_await res.respond(ctx.ready.load() ? 200 : 503, "text/plain", "");
  });
  router.get("/version", [](HttpRequest&, Responder& res) -> Task<void> {
    json body = {{"version", TERN_VERSION_STRING}};
    co_await respond_json(res, body);
  });

  router.post("/tokenize", [&ctx](HttpRequest& req, Responder& res) -> Task<void> {
    auto parsed = parse_tokenize_request(req.body, ctx);
    if (auto* err = std::get_if<ApiError>(&parsed)) {
      co_await respond_error(res, *err);
      co_return;
    }
    auto& t = std::get<TokenizeJob>(parsed);
    json out = {{"tokens", t.ids}, {"count", t.ids.size()}, {"max_model_len", ctx.max_model_len}};
    if (t.token_strs) {
      json strs = json::array();
      for (int32_t id : t.ids) strs.push_back(utf8_sanitize(ctx.tokenizer->id_to_piece(id)));
      out["token_strs"] = strs;
    }
    co_await respond_json(res, out);
  });

  router.post("/detokenize", [&ctx](HttpRequest& req, Responder& res) -> Task<void> {
    auto parsed = parse_request_json(req.body);
    if (auto* error = std::get_if<std::string>(&parsed)) {
      co_await respond_error(res, bad_request(*error));
      co_return;
    }
    const json& j = std::get<json>(parsed);
    auto t = j.is_object() ? j.find("tokens") : j.end();
    if (!j.is_object() || t == j.end() || !t->is_array()) {
      co_await respond_error(res, bad_request("tokens must be a list of token ids", "tokens"));
      co_return;
    }
    std::vector<int32_t> ids;
    for (const auto& v : *t) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= ctx.vocab_size) {
        co_await respond_error(res, bad_request("token ids must be integers in [0, " +
                                                    std::to_string(ctx.vocab_size) + ")", "tokens"));
        co_return;
      }
      ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    json body = {{"prompt", utf8_sanitize(ctx.tokenizer->decode(ids, false))}};
    co_await respond_json(res, body);
  });
}

}  // namespace tern::server
