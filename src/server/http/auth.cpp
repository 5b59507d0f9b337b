// Constant-time key comparison and Bearer parsing.
#include "server/http/auth.h"

#include <cstdint>

namespace tern::server {

bool constant_time_equal(std::string_view given, std::string_view secret) {
  // Walk the whole secret whatever `given` holds; a length mismatch only sets
  // a bit. The empty asm hides `acc` from the optimizer so the loop cannot
  // stop at the first difference.
  uint8_t acc = given.size() == secret.size() ? 0 : 1;
  for (size_t i = 0; i < secret.size(); ++i) {
    uint8_t g = i < given.size() ? static_cast<uint8_t>(given[i]) : 0;
    acc |= static_cast<uint8_t>(g ^ static_cast<uint8_t>(secret[i]));
#if defined(__GNUC__)
    __asm__ __volatile__("" : "+r"(acc));
#endif
  }
  return acc == 0;
}

std::string_view bearer_token(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer";
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  authorization = trim(authorization);
  if (authorization.size() <= kScheme.size() || !iequals(authorization.substr(0, kScheme.size()), kScheme)) {
    return {};
  }
  char sep = authorization[kScheme.size()];
  if (sep != ' ' && sep != '\t') return {};
  return trim(authorization.substr(kScheme.size() + 1));
}

bool ApiKeyAuth::is_open_path(std::string_view path) const {
  for (const auto& p : options_.open_paths) {
    if (p == path) return true;
  }
  return false;
}

bool ApiKeyAuth::allows(const HttpRequest& request) const {
  // Open paths are open to reads only: POST / (TGI's generate) still needs the key.
  bool read = request.method == "GET" || request.method == "HEAD";
  if (!enabled() || (read && is_open_path(request.path))) return true;
  auto header = request.headers.get("authorization");
  if (!header) return false;
  std::string_view token = bearer_token(*header);
  if (token.empty()) return false;
  return constant_time_equal(token, options_.api_key);
}

}  // namespace tern::server
