// Scheduler: decides each step's batch. Running sequences go first (one
// decode token each, or their next prompt chunk), then waiting ones are
// admitted by priority and arrival while the token budget
// (max_num_batched_tokens, or decode_step_tokens: SchedulerConfig), the
// sequence limit (max_num_seqs) and free KV blocks allow. When blocks run out, the newest running sequence of the
// lowest priority is preempted: its blocks are freed and it is requeued to be
// recomputed later. Engine thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/sampler.h"
#include "engine/sequence.h"
#include "kv/block_allocator.h"

namespace tern {

struct SchedulerConfig {
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048;
  // > 0 (and below max_num_batched_tokens): the budget of a step that carries
  // decoding streams, so a long prefill does not stretch their next token;
  // while the sequences waiting for prefill outnumber those streams, a step
  // takes up to max_num_batched_tokens instead (a wave of new requests then
  // prefills in large, faster steps, and the few streams already decoding
  // wait a little). 0: every step up to max_num_batched_tokens.
  int64_t decode_step_tokens = 0;
  // > 0: a step of up to max_num_batched_tokens that carries decoding
  // streams holds up at most this many of them; with more streams decoding,
  // steps keep to decode_step_tokens even while waiting prompts outnumber
  // them (a wave of requests that arrives while many streams decode costs
  // each of those one long step otherwise). 0: no such bound.
  int64_t long_step_max_streams = 0;
  bool enable_prefix_caching = true;
};

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int64_t num_tokens = 0;    // tokens computed this step, starting at seq->num_computed()
  bool want_logits = false;  // the chunk reaches the end of the sequence's tokens: sample after it
  // Plain greedy: the runner may pick the token itself (argmax on the
  // device); on a chunk with drafts, every row's (Runner::picks_scored_rows).
  bool device_greedy = false;
  bool device_sample = false;  // the runner samples it itself from the next of StepPlan::samples
  // >= 0: the chunk's one token is the pick of row feedback_row (counting
  // want_logits chunks) of the step in flight before it (Runner::launch).
  int32_t feedback_row = -1;
  // The runner returns the logits of every token of the chunk (prompt
  // logprobs), in StepOutput::prompt_logits; the engine sets it.
  bool all_logits = false;
  int64_t start_pos = 0;  // seq->num_computed() when planned (set with all_logits)
  // > 0: the chunk is the sequence's last token and this many speculative
  // drafts after it (Sequence::add_drafts); all its rows' logits come back
  // (all_logits) so the engine samples each row and keeps the drafts that
  // match. The engine sets it.
  int64_t num_drafts = 0;
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;
  std::vector<BlockCopy> copies;  // copy-on-write block copies to do before the forward pass
  // One per device_sample chunk, in chunk order; their adjustments in one list.
  std::vector<DeviceSampling> samples;
  std::vector<LogitAdjust> adjustments;
  bool empty() const { return chunks.empty(); }
  // Whether every chunk that wants logits has its token picked by the runner.
  bool all_picked_by_runner() const;
  int64_t num_tokens() const;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, BlockAllocator& allocator);

  // Queues a sequence (new or preempted) by (priority, arrival order).
  void add_waiting(Sequence* seq);
  // Adds a sequence that already holds its blocks (n > 1 forks) to the running set.
  void add_running(Sequence* seq);
  // Forgets a sequence (finished or aborted), wherever it is.
  void remove(Sequence* seq);

  StepPlan schedule();

  // The running sequences, in admission order.
  std::vector<Sequence*> running_sequences() const;
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }

 private:
  struct Entry {
    Sequence* seq;
    int priority;
    uint64_t order;  // arrival order, kept across preemption
  };
  bool reserve(Sequence& seq, int64_t num_tokens, StepPlan& plan);
  int64_t step_budget() const;
  void preempt(Entry entry);
  void insert_waiting(Entry entry);
  uint64_t order_of(Sequence* seq);

  SchedulerConfig config_;
  BlockAllocator& allocator_;
  std::vector<Entry> waiting_;  // sorted by (priority, order)
  std::vector<Entry> running_;  // admission order
  uint64_t next_order_ = 0;
  int64_t num_preemptions_ = 0;
};

}  // namespace tern
