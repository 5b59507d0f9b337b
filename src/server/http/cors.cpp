// CORS decisions, after Starlette's CORSMiddleware (what vLLM runs).
#include "server/http/cors.h"

#include <algorithm>

namespace tern::server {

namespace {

constexpr std::string_view kAllMethods = "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT";
// Headers browsers always allow (CORS-safelisted): never a reason to refuse.
constexpr std::string_view kSafelisted[] = {"accept", "accept-language", "content-language", "content-type"};

bool contains(const std::vector<std::string>& list, std::string_view v) {
  return std::find(list.begin(), list.end(), v) != list.end();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A token per RFC 9110 (header names); anything else is not echoed back.
bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

}  // namespace

CorsPolicy::CorsPolicy(CorsOptions options) : options_(std::move(options)) {
  any_origin_ = contains(options_.allowed_origins, "*");
  any_method_ = contains(options_.allowed_methods, "*");
  any_header_ = contains(options_.allowed_headers, "*");
}

bool CorsPolicy::origin_allowed(std::string_view origin) const {
  if (!enabled() || origin.empty()) return false;
  return any_origin_ || contains(options_.allowed_origins, origin);
}

bool CorsPolicy::method_allowed(std::string_view method) const {
  return any_method_ || contains(options_.allowed_methods, method);
}

bool CorsPolicy::header_allowed(std::string_view header) const {
  if (any_header_) return true;
  for (auto s : kSafelisted) {
    if (iequals(header, s)) return true;
  }
  for (const auto& h : options_.allowed_headers) {
    if (iequals(h, header)) return true;
  }
  return false;
}

bool CorsPolicy::is_preflight(const HttpRequest& request) const {
  return enabled() && request.method == "OPTIONS" && request.headers.has("origin") &&
         request.headers.has("access-control-request-method");
}

CorsPreflight CorsPolicy::preflight(const HttpRequest& request) const {
  CorsPreflight out;
  std::string_view origin = request.headers.get("origin").value_or("");
  std::string_view method = trim(request.headers.get("access-control-request-method").value_or(""));
  std::string_view requested = request.headers.get("access-control-request-headers").value_or("");

  std::vector<std::string_view> reasons;
  if (!origin_allowed(origin)) reasons.push_back("origin");
  if (!method_allowed(method)) reasons.push_back("method");
  std::string echoed;  // the requested headers, checked, for Allow-Headers
  bool headers_ok = true;
  while (!requested.empty()) {
    size_t comma = requested.find(',');
    std::string_view h = trim(requested.substr(0, comma));
    requested = comma == std::string_view::npos ? std::string_view() : requested.substr(comma + 1);
    if (h.empty()) continue;
    if (!is_token(h) || !header_allowed(h)) {
      headers_ok = false;
      continue;
    }
    if (!echoed.empty()) echoed += ", ";
    echoed += h;
  }
  if (!headers_ok) reasons.push_back("headers");
  if (!reasons.empty()) {
    out.reason = "Disallowed CORS";
    for (size_t i = 0; i < reasons.size(); ++i) {
      out.reason += i == 0 ? " " : ", ";
      out.reason += reasons[i];
    }
    return out;
  }
  out.allowed = true;
  bool echo_origin = !any_origin_ || options_.allow_credentials;
  out.headers.push_back({"Access-Control-Allow-Origin", echo_origin ? std::string(origin) : "*"});
  out.headers.push_back({"Access-Control-Allow-Methods",
                         any_method_ ? std::string(kAllMethods) : join(options_.allowed_methods)});
  if (!echoed.empty() || !any_header_) {
    out.headers.push_back({"Access-Control-Allow-Headers", any_header_ ? echoed : join(options_.allowed_headers)});
  }
  out.headers.push_back({"Access-Control-Max-Age", std::to_string(options_.max_age_s)});
  if (options_.allow_credentials) out.headers.push_back({"Access-Control-Allow-Credentials", "true"});
  out.headers.push_back({"Vary", "Origin"});
  return out;
}

std::vector<HttpHeader> CorsPolicy::response_headers(const HttpRequest& request) const {
  std::vector<HttpHeader> out;
  auto origin = request.headers.get("origin");
  if (!origin || !origin_allowed(*origin)) return out;
  if (any_origin_ && !options_.allow_credentials) {
    out.push_back({"Access-Control-Allow-Origin", "*"});
  } else {
    out.push_back({"Access-Control-Allow-Origin", std::string(*origin)});
    out.push_back({"Vary", "Origin"});
    if (options_.allow_credentials) out.push_back({"Access-Control-Allow-Credentials", "true"});
  }
  out.push_back({"Access-Control-Expose-Headers", "X-Request-Id"});
  return out;
}

}  // namespace tern::server
