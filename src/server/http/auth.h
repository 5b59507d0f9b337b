// API-key check (`--api-key`): requests must carry `Authorization: Bearer
// <key>`, compared in constant time, except on open paths (health, metrics)
// and CORS preflights. Immutable after construction; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "server/http/request.h"

namespace tern::server {

struct AuthOptions {
  std::string api_key;  // empty: no check
  // Paths that GET and HEAD reach without the key (other methods need it).
  std::vector<std::string> open_paths = {"/health", "/metrics", "/ping", "/version", "/"};
};

// True iff a == b. The time taken depends only on the length of `secret`,
// never on where the first difference is or on the length of `given`.
bool constant_time_equal(std::string_view given, std::string_view secret);

// The token of an `Authorization: Bearer <token>` value ("" if not Bearer).
std::string_view bearer_token(std::string_view authorization);

class ApiKeyAuth {
 public:
  explicit ApiKeyAuth(AuthOptions options) : options_(std::move(options)) {}
  bool enabled() const { return !options_.api_key.empty(); }
  bool is_open_path(std::string_view path) const;
  // True if no key is set, the request reads an open path, or it carries the key.
  bool allows(const HttpRequest& request) const;

 private:
  AuthOptions options_;
};

}  // namespace tern::server
