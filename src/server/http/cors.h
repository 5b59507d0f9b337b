// CORS (`--allowed-origins`): which browser origins may call the API, the
// answer to preflight OPTIONS requests, and the Access-Control-* headers of
// actual responses. Pure decisions over an HttpRequest; immutable, thread-safe.
// Defaults follow vLLM (Starlette's CORSMiddleware): any origin, method and
// header, no credentials.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "server/http/request.h"

namespace tern::server {

struct CorsOptions {
  std::vector<std::string> allowed_origins = {"*"};  // empty: CORS off
  std::vector<std::string> allowed_methods = {"*"};
  std::vector<std::string> allowed_headers = {"*"};
  bool allow_credentials = false;
  int max_age_s = 600;
};

struct CorsPreflight {
  bool allowed = false;  // false: answer 400 (disallowed origin, method or header)
  std::string reason;    // why not, for the error message
  std::vector<HttpHeader> headers;
};

class CorsPolicy {
 public:
  explicit CorsPolicy(CorsOptions options);

  bool enabled() const { return !options_.allowed_origins.empty(); }
  bool origin_allowed(std::string_view origin) const;
  // OPTIONS with Origin and Access-Control-Request-Method, while CORS is on.
  bool is_preflight(const HttpRequest& request) const;
  CorsPreflight preflight(const HttpRequest& request) const;
  // Headers for a non-preflight response: none without an allowed Origin.
  std::vector<HttpHeader> response_headers(const HttpRequest& request) const;

 private:
  bool method_allowed(std::string_view method) const;
  bool header_allowed(std::string_view header) const;

  CorsOptions options_;
  bool any_origin_ = false;
  bool any_method_ = false;
  bool any_header_ = false;
};

}  // namespace tern::server
