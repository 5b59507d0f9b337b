// HttpServer: the io_context and its threads, the acceptor, signals and the
// graceful-shutdown sequence (stop accepting -> close idle connections ->
// wait for in-flight requests until the deadline -> have the owner end the
// rest (on_drain_deadline) -> close what is still open -> stop).
// Connections themselves live in connection.cpp.
#include "server/http/server.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <csignal>
#include <filesystem>
#include <spdlog/spdlog.h>
#include <thread>
#include <vector>

#include "base/thread_name.h"
#include "server/http/connection.h"
#include "server/http/tls_context.h"

namespace tern::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {
// After on_drain_deadline, handlers get this long to answer and return before
// their sockets close; after that, as long to notice before the io_context
// stops regardless.
constexpr auto kForceGrace = std::chrono::seconds(2);
// --enable-ssl-refresh: how often the certificate files are looked at.
constexpr auto kTlsRefreshInterval = std::chrono::seconds(1);

// What says a TLS file changed: its modification time and size (0, 0 when
// it cannot be read, which is a change too).
std::vector<std::pair<int64_t, uintmax_t>> tls_file_stamps(const TlsOptions& tls) {
  std::vector<std::pair<int64_t, uintmax_t>> stamps;
  for (const std::string* path : {&tls.certfile, &tls.keyfile, &tls.ca_certs}) {
    if (path->empty()) continue;
    std::error_code ec;
    const auto time = std::filesystem::last_write_time(*path, ec);
    const uintmax_t size = ec ? 0 : std::filesystem::file_size(*path, ec);
    stamps.emplace_back(ec ? 0 : time.time_since_epoch().count(), ec ? 0 : size);
  }
  return stamps;
}
}  // namespace

struct HttpServer::Impl {
  Impl(HttpServerOptions options, Router router, std::shared_ptr<HttpCounters> counters)
      : ctx(std::make_shared<ServerContext>(std::move(options), std::move(router),
                                            counters ? std::move(counters) : std::make_shared<HttpCounters>())) {
    std::lock_guard lock(ctx->gate->mu);
    ctx->gate->ioc = &ioc;
  }
  ~Impl() { close_gate(); }

  void close_gate() {
    std::lock_guard lock(ctx->gate->mu);
    ctx->gate->ioc = nullptr;
  }

  Task<void> accept_loop();
  Task<void> watch_tls();           // on `strand`: --enable-ssl-refresh
  void wait_signal();
  void begin_shutdown(bool force);  // on `strand`
  void drain_deadline();            // on `strand`
  void force_all();                 // on `strand`
  void finish();                    // on `strand`

  // Declared first: destroyed last, after every object that uses it.
  asio::io_context ioc;
  asio::strand<asio::io_context::executor_type> strand{ioc.get_executor()};
  tcp::acceptor acceptor{ioc};
  asio::signal_set signals{ioc};
  asio::steady_timer shutdown_timer{strand};
  asio::steady_timer tls_timer{strand};
  std::shared_ptr<ServerContext> ctx;
  uint16_t port = 0;
  bool shutting_down = false;  // on `strand`
  bool forced = false;         // on `strand`
  bool finished = false;       // on `strand`
};

Task<void> HttpServer::Impl::accept_loop() {
  asio::steady_timer backoff(strand);
  while (acceptor.is_open()) {
    tcp::socket socket(asio::make_strand(ioc));
    error_code ec;
    co_await acceptor.async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (!acceptor.is_open() || ec == asio::error::operation_aborted) break;
    if (ec) {
      // Out of file descriptors and the like: back off instead of spinning.
      spdlog::warn("http: accept failed: {}", ec.message());
      backoff.expires_after(std::chrono::milliseconds(50));
      co_await backoff.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    if (ctx->counters->connections_open() >= ctx->options.max_connections) {
      reject_connection(std::move(socket), ctx);
    } else {
      start_connection(std::move(socket), ctx);
    }
  }
}

Task<void> HttpServer::Impl::watch_tls() {
  const TlsOptions& files = ctx->options.tls;
  auto seen = tls_file_stamps(files);
  while (!shutting_down) {
    tls_timer.expires_after(kTlsRefreshInterval);
    error_code ec;
    co_await tls_timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec || shutting_down) break;
    auto now = tls_file_stamps(files);
    if (now == seen) continue;
    seen = std::move(now);
    // A renewal that rewrites the certificate and the key one after the other
    // fails here in between (the key does not match yet) and succeeds once both are written.
    auto fresh = make_tls_context(files);
    if (!fresh.is_ok()) {
      spdlog::warn("https: the certificate files changed but do not load; new connections keep the previous "
                   "ones: {}",
                   fresh.status().to_string());
      continue;
    }
    ctx->set_tls(std::move(fresh).value());
    ctx->counters->on_tls_reload();
    spdlog::info("https: certificate files reloaded ({}); new connections use them", files.certfile);
  }
}

void HttpServer::Impl::wait_signal() {
  signals.async_wait([this](const error_code& ec, int signo) {
    if (ec) return;
    asio::post(strand, [this, signo] {
      spdlog::info("http: signal {}: {}", signo, shutting_down ? "closing all connections now" : "shutting down");
      begin_shutdown(shutting_down);
    });
    wait_signal();
  });
}

void HttpServer::Impl::begin_shutdown(bool force) {
  if (finished) return;
  if (!shutting_down) {
    shutting_down = true;
    error_code ec;
    acceptor.close(ec);
    ctx->set_on_drained([this] { asio::post(strand, [this] { finish(); }); });
    auto conns = ctx->begin_closing();
    if (conns.empty()) {
      finish();
      return;
    }
    for (auto& c : conns) c->begin_shutdown();
    shutdown_timer.expires_after(ctx->options.shutdown_timeout);
    shutdown_timer.async_wait([this](const error_code& e) {
      if (!e) drain_deadline();
    });
  }
  if (force) force_all();
}

void HttpServer::Impl::drain_deadline() {
  if (forced || finished) return;
  if (!ctx->options.on_drain_deadline) {
    force_all();
    return;
  }
  // The owner ends what still runs (the engine aborts it), so handlers answer
  // with an error and end their streams properly; sockets close only if they
  // have not returned within the grace.
  auto busy = ctx->live();
  spdlog::warn("http: {} connection(s) still busy at the shutdown deadline; ending their requests", busy.size());
  for (auto& c : busy) c->log_busy();
  ctx->options.on_drain_deadline();
  shutdown_timer.expires_after(kForceGrace);
  shutdown_timer.async_wait([this](const error_code& e) {
    if (!e) force_all();
  });
}

void HttpServer::Impl::force_all() {
  if (forced || finished) return;
  forced = true;
  auto conns = ctx->live();
  if (!conns.empty()) spdlog::warn("http: closing {} connection(s) still busy at the shutdown deadline", conns.size());
  for (auto& c : conns) c->force_close();
  shutdown_timer.cancel();
  shutdown_timer.expires_after(kForceGrace);
  shutdown_timer.async_wait([this](const error_code& e) {
    if (!e) finish();
  });
}

void HttpServer::Impl::finish() {
  if (finished) return;
  finished = true;
  error_code ec;
  signals.cancel(ec);
  shutdown_timer.cancel();
  tls_timer.cancel();
  ioc.stop();
}

Status check_tls_options(const TlsOptions& tls) {
  if (!tls.enabled()) return Status::ok();
  return make_tls_context(tls).status();
}

HttpServer::HttpServer(HttpServerOptions options, Router router, std::shared_ptr<HttpCounters> counters)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(router), std::move(counters))) {}

HttpServer::~HttpServer() = default;

Status HttpServer::listen() {
  const HttpServerOptions& opt = impl_->ctx->options;
  if (opt.tls.enabled()) {
    auto tls = make_tls_context(opt.tls);
    if (!tls.is_ok()) return tls.status();
    impl_->ctx->set_tls(std::move(tls).value());
  }
  error_code ec;
  asio::ip::address address = asio::ip::make_address(opt.host, ec);
  tcp::endpoint endpoint;
  if (ec) {
    tcp::resolver resolver(impl_->ioc);
    auto results = resolver.resolve(opt.host, std::to_string(opt.port), ec);
    if (ec || results.empty()) return invalid_argument("cannot resolve host '" + opt.host + "': " + ec.message());
    endpoint = results.begin()->endpoint();
  } else {
    endpoint = tcp::endpoint(address, opt.port);
  }
  auto& acceptor = impl_->acceptor;
  std::string where = opt.host + ":" + std::to_string(opt.port);
  if (acceptor.open(endpoint.protocol(), ec)) return io_error("socket for " + where + ": " + ec.message());
  acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (acceptor.bind(endpoint, ec)) return io_error("cannot bind " + where + ": " + ec.message());
  if (acceptor.listen(asio::socket_base::max_listen_connections, ec)) {
    return io_error("cannot listen on " + where + ": " + ec.message());
  }
  impl_->port = acceptor.local_endpoint(ec).port();
  return Status::ok();
}

uint16_t HttpServer::port() const { return impl_->port; }

void HttpServer::run() {
  Impl& impl = *impl_;
  if (impl.ctx->options.handle_signals) {
    impl.signals.add(SIGINT);
    impl.signals.add(SIGTERM);
    impl.wait_signal();
  }
  asio::co_spawn(impl.strand, impl.accept_loop(), asio::detached);
  if (impl.ctx->options.tls.enabled() && impl.ctx->options.tls.refresh) {
    asio::co_spawn(impl.strand, impl.watch_tls(), asio::detached);
  }
  int n = std::max(1, impl.ctx->options.io_threads);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n - 1));
  for (int i = 1; i < n; ++i) {
    threads.emplace_back([&impl, i] {
      name_this_thread("tern-http-" + std::to_string(i));
      impl.ioc.run();
    });
  }
  impl.ioc.run();
  for (auto& t : threads) t.join();
  impl.close_gate();
}

void HttpServer::shutdown() {
  asio::post(impl_->strand, [impl = impl_.get()] { impl->begin_shutdown(false); });
}

void HttpServer::shutdown_now() {
  asio::post(impl_->strand, [impl = impl_.get()] { impl->begin_shutdown(true); });
}

HttpCounters& HttpServer::counters() { return *impl_->ctx->counters; }

}  // namespace tern::server
