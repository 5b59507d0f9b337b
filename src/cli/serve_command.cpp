// `tern serve`: loads the model, starts the engine thread and the HTTP server
// with the OpenAI/vLLM, TGI and metrics routes, and serves until SIGINT or
// SIGTERM (then lets in-flight requests finish within --shutdown-timeout,
// ends the rest with an error answer, and exits 0). Flags use vLLM's names.
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <thread>

#include "base/descriptors.h"
#include "base/logging.h"
#include "base/thread_name.h"
#include "chat/chat_template.h"
#include "engine/sampling_params.h"
#include "cli/number_checks.h"
#include "cli/serve_command.h"
#include "server/api/metrics.h"
#include "server/api/openai_routes.h"
#include "server/api/serving_context.h"
#include "server/api/tgi_routes.h"
#include "server/api/web_routes.h"
#include "server/http/server.h"

namespace tern::cli {
namespace {

int fail(const Status& s) {
  spdlog::error("tern serve: {}", s.to_string());
  std::fprintf(stderr, "tern serve: %s\n", s.to_string().c_str());
  return 1;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// The chat renderer: --chat-template's file, else the model's template, else the ERNIE 4.5 format.
Result<ChatRenderer> make_renderer(const ServeOptions& o, const Tokenizer& tok) {
  if (o.chat_template.empty() && tok.chat_template().empty())
    spdlog::warn("the model has no chat template; /v1/chat/completions uses the ERNIE 4.5 format");
  return make_chat_renderer_for(tok, o.chat_template);
}

}  // namespace

void add_serve_command(CLI::App& app, ServeOptions& o) {
  auto* cmd = app.add_subcommand("serve", "Serve the model over HTTP (OpenAI, vLLM and TGI APIs, metrics, chat page)");
  add_engine_options(*cmd, o.engine, true);
  cmd->add_option("--host", o.host, "Address to listen on")->capture_default_str()->envname("TERN_HOST");
  cmd->add_option("--port", o.port, "Port to listen on (0 picks a free one)")->capture_default_str()
      ->envname("TERN_PORT");
  cmd->add_option("--served-model-name", o.served_model_name,
                  "Model name in the API (default: the hub repo ORG/NAME, or the folder name)")
      ->envname("TERN_SERVED_MODEL_NAME");
  cmd->add_option("--api-key", o.api_key, "Require 'Authorization: Bearer KEY' on API routes")
      ->envname("TERN_API_KEY");
  cmd->add_option("--allowed-origins", o.allowed_origins, "CORS origins, comma separated, or *")
      ->capture_default_str()->envname("TERN_ALLOWED_ORIGINS");
  cmd->add_option("--chat-template", o.chat_template, "Jinja chat template file (default: the model's)")
      ->envname("TERN_CHAT_TEMPLATE");
  cmd->add_option("--generation-config", o.generation_config,
                  "auto: the model's generation_config.json supplies sampling defaults; vllm: neutral defaults")
      ->check(CLI::IsMember({"auto", "vllm"}))->capture_default_str()->envname("TERN_GENERATION_CONFIG");
  cmd->add_option("--max-queued-requests", o.max_queued_requests,
                  "Unfinished requests beyond which new ones get 503 + Retry-After (0: no limit)")
      ->capture_default_str()->envname("TERN_MAX_QUEUED_REQUESTS");
  cmd->add_option("--log-format", o.log_format, "text or json (one object per line)")
      ->check(CLI::IsMember({"text", "json"}))->capture_default_str()->envname("TERN_LOG_FORMAT");
  cmd->add_option("--log-level", o.log_level, "trace|debug|info|warn|error")->capture_default_str()
      ->envname("TERN_LOG_LEVEL");
  cmd->add_flag("--disable-log-requests", o.disable_log_requests, "No log line per request")
      ->envname("TERN_DISABLE_LOG_REQUESTS");
  cmd->add_flag("--log-requests-text", o.log_requests_text,
                "Log each request's prompt text (off: request logs hold ids, counts and timings only)")
      ->envname("TERN_LOG_REQUESTS_TEXT");
  cmd->add_option("--max-log-len", o.max_log_len, "Bytes of prompt text --log-requests-text logs (0: all)")
      ->check(at_least(0))->capture_default_str()->envname("TERN_MAX_LOG_LEN");
  cmd->add_option("--shutdown-timeout", o.shutdown_timeout_s,
                  "Seconds in-flight requests get after SIGTERM/SIGINT; then they end with a shutting-down error")
      ->capture_default_str()
      ->envname("TERN_SHUTDOWN_TIMEOUT");
  cmd->add_option("--http-read-timeout", o.http_read_timeout_s,
                  "Seconds a request (line, headers and body) has to arrive whole once begun; then 408")
      ->check(between(0.001, 1e6))->capture_default_str()->envname("TERN_HTTP_READ_TIMEOUT");
  cmd->add_option("--timeout-keep-alive", o.timeout_keep_alive_s,
                  "Seconds an idle keep-alive connection stays open (uvicorn's flag)")
      ->check(between(0.001, 1e6))->capture_default_str()->envname("TERN_TIMEOUT_KEEP_ALIVE");
  cmd->add_option("--http-write-timeout", o.http_write_timeout_s,
                  "Seconds a response write may make no progress (a client that stops reading); then the "
                  "connection closes and its request is cancelled")
      ->check(between(0.001, 1e6))->capture_default_str()->envname("TERN_HTTP_WRITE_TIMEOUT");
  cmd->add_option("--http-threads", o.http_threads, "HTTP io threads")->capture_default_str()
      ->envname("TERN_HTTP_THREADS");
  cmd->add_option("--max-body-bytes", o.max_body_bytes, "Largest request body (413 beyond)")
      ->capture_default_str()->envname("TERN_MAX_BODY_BYTES");
  cmd->add_option("--max-header-bytes", o.max_header_bytes, "Largest request line + headers (431 beyond)")
      ->check(between(1024u, 1u << 24))->capture_default_str()->envname("TERN_MAX_HEADER_BYTES");
  cmd->add_option("--max-connections", o.max_connections, "Open connections beyond which new ones are refused")
      ->check(at_least(1))->capture_default_str()->envname("TERN_MAX_CONNECTIONS");
  cmd->add_option("--max-logit-bias", o.max_logit_bias, "Most logit_bias entries in one request (400 beyond)")
      ->capture_default_str()->envname("TERN_MAX_LOGIT_BIAS");
  cmd->add_option("--max-n", o.max_n, "Most choices (n) one request may ask for (400 beyond; at most 128)")
      ->check(between(int64_t{1}, int64_t{128}))->capture_default_str()->envname("TERN_MAX_N");
  cmd->add_option("--max-prompts-per-request", o.max_prompts,
                  "Most prompts in one /v1/completions request (400 beyond)")
      ->check(between(size_t{1}, size_t{1} << 20))->capture_default_str()->envname("TERN_MAX_PROMPTS_PER_REQUEST");
  cmd->add_option("--max-stop-sequences", o.max_stop_sequences,
                  "Most stop strings in one request (TGI's flag; 400, TGI routes 422, beyond; at most 16)")
      ->check(between(size_t{0}, kMaxStopStrings))->capture_default_str()->envname("TERN_MAX_STOP_SEQUENCES");
  cmd->add_option("--max-stop-bytes", o.max_stop_bytes, "Longest stop string in bytes (400, TGI routes 422, beyond)")
      ->check(between(size_t{1}, size_t{1} << 20))->capture_default_str()->envname("TERN_MAX_STOP_BYTES");
  cmd->add_option("--ssl-certfile", o.ssl_certfile,
                  "Serve HTTPS with this PEM certificate chain (with --ssl-keyfile)")->envname("TERN_SSL_CERTFILE");
  cmd->add_option("--ssl-keyfile", o.ssl_keyfile, "The certificate's PEM private key, unencrypted")
      ->envname("TERN_SSL_KEYFILE");
  cmd->add_option("--ssl-ca-certs", o.ssl_ca_certs, "PEM CA certificates that client certificates must chain to")
      ->envname("TERN_SSL_CA_CERTS");
  cmd->add_option("--ssl-cert-reqs", o.ssl_cert_reqs,
                  "Client certificates: 0 not asked for, 1 optional, 2 required (checked against --ssl-ca-certs)")
      ->check(between(0, 2))->capture_default_str()->envname("TERN_SSL_CERT_REQS");
  cmd->add_flag("--enable-ssl-refresh", o.enable_ssl_refresh,
               "Reload the --ssl-* files when they change (looked at every second): new connections use the new "
               "certificate, open ones keep theirs; files that do not load are logged and the previous ones kept")
      ->envname("TERN_ENABLE_SSL_REFRESH");
  cmd->add_flag("--no-webui", o.no_webui, "Do not serve the built-in chat page at GET / (as llama-server)")
      ->envname("TERN_NO_WEBUI");
  cmd->add_option("--web-root", o.web_root,
                  "Serve the chat page's own files from this folder's copy of web/ instead of the built-in ones")
      ->envname("TERN_WEB_ROOT");
  // Accepted for vLLM compatibility.
  cmd->add_option("--tensor-parallel-size", o.tensor_parallel_size, "Only 1 is supported")
      ->check(between(1, 1))->capture_default_str();
  cmd->add_option("--data-parallel-size", o.data_parallel_size, "Engine replicas (1 on the CPU)")
      ->check(between(1, 1))->capture_default_str();
  cmd->add_option("--dtype", o.dtype, "auto|bfloat16|float16|float32 (the CPU computes in float32)")
      ->check(CLI::IsMember({"auto", "bfloat16", "float16", "float32", "half", "float"}))->capture_default_str();
}

namespace {

// Descriptors beside the connections: the model's files, the GPU driver's, logs, the listening socket.
constexpr int64_t kDescriptorHeadroom = 1024;

// Before any thread starts: room for --max-connections open sockets, and the
// descriptor table grown for them now rather than in accept() under a burst
// of new connections (base/descriptors.h says why that stalls).
void reserve_open_files(int64_t max_connections) {
  const int64_t wanted = max_connections + kDescriptorHeadroom;
  const DescriptorRoom room = reserve_descriptors(wanted);
  spdlog::debug("tern serve: open files: soft limit {} (was {}), descriptor table {} slots", room.soft_limit,
                room.soft_limit_before, room.table_size);
  if (room.soft_limit >= 0 && room.soft_limit < wanted) {
    spdlog::warn("tern serve: the open-file limit is {} (its hard limit), below --max-connections {} plus {} for the "
                 "model and the driver: connections past it fail until others close (raise it with ulimit -Hn)",
                 room.soft_limit, max_connections, kDescriptorHeadroom);
  }
}

}  // namespace

int run_serve(const ServeOptions& o) {
  configure_logging(o.log_format == "json" ? LogFormat::kJson : LogFormat::kText, o.log_level);
  const server::TlsOptions tls{o.ssl_certfile, o.ssl_keyfile, o.ssl_ca_certs, o.ssl_cert_reqs, o.enable_ssl_refresh};
  if (o.enable_ssl_refresh && !tls.enabled()) {
    return fail(invalid_argument("--enable-ssl-refresh reloads --ssl-certfile/--ssl-keyfile: give those too"));
  }
  if (Status st = server::check_tls_options(tls); !st.is_ok()) return fail(st);
  reserve_open_files(o.max_connections);
  auto loaded = load_engine(o.engine);
  if (!loaded.is_ok()) return fail(loaded.status());
  LoadedEngine le = std::move(loaded).value();

  auto renderer = make_renderer(o, *le.tokenizer);
  if (!renderer.is_ok()) return fail(renderer.status());

  server::ServingContext ctx;
  ctx.tokenizer = le.tokenizer.get();
  ctx.render_chat = std::move(renderer).value();
  ctx.model_path = le.model_path;
  const std::string folder_name = std::filesystem::path(le.model_path).lexically_normal().filename().string();
  ctx.model_name = !o.served_model_name.empty() ? o.served_model_name
                   : !le.model_name.empty()     ? le.model_name
                                                : folder_name;
  if (ctx.model_name.empty()) ctx.model_name = std::filesystem::path(le.model_path).parent_path().filename().string();
  ctx.model_notice = le.model->config().notice;
  ctx.max_model_len = le.max_model_len;
  ctx.vocab_size = le.model->config().vocab_size;
  ctx.generation_defaults = le.generation_defaults;
  ctx.use_generation_defaults = o.generation_config == "auto";
  ctx.log_requests = !o.disable_log_requests;
  ctx.log_requests_text = o.log_requests_text;
  ctx.max_log_len = o.max_log_len;
  ctx.limits.max_logprobs = o.engine.max_logprobs;
  ctx.limits.max_logit_bias = o.max_logit_bias;
  ctx.limits.max_n = o.max_n;
  ctx.limits.max_prompts = o.max_prompts;
  ctx.limits.max_stop = o.max_stop_sequences;
  ctx.limits.max_stop_bytes = o.max_stop_bytes;
  server::Metrics metrics(ctx.model_name);
  metrics.set_cache_config(le.kv_cache_tokens / std::max<int64_t>(1, le.kv_cache_blocks), le.kv_cache_dtype,
                           le.kv_cache_blocks);
  if (!le.cpu.kernels.empty()) metrics.set_cpu_info(le.cpu.threads, le.cpu.kernels, le.cpu.isa, le.cpu.bf16_products);
  ctx.metrics = &metrics;
  EngineClient client(std::move(le.engine), o.max_queued_requests);
  ctx.engine = &client;

  server::Router router;
  server::add_openai_routes(router, ctx);
  server::add_tgi_routes(router, ctx);
  auto counters = std::make_shared<server::HttpCounters>();
  server::WebPageOptions page{!o.no_webui, o.web_root};
  std::vector<std::string> page_paths = server::add_web_routes(router, ctx, counters, page);

  server::HttpServerOptions http;
  http.host = o.host;
  http.port = o.port;
  http.io_threads = o.http_threads;
  http.max_body_bytes = o.max_body_bytes;
  http.max_header_bytes = o.max_header_bytes;
  http.max_connections = o.max_connections;
  http.tls = tls;
  http.shutdown_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_timeout_s * 1000));
  http.read_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.http_read_timeout_s * 1000));
  http.idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_keep_alive_s * 1000));
  http.write_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.http_write_timeout_s * 1000));
  http.auth.api_key = o.api_key;
  for (auto& path : page_paths) http.auth.open_paths.push_back(std::move(path));
  http.cors.allowed_origins = split_list(o.allowed_origins);
  // At the shutdown deadline the engine aborts what still runs: each handler
  // then answers "the server is shutting down" (a stream gets it as its last
  // event) instead of seeing its socket closed. Off the io threads: the
  // engine thread is joined.
  std::thread drain_end;
  http.on_drain_deadline = [&drain_end, &client] {
    drain_end = std::thread([&client] {
      name_this_thread("tern-drain");
      client.shutdown();
    });
  };
  server::HttpServer srv(http, std::move(router), counters);
  Status st = srv.listen();
  if (!st.is_ok()) return fail(st);
  ctx.ready = true;
  const char* scheme = http.tls.enabled() ? "https" : "http";
  spdlog::info("tern serve: model {} on {} ({}{}{} max tokens; KV cache {} tokens, {}, {}) ready in {:.0f} ms on {}://{}:{}",
               ctx.model_name, le.device, le.cpu.describe(), le.cpu.kernels.empty() ? "" : "; ", ctx.max_model_len,
               le.kv_cache_tokens, le.kv_cache_dtype, le.kv_sizing,
               le.load_ms, scheme,
               o.host, srv.port());
  std::fprintf(stderr, "tern serve: listening on %s://%s:%u (model %s)\n", scheme, o.host.c_str(), srv.port(),
               ctx.model_name.c_str());
  if (!ctx.model_notice.empty()) spdlog::info("tern serve: {}", ctx.model_notice);
  srv.run();
  ctx.ready = false;
  if (drain_end.joinable()) drain_end.join();
  client.shutdown();
  spdlog::info("tern serve: stopped");
  return 0;
}

}  // namespace tern::cli
