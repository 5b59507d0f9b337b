// Responder: how a handler answers one request, with no Beast or Asio types
// beyond Task. One Responder per request, owned by the transport; handlers use
// it only during their call, from the coroutine the transport started (calls
// are not thread-safe, except the function returned by event_notifier()).
//
// A handler either sends one whole response (respond) or streams:
// begin_stream, write_chunk..., end_stream (end_stream is implied if the
// handler returns without it). Writes return false once the client is gone;
// nothing is sent after that and the handler should cancel its work.
//
// g++ 12 rejects a braced header list inside a co_await expression ("array
// used as initializer"): build the vector in its own statement first.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http/request.h"
#include "server/http/task.h"

namespace tern::server {

enum class Wake {
  kEvent,       // the notifier fired since the last wait: drain the engine stream
  kTimeout,     // the timeout passed with no event
  kClientGone,  // the client disconnected (or the server is closing it): cancel
};

class Responder {
 public:
  virtual ~Responder() = default;

  // One whole response with Content-Length. False if the client is gone or
  // a response was already started.
  virtual Task<bool> respond(int status, std::string content_type, std::string body,
                             std::vector<HttpHeader> extra_headers = {}) = 0;

  // Starts a chunked response (a close-delimited one for HTTP/1.0 clients).
  virtual Task<bool> begin_stream(int status, std::string content_type,
                                  std::vector<HttpHeader> extra_headers = {}) = 0;
  // Sends `data` now as one chunk (an empty `data` sends nothing); `data`
  // must stay valid until the co_await completes. False once the client is
  // gone or a write has stalled past the write timeout.
  virtual Task<bool> write_chunk(std::string_view data) = 0;
  virtual Task<bool> end_stream() = 0;

  // True once the peer closed or reset the connection, a write failed, or the
  // server's shutdown deadline passed. Detected promptly even while the handler
  // only waits (the transport keeps a read pending on the socket).
  virtual bool client_gone() const = 0;
  virtual bool started() const = 0;  // a response or stream has begun

  // A callable for RequestStream::set_notify: thread-safe, never blocks, and
  // safe to call after the request (or the server) is gone. Each call makes
  // the next (or current) wait_event return kEvent; calls coalesce.
  virtual std::function<void()> event_notifier() = 0;
  // Suspends the handler, not the io thread, until the notifier fires, the
  // client goes away, or `timeout` passes. Events are level-triggered: a
  // notification that came before the wait returns at once.
  virtual Task<Wake> wait_event(std::chrono::milliseconds timeout) = 0;

  // Headers the server adds to whatever response this request gets (request
  // id, CORS). Set by the dispatcher before the handler runs.
  void add_common_header(std::string name, std::string value) {
    common_headers_.push_back({std::move(name), std::move(value)});
  }
  const std::vector<HttpHeader>& common_headers() const { return common_headers_; }

 private:
  std::vector<HttpHeader> common_headers_;
};

// What routes are: a coroutine over the request and its responder.
using Handler = std::function<Task<void>(HttpRequest&, Responder&)>;

}  // namespace tern::server
