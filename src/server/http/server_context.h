// Internal to the transport: what the acceptor (server.cpp) and the
// connections (connection.cpp) share. No Beast or Asio headers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "server/http/dispatch.h"
#include "server/http/server.h"

namespace boost::asio {
class io_context;
namespace ssl {
class context;
}  // namespace ssl
}  // namespace boost::asio

namespace tern::server {

// Lets the engine thread post wake-ups into the io_context only while it
// exists: closed (under the mutex) before the io_context is destroyed.
struct PostGate {
  std::mutex mu;
  boost::asio::io_context* ioc = nullptr;  // null once closed
};

// What the server may ask of a live connection; both calls are thread-safe.
class ConnectionControl {
 public:
  virtual ~ConnectionControl() = default;
  // Close if idle; otherwise finish the current response with Connection: close.
  virtual void begin_shutdown() = 0;
  // Close now; a running handler sees client_gone().
  virtual void force_close() = 0;
  // Logs (a warning) what the connection is doing: at the shutdown deadline,
  // what still holds the drain.
  virtual void log_busy() = 0;
};

class ServerContext {
 public:
  ServerContext(HttpServerOptions o, Router router, std::shared_ptr<HttpCounters> c)
      : options(std::move(o)),
        dispatcher(std::move(router), options.auth, options.cors),
        counters(std::move(c)),
        gate(std::make_shared<PostGate>()) {}

  const HttpServerOptions options;
  const Dispatcher dispatcher;
  const std::shared_ptr<HttpCounters> counters;
  const std::shared_ptr<PostGate> gate;
  // HTTPS: the OpenSSL context new connections take (null: plain HTTP). Set
  // by HttpServer::listen() before any connection; --enable-ssl-refresh
  // replaces it when the certificate files change (connections keep theirs).
  std::shared_ptr<boost::asio::ssl::context> tls() const;
  void set_tls(std::shared_ptr<boost::asio::ssl::context> tls);

  // Registers a connection; 0 if the server is closing (close it at once).
  uint64_t add(std::weak_ptr<ConnectionControl> conn);
  void remove(uint64_t id);
  // Marks the server closing and returns the live connections.
  std::vector<std::shared_ptr<ConnectionControl>> begin_closing();
  std::vector<std::shared_ptr<ConnectionControl>> live();
  bool closing() const;
  size_t size() const;
  // Called (on some io thread) when closing and the last connection is gone.
  void set_on_drained(std::function<void()> f);

 private:
  mutable std::mutex mu_;
  std::shared_ptr<boost::asio::ssl::context> tls_;
  bool closing_ = false;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, std::weak_ptr<ConnectionControl>> conns_;
  std::function<void()> on_drained_;
};

}  // namespace tern::server
