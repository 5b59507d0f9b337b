// The engine thread and its inbox.
#include "engine/engine_client.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "base/thread_name.h"
#include "engine/engine.h"

namespace tern {

struct EngineClient::State {
  struct Submission {
    Request request;
    std::shared_ptr<RequestStream> stream;
  };

  State(std::unique_ptr<Engine> e, int64_t max_queued) : engine(std::move(e)), max_queued(max_queued) {}
  void loop();

  std::unique_ptr<Engine> engine;
  int64_t max_queued;
  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<Submission> inbox;
  std::vector<std::string> cancels;
  bool stop = false;
  EngineStats stats;
  std::atomic<int64_t> unfinished{0};
  std::thread thread;
};

EngineClient::EngineClient(std::unique_ptr<Engine> engine, int64_t max_queued_requests)
    : state_(std::make_unique<State>(std::move(engine), max_queued_requests)) {
  state_->stats = state_->engine->stats();
  state_->thread = std::thread([s = state_.get()] {
    name_this_thread("tern-engine");
    s->loop();
  });
}

EngineClient::~EngineClient() { shutdown(); }

Result<std::shared_ptr<RequestStream>> EngineClient::submit(Request request) {
  State& s = *state_;
  auto stream = std::make_shared<RequestStream>();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.stop) return Status(ErrorCode::kCancelled, "the server is shutting down");
    if (s.max_queued > 0 && s.unfinished.load() >= s.max_queued) {
      return resource_exhausted("the request queue is full (" + std::to_string(s.max_queued) +
                                " requests); try again later");
    }
    ++s.unfinished;
    s.inbox.push_back({std::move(request), stream});
  }
  s.cv.notify_one();
  return stream;
}

void EngineClient::cancel(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->cancels.push_back(request_id);
  }
  state_->cv.notify_one();
}

EngineStats EngineClient::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->stats;
}

int64_t EngineClient::num_unfinished() const { return state_->unfinished.load(); }

void EngineClient::shutdown() {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.stop && !s.thread.joinable()) return;
    s.stop = true;
  }
  s.cv.notify_one();
  if (s.thread.joinable()) s.thread.join();
}

void EngineClient::State::loop() {
  for (;;) {
    std::vector<Submission> taken;
    std::vector<std::string> cancelled;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return stop || !inbox.empty() || !cancels.empty() || engine->has_work(); });
      taken.swap(inbox);
      cancelled.swap(cancels);
      stopping = stop;
    }
    for (Submission& s : taken) {
      // Count the request as finished when its last event goes out.
      auto stream = s.stream;
      stream->set_on_done([this] { --unfinished; });
      Status st = engine->add_request(std::move(s.request), stream);
      if (!st.is_ok()) {
        RequestOutput out;
        out.finished = true;
        out.error = st;
        stream->push(std::move(out));
      }
    }
    for (const std::string& id : cancelled) engine->abort_request(id);
    if (stopping) {
      engine->abort_all(FinishReason::kAbort, Status(ErrorCode::kCancelled, "the server is shutting down"));
      std::lock_guard<std::mutex> lock(mu);
      stats = engine->stats();
      return;
    }
    engine->step();
    std::lock_guard<std::mutex> lock(mu);
    stats = engine->stats();
  }
}

}  // namespace tern
