// Engine: the loop body that serves many requests at once. Each step() is
// schedule -> run the batch on the backend -> sample -> post-process (append
// tokens, check stop rules, free finished sequences' blocks, publish events).
// Owns the scheduler, the block allocator and the runner. Engine thread only:
// other threads go through EngineClient.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine_stats.h"
#include "engine/request.h"
#include "engine/request_stream.h"
#include "engine/runner.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/speculation.h"
#include "kv/block_allocator.h"
#include "tokenizer/tokenizer.h"

namespace tern {

struct EngineConfig {
  SchedulerConfig scheduler;
  int64_t max_model_len = 4096;
  int max_logprobs = kMaxLogprobs;  // most logprobs / prompt_logprobs a request may ask for
  std::vector<int32_t> eos_ids;  // ids that end a sequence unless ignore_eos (model and tokenizer EOS)
  // Overlap scheduling on a runner that can (Runner::overlaps): step n + 1
  // is scheduled and launched before step n's tokens are appended and
  // published, so the host's work hides behind the device's. A sequence
  // that stops at step n has had one more token computed, which is dropped.
  // Steps are not overlapped while a row's logits go to the host (logprobs,
  // the first row of n > 1) or a sequence's next step needs the values of
  // its tokens (penalties, min_tokens not yet met).
  bool overlap = true;
  // Speculative decoding by prompt lookup (engine/speculation.h); off by
  // default. Needs a runner that scores every row (Runner::scores_prompts).
  // While drafts may be proposed, a sequence's steps are not overlapped (a
  // draft continues its last token, which the host must have), but for a
  // few after a lookup that found nothing.
  SpeculativeConfig speculative;
};

class Engine {
 public:
  Engine(std::unique_ptr<Runner> runner, const Tokenizer& tokenizer, const EngineConfig& config);
  ~Engine();

  // Checks and queues a request; its events go to `stream`. Errors (bad
  // ids, too long, impossible to fit in the KV cache) are returned and
  // nothing is queued.
  Status add_request(Request request, std::shared_ptr<RequestStream> stream);
  // Ends a request wherever it is (queued, in prefill, decoding); its blocks
  // are free when this returns and its stream gets a final "abort" event.
  // Unknown ids are ignored (the request may have just finished).
  void abort_request(const std::string& id);
  // Ends every request with `reason` (shutdown).
  void abort_all(FinishReason reason, const Status& error = Status::ok());

  bool has_work() const { return !requests_.empty() || in_flight_.has_value(); }
  void step();
  EngineStats stats() const;
  const BlockAllocator& allocator() const { return allocator_; }

 private:
  Status validate(const Request& request) const;
  void prepare(StepPlan& plan, SteadyTime now);
  enum class Feed { kYes, kLast, kBlocked };
  bool launched(const StepPlan& plan);
  Feed feed_of(const Sequence& seq) const;
  void complete(const StepPlan& plan, const Status& status);
  void complete_in_flight();
  void log_step(const StepPlan& plan) const;
  void postprocess(const StepPlan& plan);
  void sample_into(Sequence& seq, std::span<const float> row);
  void append_token(Sequence& seq, const SampleResult& sample);
  void append_picked(Sequence& seq, int32_t token);
  void publish_computed_blocks(Sequence& seq);
  static bool device_greedy_ok(const Sequence& seq);
  static bool wants_prompt_logits(const Sequence& seq);
  void score_prompt(const ScheduledChunk& c, std::span<const float> rows);
  static bool device_sample_ok(const Sequence& seq);
  void fork_siblings(Sequence& first, std::span<const float> row);
  void mark_touched(RequestState& r);
  void publish(RequestState& state);
  void finish_sequence(Sequence& seq, FinishReason reason);
  void fail_plan(const StepPlan& plan, const Status& error);
  bool may_draft() const;
  void propose_drafts();
  void settle_drafts(StepPlan& plan);
  void take_drafts(const StepPlan& plan);
  // A chunk with drafts' rows: the runner's picks, or their logits.
  struct RowsToVerify {
    std::span<const int32_t> picks;
    std::span<const float> logits;
  };
  void verify_drafts(Sequence& seq, std::span<const int32_t> drafts, const RowsToVerify& rows);

  std::unique_ptr<Runner> runner_;
  const Tokenizer& tokenizer_;
  EngineConfig config_;
  BlockAllocator allocator_;
  Scheduler scheduler_;
  std::unordered_map<std::string, std::unique_ptr<RequestState>> requests_;
  // Requests that ended while a launched step still names their sequences;
  // freed once it is collected (RequestState::in_flight == 0).
  std::vector<std::unique_ptr<RequestState>> retired_;
  bool overlap_ = false;
  std::optional<StepPlan> in_flight_;  // launched, not collected (overlap only)
  std::vector<RequestState*> touched_;  // requests with news this step
  StepOutput output_;
  std::vector<float> row_scratch_;
  std::vector<Sequence*> drafted_;  // sequences given drafts for the step being planned
  // Per chunk of the step being completed: its drafts, taken out of the sequence's tokens.
  std::vector<std::vector<int32_t>> step_drafts_;
  EngineStats stats_;
};

}  // namespace tern
