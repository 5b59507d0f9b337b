// The thread that runs a model's output callbacks, so that a slow callback
// never holds up the engine thread. The engine thread only says which
// request has news (post); this thread takes the request's events, turns
// them into tern_outputs and calls the request's callback, one at a time.
//
// Lifetime: shared by the model and its own thread, so that the model may be
// destroyed on this thread (the last request freed from inside a callback):
// stop() then detaches instead of joining.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

namespace tern::capi {

class RequestState;

class CallbackDispatcher : public std::enable_shared_from_this<CallbackDispatcher> {
 public:
  static std::shared_ptr<CallbackDispatcher> start();
  ~CallbackDispatcher();

  // Engine thread (or any): `request` has events to deliver. Never blocks on a callback.
  void post(std::weak_ptr<RequestState> request);
  // Delivers what was posted, then ends the thread (joined, or detached when called on it).
  void stop();
  bool on_dispatcher_thread() const { return std::this_thread::get_id() == thread_id_; }

 private:
  CallbackDispatcher() = default;
  void run(std::shared_ptr<CallbackDispatcher> self);

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::weak_ptr<RequestState>> ready_;
  bool stopping_ = false;
  std::thread thread_;
  std::thread::id thread_id_;
};

}  // namespace tern::capi
