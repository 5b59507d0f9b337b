// libFuzzer target for the HTTP request path before a route runs: bytes off the
// wire go through Beast's parser with the server's limits (beast_request.h, the
// steps Connection runs), arriving in pieces as TCP may deliver them, then each
// request of a keep-alive connection through the Dispatcher (request id, CORS,
// API key, routing) to stub routes at the server's real paths. Byte 0 picks the
// segment size (low 4 bits), an API key (bit 4) and a CORS origin list (bit 5).
// Checked: a refused read answers 400/413/431; a parsed request has a path that
// is the target's prefix and no CR/LF in any header; dispatch answers exactly
// once with a known status, a JSON body on errors, and header values without
// CR/LF; a bad key gets 401. A violation traps.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "support/recording_responder.h"
#include "server/http/beast_request.h"
#include "server/http/dispatch.h"
#include "server/http/error.h"
#include "server/http/server.h"

namespace {

using namespace tern::server;
namespace http = boost::beast::http;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

bool clean_header_text(std::string_view s) { return s.find_first_of("\r\n") == std::string_view::npos; }

Router stub_router() {
  Router r;
  Handler ok = [](HttpRequest& req, Responder& res) -> Task<void> {
    co_await res.respond(200, "text/plain", "route saw " + std::to_string(req.body.size()) + " bytes");
  };
  for (const char* path : {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize", "/generate",
                           "/generate_stream", "/", "/ping"}) {
    r.post(path, ok);
  }
  for (const char* path : {"/v1/models", "/health", "/ping", "/version", "/info", "/metrics", "/openapi.json"}) {
    r.get(path, ok);
  }
  return r;
}

const Dispatcher& dispatcher(bool with_key, bool origin_list) {
  static const Router router = stub_router();
  static const auto make = [](bool key, bool origins) {
    AuthOptions auth;
    if (key) auth.api_key = "sk-fuzz";
    CorsOptions cors;
    if (origins) cors.allowed_origins = {"https://app.example", "http://localhost:3000"};
    return Dispatcher(router, auth, cors);
  };
  static const Dispatcher d[4] = {make(false, false), make(false, true), make(true, false), make(true, true)};
  return d[(with_key ? 2 : 0) + (origin_list ? 1 : 0)];
}

void check_dispatch(const Dispatcher& d, HttpRequest& request, bool with_key) {
  RecordingResponder res;
  run_to_completion([&]() -> Task<void> { co_await d.dispatch(request, res); });
  check(res.responses == 1 && res.started());
  static constexpr int kStatuses[] = {200, 204, 400, 401, 404, 405};
  check(std::find(std::begin(kStatuses), std::end(kStatuses), res.status) != std::end(kStatuses));
  if (res.status >= 400) check(nlohmann::json::accept(res.body));
  bool has_id = false;
  const RecordingResponder& answered = res;
  for (const auto* list : {&answered.headers, &answered.common_headers()}) {
    for (const HttpHeader& h : *list) {
      check(!h.name.empty() && clean_header_text(h.name) && clean_header_text(h.value));
      if (iequals(h.name, "X-Request-Id")) has_id = has_id || is_usable_request_id(h.value);
    }
  }
  check(has_id);
  if (res.status == 200 && with_key && request.method != "OPTIONS") {
    // Only open paths or the right key reach a route.
    auto auth = request.headers.get("authorization");
    const bool open = request.path == "/health" || request.path == "/metrics" || request.path == "/ping" ||
                      request.path == "/version" || request.path == "/";
    check((open && (request.method == "GET" || request.method == "HEAD")) ||
          (auth && bearer_token(*auth) == "sk-fuzz"));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t segment = (data[0] & 0x0f) == 0 ? size : (data[0] & 0x0f) * 7;
  const bool with_key = data[0] & 0x10;
  const Dispatcher& d = dispatcher(with_key, data[0] & 0x20);
  const std::string_view wire(reinterpret_cast<const char*>(data) + 1, size - 1);
  static const HttpServerOptions options;

  // Up to 8 requests of one connection; `avail` bytes have arrived so far.
  size_t used = 0, avail = std::min(wire.size(), segment);
  for (int n = 0; n < 8 && used < wire.size(); ++n) {
    BeastRequestParser parser;
    apply_limits(parser, options);
    parser.eager(true);
    boost::system::error_code ec;
    while (!parser.is_done()) {
      size_t took = parser.put(boost::asio::buffer(wire.data() + used, avail - used), ec);
      check(took <= avail - used);
      used += took;
      // Beast may take nothing without asking for more (an empty buffer mid-body).
      if (ec == http::error::need_more || (!ec && took == 0 && !parser.is_done())) {
        ec = {};
        if (avail == wire.size()) {
          parser.put_eof(ec);  // the client closed
          if (!ec) check(parser.is_done());
          break;
        }
        avail = std::min(wire.size(), avail + segment);
        continue;
      }
      if (ec) break;
      if (parser.is_header_done() && !parser.is_done() && check_framing(parser)) return 0;
    }
    if (ec) {
      if (auto refusal = refusal_for_read_error(ec, options)) {
        check(refusal->status == 400 || refusal->status == 413 || refusal->status == 431);
        check(nlohmann::json::accept(openai_error_body(refusal->status, refusal->message)));
      }
      return 0;
    }
    if (!parser.is_done()) return 0;
    if (check_framing(parser)) return 0;
    bool keep_alive = false;
    HttpRequest request = release_request(parser, "192.0.2.1:4000", keep_alive);
    check(!request.method.empty() && request.target.compare(0, request.path.size(), request.path) == 0);
    for (const HttpHeader& h : request.headers.all()) check(clean_header_text(h.name) && clean_header_text(h.value));
    check(request.body.size() <= options.max_body_bytes);
    check_dispatch(d, request, with_key);
    if (!keep_alive) return 0;
  }
  return 0;
}
