// The engine thread and its inbox.
#include "engine/engine_client.h"

namespace tern {

EngineClient::EngineClient(std::unique_ptr<Engine> engine, int64_t max_queued_requests)
    : engine_(std::move(engine)), max_queued_(max_queued_requests) {
  stats_ = engine_->stats();
  thread_ = std::thread([this] { loop(); });
}

EngineClient::~EngineClient() { shutdown(); }

Result<std::shared_ptr<RequestStream>> EngineClient::submit(Request request) {
  auto stream = std::make_shared<RequestStream>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return Status(ErrorCode::kCancelled, "the server is shutting down");
    if (max_queued_ > 0 && unfinished_.load() >= max_queued_) {
      return resource_exhausted("the request queue is full (" + std::to_string(max_queued_) +
                                " requests); try again later");
    }
    ++unfinished_;
    inbox_.push_back({std::move(request), stream});
  }
  cv_.notify_one();
  return stream;
}

void EngineClient::cancel(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(request_id);
  }
  cv_.notify_one();
}

EngineStats EngineClient::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void EngineClient::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void EngineClient::loop() {
  for (;;) {
    std::vector<Submission> inbox;
    std::vector<std::string> cancels;
    bool stop;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !inbox_.empty() || !cancels_.empty() || engine_->has_work(); });
      inbox.swap(inbox_);
      cancels.swap(cancels_);
      stop = stop_;
    }
    for (Submission& s : inbox) {
      // Count the request as finished when its last event goes out.
      auto stream = s.stream;
      stream->set_on_done([this] { --unfinished_; });
      Status st = engine_->add_request(std::move(s.request), stream);
      if (!st.is_ok()) {
        RequestOutput out;
        out.finished = true;
        out.error = st;
        stream->push(std::move(out));
      }
    }
    for (const std::string& id : cancels) engine_->abort_request(id);
    if (stop) {
      engine_->abort_all(FinishReason::kAbort, Status(ErrorCode::kCancelled, "the server is shutting down"));
      std::lock_guard<std::mutex> lock(mu_);
      stats_ = engine_->stats();
      return;
    }
    engine_->step();
    std::lock_guard<std::mutex> lock(mu_);
    stats_ = engine_->stats();
  }
}

}  // namespace tern
