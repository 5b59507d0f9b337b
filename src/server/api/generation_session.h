// GenerationSession: one API call's requests in flight on the engine, seen
// from an HTTP handler. It submits them, waits for engine events without
// blocking the io thread (Responder::wait_event), turns them into per-choice
// updates, cancels everything if the client goes away or the session is
// dropped early, and records metrics and the request log line when done.
// Used by the OpenAI and TGI routes. One handler coroutine at a time.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/request_stream.h"
#include "server/api/api_error.h"
#include "server/api/serving_context.h"
#include "server/http/responder.h"

namespace tern::server {

struct ChoiceUpdate {
  int choice = 0;  // prompt index * n + sequence index
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<SampleResult> logprobs;
  std::optional<FinishReason> finish;
  std::string stop_reason;
};

struct SessionUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  double ttft_ms = 0;           // the first request's
  double elapsed_ms = 0;
  double tokens_per_second = 0; // completion tokens after the first, over the decode time
};

class GenerationSession {
 public:
  GenerationSession(ServingContext& ctx, Responder& res, std::vector<Request> requests, std::string id,
                    std::string api);
  ~GenerationSession();  // cancels whatever is unfinished
  GenerationSession(const GenerationSession&) = delete;
  GenerationSession& operator=(const GenerationSession&) = delete;

  // Submits every request. An ApiError (queue full, shutting down) means
  // nothing is running.
  std::optional<ApiError> start();

  // The next updates. An empty vector with done() true: all finished. nullopt:
  // the client went away (everything is cancelled) or the engine failed
  // (error() says why).
  Task<std::optional<std::vector<ChoiceUpdate>>> next();

  bool done() const { return finished_ == static_cast<int>(streams_.size()); }
  const std::optional<ApiError>& error() const { return error_; }
  SessionUsage usage() const;
  const std::string& id() const { return id_; }
  int n() const { return n_; }
  int num_choices() const { return n_ * static_cast<int>(requests_.size()); }
  // Request i's prompt logprobs (SamplingParams::prompt_logprobs): one entry
  // per prompt token after the first, once the prompt is computed.
  const std::vector<SampleResult>& prompt_logprobs(size_t i) const { return prompt_logprobs_[i]; }
  const std::vector<int32_t>& prompt(size_t i) const { return requests_[i].prompt; }

 private:
  void drain(std::vector<ChoiceUpdate>& out);
  void finish_request(size_t i, const RequestOutput& e);
  void log_prompt(const Request& r) const;  // --log-requests-text
  void cancel_all();

  ServingContext& ctx_;
  Responder& res_;
  std::vector<Request> requests_;
  std::string id_;
  std::string api_;
  int n_ = 1;
  std::vector<std::shared_ptr<RequestStream>> streams_;
  std::vector<bool> request_done_;
  std::vector<RequestOutput> last_;
  std::vector<std::vector<SampleResult>> prompt_logprobs_;
  std::vector<std::chrono::steady_clock::time_point> last_token_at_;
  std::vector<std::chrono::steady_clock::time_point> first_token_out_;  // when drain() handed it on (start_: not yet)
  std::vector<std::vector<double>> itl_s_;
  int finished_ = 0;
  std::optional<ApiError> error_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace tern::server
