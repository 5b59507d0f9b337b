// EngineClient: the only way into the engine from other threads. It owns the
// Engine and the engine thread, which loops: take new requests and
// cancellations from the inbox, step, publish stats. submit/cancel/stats are
// thread-safe and never wait for a step to finish. The engine itself stays
// behind the pointer to its state: callers see requests, streams and stats.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "engine/engine_stats.h"
#include "engine/request.h"
#include "engine/request_stream.h"

namespace tern {

class Engine;

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
  int64_t num_unfinished() const;

  // Stops taking requests, aborts the rest and joins the thread.
  void shutdown();

 private:
  struct State;  // engine_client.cpp: the engine, the inbox and the thread
  std::unique_ptr<State> state_;
};

}  // namespace tern
