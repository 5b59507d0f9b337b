// Event queue between the engine thread and a request's consumer.
#include "engine/request_stream.h"

namespace tern {

void RequestStream::push(RequestOutput event) {
  std::function<void()> notify, on_done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;  // nothing follows the final event
    if (event.finished) on_done = std::move(on_done_);
  }
  // Before the consumer can see the final event, so its bookkeeping is already done.
  if (on_done) on_done();
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = event.finished;
    events_.push_back(std::move(event));
    notify = notify_;
  }
  cv_.notify_all();
  if (notify) notify();
}

std::optional<RequestOutput> RequestStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  RequestOutput e = std::move(events_.front());
  events_.pop_front();
  return e;
}

std::deque<RequestOutput> RequestStream::drain() {
  std::lock_guard<std::mutex> lock(mu_);
  std::deque<RequestOutput> out;
  out.swap(events_);
  return out;
}

bool RequestStream::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void RequestStream::set_notify(std::function<void()> notify) {
  std::lock_guard<std::mutex> lock(mu_);
  notify_ = std::move(notify);
}

void RequestStream::set_on_done(std::function<void()> on_done) {
  std::lock_guard<std::mutex> lock(mu_);
  on_done_ = std::move(on_done);
}

}  // namespace tern
