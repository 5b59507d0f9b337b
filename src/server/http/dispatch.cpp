// Request dispatch: cross-cutting checks in a fixed order, then the route.
#include "server/http/dispatch.h"

#include <spdlog/spdlog.h>

#include <exception>

#include "server/http/error.h"

namespace tern::server {

namespace {

// Request text quoted back in an error message: ASCII only (the body must
// stay valid UTF-8 JSON whatever bytes came in) and bounded.
std::string quote_back(std::string_view s) {
  constexpr size_t kMax = 200;
  std::string out;
  for (char c : s.substr(0, kMax)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  if (s.size() > kMax) out += "...";
  return out;
}

}  // namespace

Dispatcher::Dispatcher(Router router, AuthOptions auth, CorsOptions cors)
    : router_(std::move(router)), auth_(std::move(auth)), cors_(std::move(cors)) {}

Task<void> Dispatcher::dispatch(HttpRequest& request, Responder& responder) const {
  if (auto id = request.headers.get("x-request-id"); id && is_usable_request_id(*id)) {
    request.request_id = std::string(*id);
  } else {
    request.request_id = make_request_id();
  }
  responder.add_common_header("X-Request-Id", request.request_id);

  // Preflights come first: browsers send them without credentials.
  if (cors_.is_preflight(request)) {
    CorsPreflight pf = cors_.preflight(request);
    if (pf.allowed) {
      co_await responder.respond(200, "text/plain; charset=utf-8", "OK", std::move(pf.headers));
    } else {
      co_await responder.respond(400, std::string(kJsonContentType), openai_error_body(400, pf.reason));
    }
    co_return;
  }
  for (auto& h : cors_.response_headers(request)) responder.add_common_header(std::move(h.name), std::move(h.value));

  if (!auth_.allows(request)) {
    std::vector<HttpHeader> extra{{"WWW-Authenticate", "Bearer"}};
    co_await responder.respond(
        401, std::string(kJsonContentType),
        openai_error_body(401, "Invalid or missing API key. Send it as 'Authorization: Bearer <key>'.",
                          "invalid_request_error"),
        std::move(extra));
    co_return;
  }

  Router::Match match = router_.find(request.method, request.path);
  if (match.handler == nullptr) {
    std::vector<HttpHeader> allow{{"Allow", match.allow}};
    if (!match.path_known) {
      co_await responder.respond(404, std::string(kJsonContentType),
                                 openai_error_body(404, "Not Found: " + quote_back(request.method) + " " +
                                                               quote_back(request.path)));
    } else if (request.method == "OPTIONS") {
      co_await responder.respond(204, "", "", std::move(allow));
    } else {
      co_await responder.respond(
          405, std::string(kJsonContentType),
          openai_error_body(405, "Method " + quote_back(request.method) + " not allowed for " + request.path +
                                     " (allowed: " + match.allow + ")"),
          std::move(allow));
    }
    co_return;
  }

  std::string failure;
  try {
    co_await (*match.handler)(request, responder);
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  if (!failure.empty()) {
    spdlog::error("request {} {} {}: handler failed: {}", request.request_id, request.method, request.path,
                  failure);
  }
  if (!responder.started()) {
    if (failure.empty()) failure = "the handler returned without a response";
    co_await responder.respond(500, std::string(kJsonContentType),
                               openai_error_body(500, "Internal error: " + quote_back(failure)));
  }
  // A stream left open is closed by the transport after dispatch returns.
}

}  // namespace tern::server
