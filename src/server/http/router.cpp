// Router lookups.
#include "server/http/router.h"

#include <algorithm>

namespace tern::server {

void Router::add(std::string method, std::string path, Handler handler) {
  auto& list = routes_[std::move(path)];
  for (auto& r : list) {
    if (r.method == method) {
      r.handler = std::move(handler);
      return;
    }
  }
  list.push_back({std::move(method), std::move(handler)});
}

std::string Router::allowed_methods(std::string_view path) const {
  auto it = routes_.find(std::string(path));
  if (it == routes_.end()) return {};
  std::vector<std::string_view> methods;
  for (const auto& r : it->second) methods.push_back(r.method);
  // OPTIONS is always answered (CORS preflight or this Allow list).
  if (std::find(methods.begin(), methods.end(), "OPTIONS") == methods.end()) methods.push_back("OPTIONS");
  std::string out;
  for (auto m : methods) {
    if (!out.empty()) out += ", ";
    out += m;
  }
  return out;
}

Router::Match Router::find(std::string_view method, std::string_view path) const {
  Match m;
  auto it = routes_.find(std::string(path));
  if (it == routes_.end()) return m;
  m.path_known = true;
  for (const auto& r : it->second) {
    if (r.method == method) {
      m.handler = &r.handler;
      return m;
    }
  }
  // HEAD runs the GET handler; the transport sends the head without the body.
  if (method == "HEAD") {
    for (const auto& r : it->second) {
      if (r.method == "GET") {
        m.handler = &r.handler;
        return m;
      }
    }
  }
  m.allow = allowed_methods(path);
  return m;
}

std::vector<std::string> Router::paths() const {
  std::vector<std::string> out;
  for (const auto& [path, list] : routes_) out.push_back(path);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace tern::server
