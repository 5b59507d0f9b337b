// RequestStream: the channel from the engine thread to whoever waits on one
// request (an HTTP handler, the CLI). The engine pushes RequestOutput events;
// the consumer pops them. Thread-safe. A consumer that loses interest calls
// EngineClient::cancel; the stream itself never blocks the engine.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>

#include "engine/request.h"

namespace tern {

class RequestStream {
 public:
  // Engine side. `notify` (if set) runs after each push, on the engine thread:
  // an event loop can use it to wake up; it must not block.
  void push(RequestOutput event);

  // Consumer side: the next event, waiting at most `timeout`; nullopt on timeout.
  std::optional<RequestOutput> next(std::chrono::milliseconds timeout);
  // Every event available now, without waiting.
  std::deque<RequestOutput> drain();
  // True once the final event has been pushed.
  bool done() const;

  void set_notify(std::function<void()> notify);
  // Runs once, on the engine thread, right after the final event is pushed.
  void set_on_done(std::function<void()> on_done);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> events_;
  std::function<void()> notify_;
  std::function<void()> on_done_;
  bool done_ = false;
};

}  // namespace tern
