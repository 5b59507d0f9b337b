// TGI routes: request validation with TGI's rules and wording (422
// "Input validation error: ..."), greedy unless sampling is asked for (TGI
// ignores generation_config.json), the run on a GenerationSession, and TGI's
// response, stream and error shapes. POST / is TGI's compat route (the
// `text-generation` client posts there with a `stream` flag).
#include "server/api/tgi_routes.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <variant>

#include "base/utf8.h"
#include "server/api/generation_session.h"
#include "server/api/openai_request.h"
#include "server/api/request_json.h"
#include "server/http/error.h"
#include "server/http/sse.h"

namespace tern::server {
namespace {

using nlohmann::json;

// TGI's defaults for what a client may ask; max_stop_sequences and the top
// tokens follow the server's RequestLimits (--max-logprobs).
constexpr int kMaxBestOf = 1;

struct TgiError {
  int status = 422;
  std::string message;
  std::string type = "validation";  // validation | overloaded | generation
  int retry_after_s = 0;
};

TgiError invalid(std::string message) { return {422, "Input validation error: " + message, "validation", 0}; }
TgiError bad_body(std::string message) {
  return {422, "Failed to deserialize the JSON body into the target type: " + message, "validation", 0};
}

// Engine and session errors in TGI's terms: a full queue is 429 "overloaded",
// the client's mistakes 422, a failed generation 424.
TgiError from_api_error(const ApiError& e) {
  if (e.status == 503) return {429, e.message, "overloaded", e.retry_after_s > 0 ? e.retry_after_s : 1};
  if (e.status >= 400 && e.status < 500) return invalid(e.message);
  return {424, e.message, "generation", 0};
}

std::string error_body(const TgiError& e) {
  json j = {{"error", e.message}, {"error_type", e.type}};
  return dump_json(j);
}

Task<void> respond_tgi_error(Responder& res, const TgiError& e) {
  std::vector<HttpHeader> headers;
  if (e.retry_after_s > 0) headers.push_back({"Retry-After", std::to_string(e.retry_after_s)});
  co_await res.respond(e.status, std::string(kJsonContentType), error_body(e), std::move(headers));
}

std::string type_name(const json& v) {
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "floating point";
  if (v.is_string()) return "string";
  if (v.is_array()) return "sequence";
  return "map";
}

TgiError wrong_type(const std::string& key, const json& v, const char* expected) {
  return bad_body("parameters." + key + ": invalid type: " + type_name(v) + ", expected " + expected);
}

// Field readers over `parameters`: absent or null leaves `out` unset.
std::optional<TgiError> read_number(const json& p, const char* key, std::optional<double>& out) {
  auto it = p.find(key);
  if (it == p.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return wrong_type(key, *it, "a number");
  double v = it->get<double>();
  if (!std::isfinite(v)) return bad_body(std::string("parameters.") + key + ": expected a finite number");
  out = v;
  return std::nullopt;
}

// A non-negative integer up to `max`; an integral float (5.0) counts.
std::optional<TgiError> read_count(const json& p, const char* key, uint64_t max, std::optional<uint64_t>& out) {
  auto it = p.find(key);
  if (it == p.end() || it->is_null()) return std::nullopt;
  const std::string what = std::string("parameters.") + key;
  if (it->is_number_unsigned()) {
    out = it->get<uint64_t>();
  } else if (it->is_number_integer()) {
    int64_t v = it->get<int64_t>();
    if (v < 0) return bad_body(what + ": invalid value: " + std::to_string(v) + ", expected a non-negative integer");
    out = static_cast<uint64_t>(v);
  } else if (it->is_number_float() && it->get<double>() >= 0 && it->get<double>() < 1.8e19 &&
             std::floor(it->get<double>()) == it->get<double>()) {
    out = static_cast<uint64_t>(it->get<double>());
  } else if (it->is_number()) {
    return bad_body(what + ": invalid value: " + it->dump() + ", expected a non-negative integer");
  } else {
    return wrong_type(key, *it, "an integer");
  }
  if (*out > max)
    return bad_body(what + ": invalid value: " + std::to_string(*out) + ", at most " + std::to_string(max));
  return std::nullopt;
}

std::optional<TgiError> read_bool(const json& p, const char* key, bool& out) {
  auto it = p.find(key);
  if (it == p.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return wrong_type(key, *it, "a boolean");
  out = it->get<bool>();
  return std::nullopt;
}

#define TGI_TRY(expr)                  \
  do {                                 \
    if (auto e_ = (expr)) return *e_;  \
  } while (0)

// One TGI request, validated and ready for the engine.
struct TgiJob {
  Request request;
  std::string inputs;
  bool stream = false;  // POST / only: the body's "stream"
  bool details = false;
  bool return_full_text = false;
  bool sampling = false;
  int top_n_tokens = 0;
  std::vector<std::string> stop;
};

using Parsed = std::variant<TgiJob, TgiError>;

// TGI's validation order and wording (router/src/validation.rs).
Parsed parse_tgi_request(std::string_view body, const ServingContext& ctx, bool read_stream_flag) {
  auto parsed = parse_request_json(body);
  if (auto* error = std::get_if<std::string>(&parsed)) {
    return TgiError{400, "Failed to parse the request body as JSON: " + *error, "validation", 0};
  }
  json j = std::move(std::get<json>(parsed));
  if (!j.is_object()) return bad_body("invalid type: " + type_name(j) + ", expected struct GenerateRequest");
  TgiJob job;
  auto in = j.find("inputs");
  if (in == j.end() || in->is_null()) return bad_body("missing field `inputs`");
  if (!in->is_string()) return bad_body("inputs: invalid type: " + type_name(*in) + ", expected a string");
  job.inputs = in->get<std::string>();
  if (read_stream_flag) {
    auto s = j.find("stream");
    if (s != j.end() && !s->is_null()) {
      if (!s->is_boolean()) return bad_body("stream: invalid type: " + type_name(*s) + ", expected a boolean");
      job.stream = s->get<bool>();
    }
  }
  json params = json::object();
  if (auto p = j.find("parameters"); p != j.end() && !p->is_null()) {
    if (!p->is_object())
      return bad_body("parameters: invalid type: " + type_name(*p) + ", expected struct GenerateParameters");
    params = *p;
  }

  std::optional<double> temperature, top_p, typical_p, repetition, frequency;
  std::optional<uint64_t> top_k, max_new_tokens, seed, truncate, best_of, top_n;
  bool do_sample = false, decoder_input_details = false, watermark = false;
  TGI_TRY(read_number(params, "temperature", temperature));
  TGI_TRY(read_number(params, "top_p", top_p));
  TGI_TRY(read_number(params, "typical_p", typical_p));
  TGI_TRY(read_number(params, "repetition_penalty", repetition));
  TGI_TRY(read_number(params, "frequency_penalty", frequency));
  TGI_TRY(read_count(params, "top_k", INT32_MAX, top_k));
  TGI_TRY(read_count(params, "max_new_tokens", UINT32_MAX, max_new_tokens));
  TGI_TRY(read_count(params, "seed", UINT64_MAX, seed));
  TGI_TRY(read_count(params, "truncate", UINT32_MAX, truncate));
  TGI_TRY(read_count(params, "best_of", UINT32_MAX, best_of));
  TGI_TRY(read_count(params, "top_n_tokens", UINT32_MAX, top_n));
  TGI_TRY(read_bool(params, "do_sample", do_sample));
  TGI_TRY(read_bool(params, "details", job.details));
  TGI_TRY(read_bool(params, "decoder_input_details", decoder_input_details));
  TGI_TRY(read_bool(params, "return_full_text", job.return_full_text));
  TGI_TRY(read_bool(params, "watermark", watermark));
  // Refused rather than ignored: the answer would silently not be what was asked for.
  if (watermark) return invalid("`watermark` is not supported by this server; omit it or set it to false");
  if (auto a = params.find("adapter_id"); a != params.end() && !a->is_null()) {
    if (!a->is_string()) return wrong_type("adapter_id", *a, "a string");
    if (!a->get<std::string>().empty())
      return invalid("`adapter_id` names a LoRA adapter; this server serves the base model only (no adapters are "
                     "loaded), so omit `adapter_id`");
  }
  if (auto s = params.find("stop"); s != params.end() && !s->is_null()) {
    if (!s->is_array()) return wrong_type("stop", *s, "a sequence of strings");
    for (const auto& v : *s) {
      if (!v.is_string()) return wrong_type("stop", v, "a string");
      if (!v.get<std::string>().empty()) job.stop.push_back(v.get<std::string>());
    }
  }
  if (auto g = params.find("grammar"); g != params.end() && !g->is_null())
    return invalid("grammar (guided decoding) is not supported by this server; omit `grammar`");

  if (job.inputs.empty()) return invalid("`inputs` cannot be empty");
  if (best_of && (*best_of == 0 || *best_of > kMaxBestOf))
    return invalid("`best_of` must be > 0 and <= " + std::to_string(kMaxBestOf) +
                   ". Given: " + std::to_string(*best_of));
  if (top_n && *top_n > static_cast<uint64_t>(ctx.limits.max_logprobs))
    return invalid("`top_n_tokens` must be >= 0 and <= " + std::to_string(ctx.limits.max_logprobs) + ". Given: " +
                   std::to_string(*top_n) + " (the server's limit, --max-logprobs)");
  if (temperature && *temperature <= 0) return invalid("`temperature` must be strictly positive");
  if (repetition && *repetition <= 0) return invalid("`repetition_penalty` must be strictly positive");
  if (frequency && (*frequency < -2.0 || *frequency > 2.0))
    return invalid("`frequency_penalty` must be >= -2.0 and <= 2.0");
  if (top_p && (*top_p <= 0 || *top_p >= 1.0)) return invalid("`top_p` must be > 0.0 and < 1.0");
  if (typical_p && (*typical_p <= 0 || *typical_p > 1.0)) return invalid("`typical_p` must be > 0.0 and < 1.0");
  if (typical_p && *typical_p < 1.0)
    return invalid("`typical_p` (typical decoding) is not supported by this server; omit it");
  if (top_k && *top_k == 0) return invalid("`top_k` must be strictly positive");
  if (max_new_tokens && *max_new_tokens == 0) return invalid("`max_new_tokens` must be strictly positive");
  if (job.stop.size() > ctx.limits.max_stop)
    return invalid("`stop` supports up to " + std::to_string(ctx.limits.max_stop) + " stop sequences. Given: " +
                   std::to_string(job.stop.size()) + " (the server's limit, --max-stop-sequences)");
  for (const std::string& s : job.stop) {
    if (s.size() > ctx.limits.max_stop_bytes)
      return invalid("`stop` sequences must be at most " + std::to_string(ctx.limits.max_stop_bytes) +
                     " bytes (the server's limit, --max-stop-bytes). Given: " + std::to_string(s.size()) + " bytes");
  }
  if (decoder_input_details)
    return invalid("`decoder_input_details` (prompt logprobs) is not supported by this server");

  // Lengths: TGI's max_input_tokens is max_total_tokens - 1.
  const int64_t max_total = ctx.max_model_len;
  const int64_t max_input = max_total - 1;
  if (truncate && (*truncate == 0 || static_cast<int64_t>(*truncate) > max_input))
    return invalid("`truncate` must be strictly positive and less than " + std::to_string(max_input) +
                   ". Given: " + std::to_string(*truncate));
  if (static_cast<int64_t>(job.inputs.size()) > max_total * kMaxPromptBytesPerToken) {
    return invalid("`inputs` must have less than " + std::to_string(max_input) + " tokens. Given: " +
                   std::to_string(job.inputs.size()) + " bytes of text, more than that many tokens can hold (at most " +
                   std::to_string(kMaxPromptBytesPerToken) + " bytes each)");
  }
  std::vector<int32_t> ids = ctx.tokenizer->encode(job.inputs, /*add_special_tokens=*/true);
  if (truncate && ids.size() > *truncate) ids.erase(ids.begin(), ids.end() - static_cast<int64_t>(*truncate));
  const int64_t input_length = static_cast<int64_t>(ids.size());
  if (input_length == 0) return invalid("`inputs` cannot be empty");
  if (input_length > max_input)
    return invalid("`inputs` must have less than " + std::to_string(max_input) + " tokens. Given: " +
                   std::to_string(input_length));
  const int64_t new_tokens = max_new_tokens ? static_cast<int64_t>(*max_new_tokens) : max_total - input_length;
  if (input_length + new_tokens > max_total)
    return invalid("`inputs` tokens + `max_new_tokens` must be <= " + std::to_string(max_total) + ". Given: " +
                   std::to_string(input_length) + " `inputs` tokens and " + std::to_string(new_tokens) +
                   " `max_new_tokens`");

  // TGI samples when asked to or when any warper is set; otherwise greedy.
  job.sampling = do_sample || (temperature && *temperature != 1.0) || (top_k && *top_k > 0) ||
                 (top_p && *top_p < 1.0);
  SamplingParams& sp = job.request.params;
  sp.temperature = job.sampling ? temperature.value_or(1.0) : 0.0;
  sp.top_p = top_p.value_or(1.0);
  sp.top_k = top_k ? static_cast<int64_t>(*top_k) : 0;
  sp.repetition_penalty = repetition.value_or(1.0);
  sp.frequency_penalty = frequency.value_or(0.0);
  if (job.sampling) sp.seed = seed ? *seed : std::random_device{}() * 0x100000000ull + std::random_device{}();
  job.top_n_tokens = static_cast<int>(top_n.value_or(0));
  sp.logprobs = job.top_n_tokens;  // every token's logprob is reported
  sp.stop = job.stop;
  sp.max_tokens = new_tokens;
  sp.skip_special_tokens = true;
  Status st = sp.validate(ctx.vocab_size, ctx.limits.max_logprobs);
  if (!st.is_ok()) return invalid(st.message());
  job.request.prompt = std::move(ids);
  job.request.n = 1;
  return job;
}

json token_json(const ServingContext& ctx, int32_t id, float logprob) {
  return {{"id", id},
          {"text", utf8_sanitize(ctx.tokenizer->token_bytes(id))},
          {"logprob", std::isfinite(logprob) ? json(logprob) : json(nullptr)},
          {"special", ctx.tokenizer->is_special(id)}};
}

json top_tokens_json(const ServingContext& ctx, const SampleResult& s) {
  json top = json::array();
  for (const TokenLogprob& t : s.top) top.push_back(token_json(ctx, t.id, t.logprob));
  return top;
}

// "length", "eos_token" (an eos or stop token id) or "stop_sequence".
std::string finish_name(const TgiJob& job, FinishReason f, const std::string& stop_reason) {
  if (f == FinishReason::kLength) return "length";
  for (const std::string& s : job.stop)
    if (s == stop_reason) return "stop_sequence";
  return "eos_token";
}

json seed_json(const TgiJob& job) {
  return job.sampling && job.request.params.seed ? json(*job.request.params.seed) : json(nullptr);
}

std::vector<HttpHeader> timing_headers(const SessionUsage& u) {
  std::vector<HttpHeader> h;
  h.push_back({"x-compute-type", "tern"});
  h.push_back({"x-total-time", std::to_string(static_cast<int64_t>(u.elapsed_ms))});
  h.push_back({"x-prompt-tokens", std::to_string(u.prompt_tokens)});
  h.push_back({"x-generated-tokens", std::to_string(u.completion_tokens)});
  if (u.completion_tokens > 0) {
    double per_token = u.elapsed_ms / static_cast<double>(u.completion_tokens);
    h.push_back({"x-time-per-token", std::to_string(static_cast<int64_t>(per_token))});
  }
  return h;
}

enum class Reply { kObject, kList, kStream };

Task<void> run_non_stream(ServingContext& ctx, TgiJob job, Responder& res, Reply reply) {
  std::vector<Request> requests;
  requests.push_back(job.request);
  GenerationSession session(ctx, res, std::move(requests), ctx.new_request_id("tgi"), "tgi");
  if (auto err = session.start()) {
    co_await respond_tgi_error(res, from_api_error(*err));
    co_return;
  }
  std::string text;
  json tokens = json::array(), top_tokens = json::array();
  std::optional<FinishReason> finish;
  std::string stop_reason;
  for (;;) {
    auto updates = co_await session.next();
    if (!updates) {
      if (session.error()) co_await respond_tgi_error(res, from_api_error(*session.error()));
      co_return;  // otherwise the client is gone
    }
    for (const ChoiceUpdate& u : *updates) {
      text += u.text;
      for (size_t k = 0; k < u.token_ids.size(); ++k) {
        const SampleResult* s = k < u.logprobs.size() ? &u.logprobs[k] : nullptr;
        tokens.push_back(token_json(ctx, u.token_ids[k], s ? s->logprob : NAN));
        if (job.top_n_tokens > 0) top_tokens.push_back(s ? top_tokens_json(ctx, *s) : json::array());
      }
      if (u.finish) {
        finish = u.finish;
        stop_reason = u.stop_reason;
      }
    }
    if (session.done()) break;
  }
  if (!finish || *finish == FinishReason::kAbort || *finish == FinishReason::kError) {
    TgiError aborted{503, "the request was aborted (the server is shutting down)", "overloaded", 5};
    co_await respond_tgi_error(res, aborted);
    co_return;
  }
  SessionUsage usage = session.usage();
  json out = {{"generated_text", job.return_full_text ? job.inputs + text : text}};
  if (job.details) {
    json details = {{"finish_reason", finish_name(job, *finish, stop_reason)},
                    {"generated_tokens", tokens.size()},
                    {"seed", seed_json(job)},
                    {"prefill", json::array()},
                    {"tokens", std::move(tokens)}};
    if (job.top_n_tokens > 0) details["top_tokens"] = std::move(top_tokens);
    out["details"] = std::move(details);
  }
  std::string body = reply == Reply::kList ? dump_json(json::array({out})) : dump_json(out);
  co_await res.respond(200, std::string(kJsonContentType), std::move(body), timing_headers(usage));
}

// One `data:` event per token; the last carries generated_text and details.
Task<void> run_stream(ServingContext& ctx, TgiJob job, Responder& res) {
  std::vector<Request> requests;
  requests.push_back(job.request);
  GenerationSession session(ctx, res, std::move(requests), ctx.new_request_id("tgi"), "tgi");
  if (auto err = session.start()) {
    co_await respond_tgi_error(res, from_api_error(*err));
    co_return;
  }
  bool started = false;
  std::string text = job.return_full_text ? job.inputs : std::string();
  int64_t index = 0;
  for (;;) {
    auto updates = co_await session.next();
    if (!updates && !session.error()) co_return;  // the client is gone
    if (!started) {
      if (!updates) {
        co_await respond_tgi_error(res, from_api_error(*session.error()));
        co_return;
      }
      // The transport adds Cache-Control and X-Accel-Buffering to every stream.
      std::vector<HttpHeader> no_headers;  // named: no braced list inside co_await (g++ 12)
      if (!co_await res.begin_stream(200, std::string(kSseContentType), std::move(no_headers))) co_return;
      started = true;
    }
    std::string out;
    if (!updates) {
      TgiError e = from_api_error(*session.error());
      e.type = "generation";
      append_sse_event(out, error_body(e));
      co_await res.write_chunk(out);
      co_return;
    }
    for (const ChoiceUpdate& u : *updates) {
      text += u.text;
      const bool aborted = u.finish && (*u.finish == FinishReason::kAbort || *u.finish == FinishReason::kError);
      for (size_t k = 0; k < u.token_ids.size(); ++k) {
        const SampleResult* s = k < u.logprobs.size() ? &u.logprobs[k] : nullptr;
        const bool last = u.finish && !aborted && k + 1 == u.token_ids.size();
        json event = {{"index", index++},
                      {"token", token_json(ctx, u.token_ids[k], s ? s->logprob : NAN)},
                      {"top_tokens", s && job.top_n_tokens > 0 ? top_tokens_json(ctx, *s) : json::array()},
                      {"generated_text", last ? json(text) : json(nullptr)},
                      {"details", nullptr}};
        if (last) {
          event["details"] = {{"finish_reason", finish_name(job, *u.finish, u.stop_reason)},
                              {"generated_tokens", index},
                              {"seed", seed_json(job)},
                              {"input_length", job.request.prompt.size()}};
        }
        append_sse_event(out, dump_json(event));
      }
      if (aborted || (u.finish && u.token_ids.empty())) {
        TgiError e{503, "the request ended without a final token (aborted)", "generation", 0};
        append_sse_event(out, error_body(e));
      }
    }
    if (!out.empty() && !co_await res.write_chunk(out)) co_return;
    if (session.done()) break;
  }
  co_await res.end_stream();
}

Handler tgi_handler(ServingContext& ctx, std::optional<Reply> fixed) {
  return [&ctx, fixed](HttpRequest& req, Responder& res) -> Task<void> {
    if (!ctx.ready.load()) {
      TgiError loading{503, "the model is still loading", "overloaded", 5};
      co_await respond_tgi_error(res, loading);
      co_return;
    }
    Parsed parsed = parse_tgi_request(req.body, ctx, /*read_stream_flag=*/!fixed);
    if (auto* err = std::get_if<TgiError>(&parsed)) {
      co_await respond_tgi_error(res, *err);
      co_return;
    }
    TgiJob& job = std::get<TgiJob>(parsed);
    Reply reply = fixed ? *fixed : (job.stream ? Reply::kStream : Reply::kList);
    if (reply == Reply::kStream) {
      co_await run_stream(ctx, std::move(job), res);
    } else {
      co_await run_non_stream(ctx, std::move(job), res, reply);
    }
  };
}

// "torch.bfloat16" from the checkpoint's config.json, as TGI reports it.
std::string model_dtype(const std::string& model_path) {
  std::ifstream in(std::filesystem::path(model_path) / "config.json");
  json cfg = in ? json::parse(in, nullptr, false) : json();
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (cfg.is_object() && cfg.contains(key) && cfg[key].is_string()) return "torch." + cfg[key].get<std::string>();
  }
  return "torch.float32";
}

}  // namespace

void add_tgi_routes(Router& router, ServingContext& ctx) {
  router.post("/generate", tgi_handler(ctx, Reply::kObject));
  router.post("/generate_stream", tgi_handler(ctx, Reply::kStream));
  router.post("/", tgi_handler(ctx, std::nullopt));

  json info = {{"model_id", ctx.model_name},
               {"model_sha", nullptr},
               {"model_dtype", model_dtype(ctx.model_path)},
               {"model_pipeline_tag", "text-generation"},
               {"max_best_of", kMaxBestOf},
               {"max_stop_sequences", ctx.limits.max_stop},
               {"max_top_n_tokens", ctx.limits.max_logprobs},
               {"max_input_tokens", ctx.max_model_len - 1},
               {"max_input_length", ctx.max_model_len - 1},
               {"max_total_tokens", ctx.max_model_len},
               {"max_client_batch_size", 1},
               {"router", "tern"},
               {"version", TERN_VERSION_STRING},
               {"sha", nullptr},
               {"docker_label", nullptr}};
  router.get("/info", [body = dump_json(info)](HttpRequest&, Responder& res) -> Task<void> {
    co_await res.respond(200, std::string(kJsonContentType), body);
  });
}

TgiValidation validate_tgi_request(std::string_view body, const ServingContext& ctx, bool compat_route) {
  Parsed parsed = parse_tgi_request(body, ctx, compat_route);
  TgiValidation out;
  if (auto* err = std::get_if<TgiError>(&parsed)) {
    out.status = err->status;
    out.error_body = error_body(*err);
  } else {
    out.request = std::move(std::get<TgiJob>(parsed).request);
  }
  return out;
}

}  // namespace tern::server
