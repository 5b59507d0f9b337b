// HttpServer: the HTTP/1.1 front of `tern serve` (Boost.Beast + Asio C++20
// coroutines behind this Beast-free header). It owns the io threads, accepts
// connections, enforces the transport limits and hands each request to the
// Dispatcher (request id, CORS, API key, Router). Handlers see only
// HttpRequest and Responder (responder.h).
//
// Threads: run() serves on `io_threads` threads (the caller is one of them)
// until shutdown completes. shutdown()/shutdown_now() may be called from any
// thread, including a signal-handling one; with handle_signals, SIGINT and
// SIGTERM call shutdown() (a second signal calls shutdown_now()).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "server/http/auth.h"
#include "server/http/cors.h"
#include "server/http/counters.h"
#include "server/http/router.h"

namespace tern::server {

// HTTPS (vLLM's --ssl-* flags): on when certfile and keyfile are given. With
// cert_reqs 1 a client may present a certificate, with 2 it must; either way
// one must chain to ca_certs.
struct TlsOptions {
  std::string certfile;  // PEM certificate chain, the server's first
  std::string keyfile;   // PEM private key of the first certificate, unencrypted
  std::string ca_certs;  // PEM CA certificates for client certificates
  int cert_reqs = 0;     // 0 none, 1 optional, 2 required (Python's ssl.CERT_*)
  // vLLM's --enable-ssl-refresh: the files are looked at every second and,
  // when they change and load, new connections use them.
  bool refresh = false;
  bool enabled() const { return !certfile.empty() || !keyfile.empty(); }
};

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 8000;  // 0 picks a free port (see HttpServer::port())
  int io_threads = 2;
  uint32_t max_header_bytes = 16 * 1024;   // request line + headers; more -> 431
  uint64_t max_body_bytes = 16ull << 20;   // more -> 413
  int64_t max_connections = 10000;         // more -> 503 and close
  // A request must arrive whole (headers and body) within read_timeout of its
  // first byte (a new connection gets as long for its first byte); a
  // keep-alive connection may sit idle for idle_timeout. Then it is closed
  // (a request partly read first gets 408).
  std::chrono::milliseconds read_timeout{60'000};
  std::chrono::milliseconds idle_timeout{75'000};
  // A response write that makes no progress for this long: the client is gone.
  std::chrono::milliseconds write_timeout{60'000};
  // Graceful shutdown: in-flight requests get this long, then their sockets
  // close (handlers see client_gone() and cancel).
  std::chrono::milliseconds shutdown_timeout{30'000};
  // Called once (on an io thread, must not block) when shutdown_timeout
  // passes with requests still in flight: the owner ends them so that their
  // handlers answer (an error, a stream's last event) and return; sockets
  // still open 2 s later are closed. Unset: they are closed at once.
  std::function<void()> on_drain_deadline;
  bool handle_signals = true;
  AuthOptions auth;
  CorsOptions cors;
  TlsOptions tls;
};

// Loads `tls`'s files as listen() will, so a bad certificate or key is
// reported before a long model load; ok when TLS is off.
Status check_tls_options(const TlsOptions& tls);

class HttpServer {
 public:
  // `counters` may be shared with a /metrics route; null makes a private one.
  HttpServer(HttpServerOptions options, Router router, std::shared_ptr<HttpCounters> counters = nullptr);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Loads the TLS certificate and key (when options.tls is on), binds and
  // listens. After it, port() is the bound port.
  Status listen();
  uint16_t port() const;

  // Serves until shutdown completes. Call once, after listen().
  void run();

  // Stops accepting, closes idle keep-alive connections, lets in-flight
  // requests finish until shutdown_timeout, then closes what is left; run()
  // returns once every connection is gone. Idempotent, non-blocking.
  void shutdown();
  // The same without the grace period.
  void shutdown_now();

  HttpCounters& counters();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tern::server
