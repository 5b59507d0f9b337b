// libFuzzer target for the API routes' request validation, with the tiny test
// model's tokenizer and chat template (tests/data/ernie-tiny) and no engine.
// Byte 0 picks the route (mod 6): /v1/chat/completions, /v1/completions (both
// parse_generation_request), TGI's /generate and POST / (validate_tgi_request),
// /tokenize and /detokenize (their real handlers, run through the Router with a
// recording responder); the rest is the request body.
// Checked: any body gives a request or a clean error, never an escaping
// exception, crash or UB. An accepted request stays within the context's
// RequestLimits (choices, logprobs, stop strings and their size, logit_bias),
// has a non-empty prompt of ids in [0, vocab_size), sampling parameters that
// pass validate(), and prompt + max_tokens within max_model_len. An error is a
// 4xx with a message and a JSON body.
// A violation traps.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#include "chat/chat_template.h"
#include "support/recording_responder.h"
#include "server/api/openai_request.h"
#include "server/api/openai_routes.h"
#include "server/api/tgi_routes.h"
#include "server/http/error.h"

namespace {

using namespace tern;
using namespace tern::server;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

struct Fixture {
  Tokenizer tokenizer;
  ServingContext ctx;
  Router router;

  explicit Fixture(Tokenizer t) : tokenizer(std::move(t)) {
    auto renderer = make_chat_renderer(tokenizer.chat_template(), tokenizer);
    if (!renderer.is_ok()) std::abort();
    std::ifstream in(std::string(TERN_FUZZ_TOKENIZER_DIR) + "/config.json");
    const nlohmann::json config = nlohmann::json::parse(in);
    ctx.tokenizer = &tokenizer;
    ctx.render_chat = std::move(renderer).value();
    ctx.model_name = "ernie-tiny";
    ctx.model_path = TERN_FUZZ_TOKENIZER_DIR;
    ctx.max_model_len = config.at("max_position_embeddings").get<int64_t>();
    ctx.vocab_size = config.at("vocab_size").get<int64_t>();
    ctx.log_requests = false;
    ctx.ready = true;
    add_openai_routes(router, ctx);
  }
};

Fixture& fixture() {
  static Fixture f = [] {
    auto t = Tokenizer::load(TERN_FUZZ_TOKENIZER_DIR);
    if (!t.is_ok()) std::abort();
    return Fixture(std::move(t).value());
  }();
  return f;
}

void check_request(const Request& r, const ServingContext& ctx, bool allow_zero_max_tokens) {
  const RequestLimits& lim = ctx.limits;
  check(r.n >= 1 && r.n <= lim.max_n);
  check(!r.prompt.empty());
  for (int32_t id : r.prompt) check(id >= 0 && id < ctx.vocab_size);
  const SamplingParams& p = r.params;
  check(p.validate(ctx.vocab_size).is_ok());
  check(p.max_tokens >= (allow_zero_max_tokens ? 0 : 1));
  check(static_cast<int64_t>(r.prompt.size()) + p.max_tokens <= ctx.max_model_len);
  check(!p.logprobs || (*p.logprobs >= 0 && *p.logprobs <= lim.max_logprobs));
  check(!p.prompt_logprobs || (*p.prompt_logprobs >= 0 && *p.prompt_logprobs <= lim.max_logprobs));
  check(p.stop.size() <= lim.max_stop);
  for (const std::string& s : p.stop) check(s.size() <= lim.max_stop_bytes);
  check(p.logit_bias.size() <= lim.max_logit_bias);
}

void check_error(int status, const std::string& body) {
  check(status >= 400 && status < 500);
  check(nlohmann::json::accept(body));
}

void fuzz_generation(std::string_view body, ApiKind kind, const ServingContext& ctx) {
  auto parsed = parse_generation_request(body, kind, ctx);
  if (auto* err = std::get_if<ApiError>(&parsed)) {
    check(!err->message.empty());
    check_error(err->status, openai_error_body(err->status, err->message, {}, err->param));
    return;
  }
  const GenerationJob& job = std::get<GenerationJob>(parsed);
  check(job.kind == kind && !job.requests.empty());
  if (job.echo) check(job.prompt_texts.size() == job.requests.size());
  check(job.requests.size() <= ctx.limits.max_prompts);
  for (const Request& r : job.requests) check_request(r, ctx, job.echo);
}

void fuzz_route(Fixture& f, const char* path, std::string_view body) {
  HttpRequest req;
  req.method = "POST";
  req.path = path;
  req.target = path;
  req.body = std::string(body);
  Router::Match match = f.router.find(req.method, req.path);
  check(match.handler != nullptr);
  RecordingResponder res;
  run_to_completion([&]() -> Task<void> { co_await (*match.handler)(req, res); });
  check(res.responses == 1);
  const auto out = nlohmann::json::parse(res.body, nullptr, false);
  check(!out.is_discarded());
  if (res.status != 200) {
    check_error(res.status, res.body);
    return;
  }
  if (std::string_view(path) == "/tokenize") {
    for (const auto& id : out.at("tokens")) check(id.get<int64_t>() >= 0 && id.get<int64_t>() < f.ctx.vocab_size);
  } else {
    check(out.at("prompt").is_string());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  (void)fixture();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Fixture& f = fixture();
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0:
      fuzz_generation(body, ApiKind::kChat, f.ctx);
      break;
    case 1:
      fuzz_generation(body, ApiKind::kCompletion, f.ctx);
      break;
    case 2:
    case 3: {
      TgiValidation v = validate_tgi_request(body, f.ctx, /*compat_route=*/data[0] % 6 == 3);
      if (v.status == 200) {
        check_request(v.request, f.ctx, false);
      } else {
        check_error(v.status, v.error_body);
      }
      break;
    }
    case 4:
      fuzz_route(f, "/tokenize", body);
      break;
    default:
      fuzz_route(f, "/detokenize", body);
      break;
  }
  return 0;
}
