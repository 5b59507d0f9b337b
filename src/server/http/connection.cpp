// Connection: one TCP connection's session, the code that reads sockets with
// Beast (its request parser, set up by beast_request.h). A coroutine per
// connection on its own strand reads a request, dispatches it with a
// StreamResponder, and loops while keep-alive holds. Around it: a watchdog
// timer for read/idle/write deadlines (a request begun but not whole by its
// read deadline gets 408), a read kept pending on the socket while
// the handler runs (so a disconnect is seen at once), and the engine-event
// wake-up that handlers await. One template serves plain TCP and TLS (Asio's
// OpenSSL stream): they differ only in the handshake, how an idle connection
// waits for its next request, and the close_notify at the end.
#include "server/http/connection.h"

#include <array>
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <type_traits>

#include "server/http/beast_request.h"
#include "server/http/error.h"
#include "server/http/response_head.h"
#include "server/http/server_context.h"

namespace tern::server {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using TlsStream = asio::ssl::stream<tcp::socket>;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

constexpr auto kNever = Clock::time_point::max();
// While a handler runs, pipelined bytes are buffered up to this much; past it
// the pending read stops and a disconnect shows up as a failed write instead.
constexpr size_t kMaxBufferedWhileHandling = 1 << 20;
constexpr size_t kMonitorReadSize = 4096;
// After an error response, how long unread request bytes are drained so the
// client sees the response instead of a reset.
constexpr auto kLingerTime = std::chrono::seconds(2);

auto redirect(error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

std::string format_seconds(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

std::string format_remote(const tcp::socket& socket) {
  error_code ec;
  auto ep = socket.remote_endpoint(ec);
  if (ec) return "unknown";
  std::string addr = ep.address().to_string();
  if (ep.address().is_v6()) addr = "[" + addr + "]";
  return addr + ":" + std::to_string(ep.port());
}

tcp::socket& tcp_socket(tcp::socket& s) { return s; }
tcp::socket& tcp_socket(TlsStream& s) { return s.next_layer(); }

// A client that spoke plain HTTP to the HTTPS port (OpenSSL saw a request line).
bool is_plain_http_on_tls(const error_code& ec) {
  return ec.category() == asio::error::get_ssl_category() && ERR_GET_REASON(ec.value()) == SSL_R_HTTP_REQUEST;
}

struct EventSignal;

// What an EventSignal wakes: a connection of either stream type.
class EventTarget : public ConnectionControl {
 public:
  // Any thread: wakes the handler waiting on `signal` (if still current).
  virtual void post_event(std::shared_ptr<EventSignal> signal) = 0;
};

// Engine thread -> connection strand wake-up for one request. The engine
// keeps it (inside the notify callback) as long as it likes; it holds no
// executor, only the gate, so it is safe after the connection or server died.
struct EventSignal : std::enable_shared_from_this<EventSignal> {
  EventSignal(std::shared_ptr<PostGate> g, std::weak_ptr<EventTarget> c) : gate(std::move(g)), conn(std::move(c)) {}
  void notify();

  std::shared_ptr<PostGate> gate;
  std::weak_ptr<EventTarget> conn;
  std::atomic<bool> posted{false};  // a wake-up is queued: later calls coalesce
};

template <class Stream>
class StreamResponder;

// Stream is tcp::socket (HTTP) or TlsStream (HTTPS).
template <class Stream>
class Connection final : public EventTarget, public std::enable_shared_from_this<Connection<Stream>> {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

  // tls_context: the OpenSSL context stream's session came from, held as long
  // as the stream (--enable-ssl-refresh may replace the server's).
  Connection(Stream stream, std::shared_ptr<ServerContext> ctx,
             std::shared_ptr<asio::ssl::context> tls_context = nullptr)
      : tls_context_(std::move(tls_context)),
        stream_(std::move(stream)),
        socket_(tcp_socket(stream_)),
        strand_(socket_.get_executor()),
        ctx_(std::move(ctx)),
        watchdog_timer_(strand_),
        wake_timer_(strand_),
        monitor_timer_(strand_) {
    ctx_->counters->on_connection_open();
  }
  ~Connection() override { ctx_->counters->on_connection_close(); }

  void start() { asio::co_spawn(strand_, run(this->shared_from_this()), asio::detached); }

  // A connection still reading a request's head has no request yet: it is
  // closed like an idle one (as uvicorn does), so a client that began one
  // (or a request line trickling in) does not hold the drain for up to
  // --http-read-timeout. One whose head arrived is reading its body: that
  // request is in flight and finishes.
  void begin_shutdown() override {
    asio::post(strand_, [self = this->shared_from_this()] {
      self->shutting_down_ = true;
      if (self->phase_ == Phase::kIdle || (self->phase_ == Phase::kReading && !self->head_read_)) {
        self->close_socket();
      }
    });
  }
  void force_close() override {
    asio::post(strand_, [self = this->shared_from_this()] {
      self->shutting_down_ = true;
      self->mark_gone();
      self->close_socket();
    });
  }

  void log_busy() override {
    asio::post(strand_, [self = this->shared_from_this()] {
      static constexpr const char* kPhases[] = {"idle", "reading a request", "handling", "closing"};
      spdlog::warn("http: connection {} still open: {}{} ({} bytes buffered, {} requests served){}{}{}{}", self->remote_,
                   self->phase_ == Phase::kReading && self->head_read_ ? "reading a request's body"
                                                                       : kPhases[static_cast<int>(self->phase_)],
                   self->phase_ == Phase::kHandling ? " " + self->target_ : std::string(), self->buffer_.size(),
                   self->requests_,
                   self->monitor_pending_ ? ", read pending" : "", self->gone_ ? ", client gone" : "",
                   self->closed_ ? ", socket closed" : "", self->shutting_down_ ? ", told to close" : "");
    });
  }

  void post_event(std::shared_ptr<EventSignal> signal) override {
    asio::post(strand_, [self = this->shared_from_this(), signal = std::move(signal)] {
      if (signal.get() != self->current_signal_) return;  // a wake-up for an earlier request
      self->signalled_ = true;
      self->wake_timer_.cancel();
    });
  }

 private:
  friend class StreamResponder<Stream>;
  enum class Phase { kIdle, kReading, kHandling, kClosing };

  Task<void> run(std::shared_ptr<Connection> self);
  Task<bool> handshake();
  Task<bool> wait_for_request();
  Task<void> serve();
  Task<void> watchdog(std::shared_ptr<Connection> self);  // `self` keeps the connection alive
  Task<bool> handle_read_error(const error_code& ec);
  Task<void> send_error_and_close(int status, std::string message);
  Task<void> lingering_close();
  Task<bool> write(std::array<asio::const_buffer, 3> buffers);

  void set_deadline(Clock::time_point t) {
    deadline_ = t;
    if (t < watchdog_timer_.expiry()) watchdog_timer_.cancel();  // re-arm sooner
  }
  void mark_gone() {
    if (gone_) return;
    gone_ = true;
    wake_timer_.cancel();
  }
  void close_socket() {
    if (closed_) return;
    closed_ = true;
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    watchdog_timer_.cancel();
    wake_timer_.cancel();
  }

  void start_monitor();
  void on_monitor_read(const error_code& ec, size_t n);
  Task<void> stop_monitor();

  std::shared_ptr<asio::ssl::context> tls_context_;  // outlives stream_
  Stream stream_;
  tcp::socket& socket_;  // stream_ itself, or the TCP socket under TLS
  asio::any_io_executor strand_;
  std::shared_ptr<ServerContext> ctx_;
  beast::flat_buffer buffer_;
  asio::steady_timer watchdog_timer_;
  asio::steady_timer wake_timer_;     // wait_event sleeps on it
  asio::steady_timer monitor_timer_;  // stop_monitor sleeps on it
  Clock::time_point deadline_ = kNever;
  Phase phase_ = Phase::kIdle;
  uint64_t id_ = 0;
  std::string remote_;
  std::string target_;           // the request being handled: method and path
  int64_t requests_ = 0;         // requests handled
  bool head_read_ = false;       // the reading phase has the request's head
  bool read_timed_out_ = false;  // the request did not arrive whole within read_timeout
  bool gone_ = false;           // the peer left (or we closed on it)
  bool closed_ = false;         // the socket is closed
  bool shutting_down_ = false;  // no more requests on this connection
  bool monitoring_ = false;     // a handler runs: keep a read pending
  bool monitor_pending_ = false;
  const EventSignal* current_signal_ = nullptr;
  bool signalled_ = false;
};

void EventSignal::notify() {
  if (posted.exchange(true, std::memory_order_acq_rel)) return;
  std::lock_guard lock(gate->mu);
  if (gate->ioc == nullptr) return;
  // First to the io_context, then (if the connection lives) to its strand:
  // this object never holds the strand, which must not outlive the server.
  asio::post(*gate->ioc, [self = shared_from_this()] {
    self->posted.store(false, std::memory_order_release);
    auto conn = self->conn.lock();
    if (!conn) return;
    conn->post_event(self);
  });
}

// The Responder of one request on a Connection; lives in the session frame.
template <class Stream>
class StreamResponder final : public Responder {
 public:
  StreamResponder(Connection<Stream>& conn, const HttpRequest& request, bool keep_alive)
      : c_(conn), version_(request.version), keep_alive_(keep_alive), head_only_(request.method == "HEAD") {}
  ~StreamResponder() override {
    c_.current_signal_ = nullptr;
    c_.signalled_ = false;
  }

  Task<bool> respond(int status, std::string content_type, std::string body,
                     std::vector<HttpHeader> extra_headers) override {
    if (state_ != State::kNone || c_.gone_) co_return false;
    state_ = State::kDone;
    c_.ctx_->counters->on_response(status);
    ResponseFraming framing{body.size(), false, keep_alive(), version_};
    std::string head = response_head(status, content_type, framing, common_headers(), extra_headers);
    if (head_only_) body.clear();
    bool ok = co_await c_.write({asio::buffer(head), asio::buffer(body), asio::const_buffer()});
    completed_ = ok;
    co_return ok;
  }

  Task<bool> begin_stream(int status, std::string content_type, std::vector<HttpHeader> extra_headers) override {
    if (state_ != State::kNone || c_.gone_) co_return false;
    state_ = head_only_ ? State::kDone : State::kStreaming;
    chunked_ = version_ >= 11;
    c_.ctx_->counters->on_response(status);
    // Without chunking (HTTP/1.0) the end of the body is the end of the connection.
    ResponseFraming framing{std::nullopt, chunked_, chunked_ && keep_alive(), version_};
    if (!chunked_) keep_alive_ = false;
    extra_headers.push_back({"Cache-Control", "no-cache"});
    // Tells nginx not to buffer the stream.
    extra_headers.push_back({"X-Accel-Buffering", "no"});
    std::string head = response_head(status, content_type, framing, common_headers(), extra_headers);
    bool ok = co_await c_.write({asio::buffer(head), asio::const_buffer(), asio::const_buffer()});
    completed_ = ok && head_only_;
    co_return ok;
  }

  Task<bool> write_chunk(std::string_view data) override {
    if (state_ != State::kStreaming || c_.gone_) co_return false;
    if (data.empty()) co_return true;  // an empty chunk would end the stream
    if (!chunked_) co_return co_await c_.write({asio::buffer(data), asio::const_buffer(), asio::const_buffer()});
    std::string size_line = chunk_size_line(data.size());
    co_return co_await c_.write({asio::buffer(size_line), asio::buffer(data), asio::buffer("\r\n", 2)});
  }

  Task<bool> end_stream() override {
    if (state_ != State::kStreaming) co_return false;
    state_ = State::kDone;
    if (c_.gone_) co_return false;
    bool ok = true;
    if (chunked_) ok = co_await c_.write({asio::buffer("0\r\n\r\n", 5), asio::const_buffer(), asio::const_buffer()});
    completed_ = ok;
    co_return ok;
  }

  bool client_gone() const override { return c_.gone_; }
  bool started() const override { return state_ != State::kNone; }

  std::function<void()> event_notifier() override {
    if (!signal_) {
      signal_ = std::make_shared<EventSignal>(c_.ctx_->gate, std::weak_ptr<EventTarget>(c_.weak_from_this()));
      c_.current_signal_ = signal_.get();
      c_.signalled_ = false;
    }
    return [signal = signal_] { signal->notify(); };
  }

  Task<Wake> wait_event(std::chrono::milliseconds timeout) override {
    auto deadline = Clock::now() + timeout;
    while (true) {
      if (c_.gone_) co_return Wake::kClientGone;
      if (c_.signalled_) {
        c_.signalled_ = false;
        co_return Wake::kEvent;
      }
      if (Clock::now() >= deadline) co_return Wake::kTimeout;
      c_.wake_timer_.expires_at(deadline);
      error_code ec;
      co_await c_.wake_timer_.async_wait(redirect(ec));
    }
  }

  // After the handler: ends a stream it left open.
  Task<void> finish() {
    if (state_ == State::kStreaming) co_await end_stream();
    if (c_.gone_ && !completed_) c_.ctx_->counters->on_client_disconnect();
  }
  // The connection may carry another request.
  bool reusable() const { return completed_ && keep_alive() && !c_.gone_; }

 private:
  enum class State { kNone, kStreaming, kDone };
  bool keep_alive() const { return keep_alive_ && !c_.shutting_down_; }

  Connection<Stream>& c_;
  int version_;
  bool keep_alive_;
  bool head_only_;
  bool chunked_ = false;
  bool completed_ = false;  // the whole response went out
  State state_ = State::kNone;
  std::shared_ptr<EventSignal> signal_;
};

template <class Stream>
Task<void> Connection<Stream>::run(std::shared_ptr<Connection> self) {
  remote_ = format_remote(socket_);
  id_ = ctx_->add(this->weak_from_this());
  if (id_ != 0) {
    error_code ec;
    socket_.set_option(tcp::no_delay(true), ec);  // SSE chunks go out at once
    asio::co_spawn(strand_, watchdog(self), asio::detached);
    try {
      if (co_await handshake()) co_await serve();
      if constexpr (kTls) {
        // close_notify tells the client the response ended here, not cut short.
        if (!closed_ && !gone_) {
          set_deadline(Clock::now() + kLingerTime);
          co_await stream_.async_shutdown(redirect(ec));
        }
      }
    } catch (const std::exception&) {
      // bad_alloc and the like: drop this connection, keep the server.
    }
  }
  close_socket();
  if (id_ != 0) ctx_->remove(id_);
}

// TLS: the handshake, within read_timeout. A client that sent plain HTTP is
// told in plain HTTP to use https.
template <class Stream>
Task<bool> Connection<Stream>::handshake() {
  if constexpr (!kTls) {
    co_return true;
  } else {
    set_deadline(Clock::now() + ctx_->options.read_timeout);
    error_code ec;
    co_await stream_.async_handshake(asio::ssl::stream_base::server, redirect(ec));
    set_deadline(kNever);
    if (!ec) co_return true;
    if (closed_) co_return false;  // timed out or shut down
    ctx_->counters->on_tls_handshake_failure();
    spdlog::debug("http: TLS handshake with {} failed: {}", remote_, ec.message());
    if (is_plain_http_on_tls(ec)) {
      phase_ = Phase::kClosing;
      ctx_->counters->on_response(400);
      std::string body = openai_error_body(400, "This port serves HTTPS: use an https:// URL");
      ResponseFraming framing{body.size(), false, false, 11};
      std::string head = response_head(400, kJsonContentType, framing, {}, {});
      set_deadline(Clock::now() + ctx_->options.write_timeout);
      co_await asio::async_write(socket_, std::array{asio::buffer(head), asio::buffer(body)}, redirect(ec));
      if (!ec) co_await lingering_close();
    }
    co_return false;
  }
}

// Idle: waits until the next request's first bytes can be read (false: the
// client left or the connection is closing). Plain TCP waits on the socket;
// TLS must read, as a record may already sit decrypted in OpenSSL's buffers.
//
// A wait on the socket can end with nothing to read: Asio completes it on
// any readiness event the reactor handles after the wait began, and an
// event harvested while the previous request's last bytes sat in the socket
// is still handled after a read took them (the reactor queues it behind
// other work, so the window is wide on a busy machine). Taken as a request,
// such a wake-up would put an idle keep-alive connection in the reading
// phase: timed by --http-read-timeout (then a 408 nobody asked for) and not
// closed at shutdown, which waited for it until --shutdown-timeout. So the
// wait ends only when a byte, the end of the stream or an error is there.
template <class Stream>
Task<bool> Connection<Stream>::wait_for_request() {
  error_code ec;
  if constexpr (kTls) {
    size_t n = co_await stream_.async_read_some(buffer_.prepare(kMonitorReadSize), redirect(ec));
    if (!ec) buffer_.commit(n);
  } else {
    while (true) {
      co_await socket_.async_wait(tcp::socket::wait_read, redirect(ec));
      if (ec || closed_ || shutting_down_) break;
      char byte;
      if (::recv(socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) >= 0) break;  // a byte, or the end
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) break;  // an error the read will report
    }
  }
  co_return !ec && !closed_ && !shutting_down_;
}

template <class Stream>
Task<void> Connection<Stream>::watchdog([[maybe_unused]] std::shared_ptr<Connection> self) {
  error_code ec;
  while (!closed_) {
    watchdog_timer_.expires_at(deadline_);
    co_await watchdog_timer_.async_wait(redirect(ec));
    if (closed_) break;
    if (Clock::now() >= deadline_) {
      if (phase_ == Phase::kReading && !read_timed_out_) {
        // A request begun but not whole in time (a slowloris trickle): the
        // read is cancelled and serve() answers 408 within the linger time.
        read_timed_out_ = true;
        deadline_ = Clock::now() + kLingerTime;
        socket_.cancel(ec);
        continue;
      }
      mark_gone();
      close_socket();
    }
  }
}

template <class Stream>
Task<bool> Connection<Stream>::write(std::array<asio::const_buffer, 3> buffers) {
  if (gone_ || closed_) co_return false;
  set_deadline(Clock::now() + ctx_->options.write_timeout);
  error_code ec;
  if constexpr (kTls) {
    // One TLS record (and one send) per response piece rather than one per buffer.
    std::string joined;
    joined.reserve(asio::buffer_size(buffers));
    for (const auto& b : buffers) joined.append(static_cast<const char*>(b.data()), b.size());
    co_await asio::async_write(stream_, asio::buffer(joined), redirect(ec));
  } else {
    co_await asio::async_write(stream_, buffers, redirect(ec));
  }
  set_deadline(kNever);
  if (ec) {
    mark_gone();
    co_return false;
  }
  co_return true;
}

template <class Stream>
Task<void> Connection<Stream>::serve() {
  const HttpServerOptions& opt = ctx_->options;
  bool first = true;
  while (!closed_ && !shutting_down_) {
    error_code ec;
    if (buffer_.size() == 0) {
      phase_ = Phase::kIdle;
      set_deadline(Clock::now() + (first ? opt.read_timeout : opt.idle_timeout));
      if (!co_await wait_for_request()) co_return;
    }
    first = false;
    phase_ = Phase::kReading;
    head_read_ = false;
    set_deadline(Clock::now() + opt.read_timeout);

    BeastRequestParser parser;
    apply_limits(parser, opt);
    co_await http::async_read_header(stream_, buffer_, parser, redirect(ec));
    if (ec) {
      co_await handle_read_error(ec);
      co_return;
    }
    head_read_ = true;
    if (auto refusal = check_framing(parser)) {
      co_await send_error_and_close(refusal->status, std::move(refusal->message));
      co_return;
    }
    if (!parser.is_done()) {
      if (expects_continue(parser)) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        if (!co_await write({asio::buffer(kContinue.data(), kContinue.size()), asio::const_buffer(),
                             asio::const_buffer()})) {
          co_return;
        }
        set_deadline(Clock::now() + opt.read_timeout);
      }
      co_await http::async_read(stream_, buffer_, parser, redirect(ec));
      if (ec) {
        co_await handle_read_error(ec);
        co_return;
      }
    }
    set_deadline(kNever);

    bool keep_alive = false;
    HttpRequest request = release_request(parser, remote_, keep_alive);

    phase_ = Phase::kHandling;
    target_ = request.method + " " + request.path;
    ++requests_;
    bool reusable = false;
    {
      struct InFlight {
        explicit InFlight(HttpCounters& c) : counters(c) { counters.on_request_start(); }
        ~InFlight() { counters.on_request_end(); }
        HttpCounters& counters;
      } in_flight(*ctx_->counters);
      StreamResponder<Stream> responder(*this, request, keep_alive);
      start_monitor();
      co_await ctx_->dispatcher.dispatch(request, responder);
      co_await responder.finish();
      co_await stop_monitor();
      reusable = responder.reusable();
    }
    if (!reusable) co_return;
  }
}

// Answers what can be answered (limits, malformed requests) and closes.
template <class Stream>
Task<bool> Connection<Stream>::handle_read_error(const error_code& ec) {
  const HttpServerOptions& opt = ctx_->options;
  if (closed_) co_return false;  // timed out (watchdog) or shut down
  if (read_timed_out_) {
    co_await send_error_and_close(408, "Request not received in time: the request line, headers and body must "
                                       "arrive within " + format_seconds(opt.read_timeout) + " of its first byte");
    co_return false;
  }
  if (auto refusal = refusal_for_read_error(ec, opt)) {
    co_await send_error_and_close(refusal->status, std::move(refusal->message));
  }
  co_return false;
}

template <class Stream>
Task<void> Connection<Stream>::send_error_and_close(int status, std::string message) {
  phase_ = Phase::kClosing;
  ctx_->counters->on_response(status);
  std::string body = openai_error_body(status, message);
  ResponseFraming framing{body.size(), false, false, 11};
  std::string head = response_head(status, kJsonContentType, framing, {}, {});
  if (co_await write({asio::buffer(head), asio::buffer(body), asio::const_buffer()})) co_await lingering_close();
}

template <class Stream>
Task<void> Connection<Stream>::lingering_close() {
  error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  set_deadline(Clock::now() + kLingerTime);
  std::array<char, 8192> scratch;
  while (!closed_) {
    co_await socket_.async_read_some(asio::buffer(scratch), redirect(ec));
    if (ec) break;
  }
  close_socket();
}

template <class Stream>
void Connection<Stream>::start_monitor() {
  monitoring_ = true;
  if (monitor_pending_ || gone_ || closed_ || buffer_.size() >= kMaxBufferedWhileHandling) return;
  monitor_pending_ = true;
  stream_.async_read_some(buffer_.prepare(kMonitorReadSize),
                          [self = this->shared_from_this()](const error_code& ec, size_t n) {
                            self->on_monitor_read(ec, n);
                          });
}

template <class Stream>
void Connection<Stream>::on_monitor_read(const error_code& ec, size_t n) {
  monitor_pending_ = false;
  if (!ec) {
    buffer_.commit(n);  // pipelined bytes: the next request's
    if (monitoring_) {
      start_monitor();
    } else {
      monitor_timer_.cancel();
    }
    return;
  }
  if (ec == asio::error::operation_aborted && !monitoring_ && !closed_) {
    monitor_timer_.cancel();  // stop_monitor cancelled it
    return;
  }
  mark_gone();  // EOF, reset, or the socket was closed under it
  monitor_timer_.cancel();
}

template <class Stream>
Task<void> Connection<Stream>::stop_monitor() {
  monitoring_ = false;
  if (monitor_pending_) {
    error_code ec;
    socket_.cancel(ec);
  }
  while (monitor_pending_) {
    monitor_timer_.expires_at(kNever);
    error_code ec;
    co_await monitor_timer_.async_wait(redirect(ec));
  }
}

Task<void> reject(std::shared_ptr<tcp::socket> socket, std::shared_ptr<ServerContext> ctx) {
  ctx->counters->on_connection_rejected();
  ctx->counters->on_response(503);
  std::string body = openai_error_body(503, "Too many connections; retry later");
  ResponseFraming framing{body.size(), false, false, 11};
  std::vector<HttpHeader> extra{{"Retry-After", "1"}};
  std::string head = response_head(503, kJsonContentType, framing, {}, extra);
  error_code ec;
  // The reply fits in the socket buffer: this write does not wait on the client.
  co_await asio::async_write(*socket, std::array{asio::buffer(head), asio::buffer(body)}, redirect(ec));
  socket->shutdown(tcp::socket::shutdown_send, ec);
  // Drain for a moment so the client reads the reply rather than a reset.
  asio::steady_timer timer(socket->get_executor());
  timer.expires_after(std::chrono::milliseconds(500));
  timer.async_wait([socket](const error_code&) {
    error_code ignored;
    socket->close(ignored);
  });
  std::array<char, 4096> scratch;
  while (!ec) co_await socket->async_read_some(asio::buffer(scratch), redirect(ec));
  timer.cancel();
  socket->close(ec);
}

}  // namespace

void start_connection(tcp::socket socket, std::shared_ptr<ServerContext> ctx) {
  if (std::shared_ptr<asio::ssl::context> tls = ctx->tls()) {
    TlsStream stream(std::move(socket), *tls);
    std::make_shared<Connection<TlsStream>>(std::move(stream), std::move(ctx), std::move(tls))->start();
  } else {
    std::make_shared<Connection<tcp::socket>>(std::move(socket), std::move(ctx))->start();
  }
}

void reject_connection(tcp::socket socket, std::shared_ptr<ServerContext> ctx) {
  if (ctx->tls()) {
    // A plain-text 503 means nothing to a TLS client, and a handshake costs what an overloaded server lacks.
    ctx->counters->on_connection_rejected();
    error_code ec;
    socket.close(ec);
    return;
  }
  auto executor = socket.get_executor();
  asio::co_spawn(executor, reject(std::make_shared<tcp::socket>(std::move(socket)), std::move(ctx)), asio::detached);
}

}  // namespace tern::server
