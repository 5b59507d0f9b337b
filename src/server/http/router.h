// Router: exact-path routes per method. A lookup tells a found handler from an
// unknown path (404) and a known path with the wrong method (405 + Allow).
// Built before the server starts; read-only (so thread-safe) afterwards.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "server/http/responder.h"

namespace tern::server {

class Router {
 public:
  // Adds or replaces the handler for (method, path); `path` is matched
  // exactly, without the query string. HEAD falls back to the GET handler.
  void add(std::string method, std::string path, Handler handler);
  void get(std::string path, Handler handler) { add("GET", std::move(path), std::move(handler)); }
  void post(std::string path, Handler handler) { add("POST", std::move(path), std::move(handler)); }

  struct Match {
    const Handler* handler = nullptr;  // null: see path_known
    bool path_known = false;           // false -> 404, true with no handler -> 405
    std::string allow;                 // "GET, OPTIONS" for the Allow header
  };
  Match find(std::string_view method, std::string_view path) const;

  // "GET, POST" for a known path, "" otherwise.
  std::string allowed_methods(std::string_view path) const;
  std::vector<std::string> paths() const;

 private:
  struct Route {
    std::string method;
    Handler handler;
  };
  std::unordered_map<std::string, std::vector<Route>> routes_;  // by path
};

}  // namespace tern::server
