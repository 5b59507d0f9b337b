// Sequence: one of a request's n generations as the engine tracks it: its
// tokens (prompt then output), how many have K/V in the cache, its blocks
// (RAII: released when the sequence is destroyed or preempted), its sampler,
// and the text it has produced with stop-string holdback. Engine thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/request_stream.h"
#include "engine/sampler.h"
#include "kv/block_table.h"
#include "tokenizer/detokenizer.h"

namespace tern {

struct RequestState;

enum class SequenceStatus { kWaiting, kRunning, kFinished };

class Sequence {
 public:
  Sequence(RequestState& request, int index, BlockTable blocks, const Tokenizer& tokenizer);

  RequestState& request() { return *request_; }
  const RequestState& request() const { return *request_; }
  int index() const { return index_; }

  const std::vector<int32_t>& tokens() const { return tokens_; }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t num_prompt_tokens() const { return num_prompt_; }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_; }
  std::span<const int32_t> prompt() const { return {tokens_.data(), static_cast<size_t>(num_prompt_)}; }
  std::span<const int32_t> output() const {
    return {tokens_.data() + num_prompt_, static_cast<size_t>(num_output_tokens())};
  }

  // Tokens whose K/V are in the cache (or being computed by a step in
  // flight); the rest run in the next steps. A token the runner picked in
  // a step not yet collected (pending) counts when the next step can take
  // it from the device (feedable): it has K/V to compute, as yet unseen.
  int64_t num_computed() const { return num_computed_; }
  void set_num_computed(int64_t n) { num_computed_ = n; }
  int64_t num_uncomputed() const {
    return num_tokens() + num_pending_ - (num_pending_ > 0 && !feedable_ ? 1 : 0) - num_computed_;
  }

  // Tokens the runner picked in launched steps not yet collected (at most
  // two: the step in flight and the one launched after it). The newest is
  // want_logits row `row` of its step; `feedable`: the next step may compute
  // it before the host sees it. Collecting a step pops the oldest.
  void push_pending(int32_t row, bool feedable) { ++num_pending_, pending_row_ = row, feedable_ = feedable; }
  void pop_pending() { --num_pending_; }
  int64_t num_pending() const { return num_pending_; }
  // The newest pending token, when the next step may compute it.
  bool pending_feedable() const { return num_pending_ > 0 && feedable_; }
  int32_t pending_row() const { return pending_row_; }

  // Speculative drafts (engine/speculation.h): proposed tokens appended to
  // tokens() from before a step is scheduled until it is completed, so the
  // step computes them after the last real token; they are never output,
  // and the engine takes them back before it samples the step's rows.
  void add_drafts(std::span<const int32_t> drafts);
  int64_t num_drafts() const { return num_drafts_; }
  // Drops the last `count` drafts (a step that could not take them all).
  void drop_drafts(int64_t count);
  std::vector<int32_t> take_drafts();
  // The most drafts the sequence's next step may verify (engine-managed:
  // twice what the last step kept of them); 0: not set yet.
  int64_t draft_limit = 0;
  // After a lookup found nothing to draft: how many more of the sequence's
  // steps may overlap the next (Engine::feed_of) before one waits for the
  // host to look again (engine-managed).
  int64_t draft_pause = 0;

  BlockTable& blocks() { return blocks_; }
  std::span<const BlockId> blocks_view() const { return blocks_.blocks(); }
  Sampler& sampler() { return sampler_; }
  SequenceStatus status = SequenceStatus::kWaiting;

  // Appends a sampled token, updates the text and checks the stop rules.
  // Returns the finish reason when this token ends the sequence.
  std::optional<FinishReason> append(const SampleResult& sample, int64_t max_model_len);

  // Frees the blocks and forgets the cache contents: the sequence will
  // recompute its tokens when rescheduled.
  void preempt();

  // Moves the news since the last call into `out` (tokens, logprobs, text).
  void take_output(SequenceOutput& out);

  std::optional<FinishReason> finish_reason() const { return finish_; }
  void finish(FinishReason reason) { finish_ = reason; status = SequenceStatus::kFinished; }
  const std::string& stop_reason() const { return stop_reason_; }

  // Forks the state of `other` (used for n > 1 right after the prompt is computed).
  void copy_prefill_from(Sequence& other);

 private:
  bool is_eos(int32_t token) const;
  void update_text(int32_t token);

  RequestState* request_;
  int index_;
  std::vector<int32_t> tokens_;
  int64_t num_prompt_ = 0;
  int64_t num_computed_ = 0;
  int64_t num_pending_ = 0;
  int64_t num_drafts_ = 0;
  int32_t pending_row_ = -1;
  bool feedable_ = false;
  BlockTable blocks_;
  Sampler sampler_;
  Detokenizer detok_;
  std::string text_;          // all output text so far (stop string cut off once matched)
  size_t text_emitted_ = 0;   // bytes of text_ already sent
  size_t tokens_emitted_ = 0; // output tokens already sent
  std::vector<SampleResult> pending_logprobs_;
  std::optional<FinishReason> finish_;
  bool finish_sent_ = false;
  std::string stop_reason_;
};

// A request while the engine holds it: its sequences and timing.
struct RequestState {
  Request request;
  std::shared_ptr<RequestStream> stream;
  std::vector<int32_t> stop_ids;  // eos ids of the model plus the request's stop_token_ids
  std::vector<int32_t> eos_ids;   // the subset that ignore_eos disables
  std::vector<std::unique_ptr<Sequence>> sequences;
  bool forked = false;            // n > 1: the other sequences joined after the prompt
  bool touched = false;           // in Engine::touched_ (news to publish this step); O(1) dedup at batch 256
  int in_flight = 0;              // chunks of launched, uncollected steps: the state outlives its end until 0
  std::optional<SteadyTime> first_scheduled;
  std::optional<SteadyTime> first_token;
  int64_t num_cached_tokens = 0;
  // params.prompt_logprobs: one entry per prompt token after the first,
  // filled as the first sequence's prompt chunks are computed, sent once.
  std::vector<SampleResult> prompt_logprobs;
  bool prompt_logprobs_sent = false;
  Status error;                   // why the request failed, if it did
  bool finished() const;
};

}  // namespace tern
