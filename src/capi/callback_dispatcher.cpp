// The callback thread's loop.
#include "capi/callback_dispatcher.h"

#include "base/thread_name.h"
#include "capi/model_core.h"

namespace tern::capi {

std::shared_ptr<CallbackDispatcher> CallbackDispatcher::start() {
  std::shared_ptr<CallbackDispatcher> d(new CallbackDispatcher());
  std::lock_guard<std::mutex> lock(d->mu_);
  d->thread_ = std::thread(&CallbackDispatcher::run, d.get(), d);
  d->thread_id_ = d->thread_.get_id();
  return d;
}

CallbackDispatcher::~CallbackDispatcher() {
  if (thread_.joinable()) thread_.detach();
}

void CallbackDispatcher::post(std::weak_ptr<RequestState> request) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ready_.push_back(std::move(request));
  }
  cv_.notify_one();
}

void CallbackDispatcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (on_dispatcher_thread()) {
    thread_.detach();
  } else if (thread_.joinable()) {
    thread_.join();
  }
}

void CallbackDispatcher::run(std::shared_ptr<CallbackDispatcher> self) {
  name_this_thread("tern-callbacks");
  {
    // start() sets thread_id_ under the lock; wait for it.
    std::lock_guard<std::mutex> lock(mu_);
  }
  for (;;) {
    std::weak_ptr<RequestState> next;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
      if (ready_.empty()) break;
      next = std::move(ready_.front());
      ready_.pop_front();
    }
    if (std::shared_ptr<RequestState> request = next.lock()) request->deliver_callbacks();
  }
  // The last reference may be this one (the model went away on this thread).
  self.reset();
}

}  // namespace tern::capi
