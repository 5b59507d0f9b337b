// EngineClient: the only way into the engine from other threads. It owns the
// Engine and the engine thread, which loops: take new requests and
// cancellations from the inbox, step, publish stats. submit/cancel/stats are
// thread-safe and never wait for a step to finish.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/request_stream.h"

namespace tern {

class EngineClient {
 public:
  // `max_queued_requests`: requests accepted but not yet finished beyond
  // which submit() answers ResourceExhausted (the server maps it to 503 +
  // Retry-After). 0 means no limit.
  EngineClient(std::unique_ptr<Engine> engine, int64_t max_queued_requests = 0);
  ~EngineClient();  // aborts what is left and joins the engine thread
  EngineClient(const EngineClient&) = delete;
  EngineClient& operator=(const EngineClient&) = delete;

  // Queues `request`; its events arrive on the returned stream. Errors found
  // by the engine's checks arrive as a final event carrying the error.
  Result<std::shared_ptr<RequestStream>> submit(Request request);
  // Ends the request wherever it is; its blocks are free after the next step.
  void cancel(const std::string& request_id);
  // A snapshot, refreshed after every step.
  EngineStats stats() const;
  int64_t num_unfinished() const { return unfinished_.load(); }

  // Stops taking requests, aborts the rest and joins the thread.
  void shutdown();

 private:
  struct Submission {
    Request request;
    std::shared_ptr<RequestStream> stream;
  };
  void loop();

  std::unique_ptr<Engine> engine_;
  int64_t max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Submission> inbox_;
  std::vector<std::string> cancels_;
  bool stop_ = false;
  EngineStats stats_;
  std::atomic<int64_t> unfinished_{0};
  std::thread thread_;
};

}  // namespace tern
