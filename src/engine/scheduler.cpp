// Continuous batching with chunked prefill and recompute preemption.
#include "engine/scheduler.h"

#include <algorithm>

namespace tern {

int64_t StepPlan::num_tokens() const {
  int64_t n = 0;
  for (const auto& c : chunks) n += c.num_tokens;
  return n;
}

bool StepPlan::all_picked_by_runner() const {
  return std::all_of(chunks.begin(), chunks.end(),
                     [](const ScheduledChunk& c) {
                       return !c.all_logits && (!c.want_logits || c.device_greedy || c.device_sample);
                     });
}

Scheduler::Scheduler(const SchedulerConfig& config, BlockAllocator& allocator)
    : config_(config), allocator_(allocator) {}

void Scheduler::insert_waiting(Entry entry) {
  auto before = [](const Entry& a, const Entry& b) {
    return a.priority != b.priority ? a.priority < b.priority : a.order < b.order;
  };
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), entry, before), entry);
}

void Scheduler::add_waiting(Sequence* seq) {
  seq->status = SequenceStatus::kWaiting;
  insert_waiting({seq, seq->request().request.priority, next_order_++});
}

void Scheduler::add_running(Sequence* seq) {
  seq->status = SequenceStatus::kRunning;
  running_.push_back({seq, seq->request().request.priority, next_order_++});
}

std::vector<Sequence*> Scheduler::running_sequences() const {
  std::vector<Sequence*> seqs;
  seqs.reserve(running_.size());
  for (const Entry& e : running_) seqs.push_back(e.seq);
  return seqs;
}

void Scheduler::remove(Sequence* seq) {
  auto is_seq = [seq](const Entry& e) { return e.seq == seq; };
  std::erase_if(waiting_, is_seq);
  std::erase_if(running_, is_seq);
}

bool Scheduler::reserve(Sequence& seq, int64_t num_tokens, StepPlan& plan) {
  auto copies = seq.blocks().ensure_capacity(seq.num_computed() + num_tokens);
  if (!copies.is_ok()) return false;
  plan.copies.insert(plan.copies.end(), copies->begin(), copies->end());
  return true;
}

void Scheduler::preempt(Entry entry) {
  entry.seq->preempt();
  ++num_preemptions_;
  insert_waiting(entry);
}

int64_t Scheduler::step_budget() const {
  const int64_t cap = config_.max_num_batched_tokens;
  if (config_.decode_step_tokens <= 0 || config_.decode_step_tokens >= cap) return cap;
  int64_t decoding = 0, prefilling = static_cast<int64_t>(waiting_.size());
  for (const Entry& e : running_) ++(e.seq->num_uncomputed() - e.seq->num_drafts() > 1 ? prefilling : decoding);
  const bool few = config_.long_step_max_streams <= 0 || decoding <= config_.long_step_max_streams;
  return decoding > 0 && (prefilling <= decoding || !few) ? config_.decode_step_tokens : cap;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  plan.chunks.reserve(running_.size() + 1);  // one growth-free vector at large batches
  int64_t budget = step_budget();
  bool preempted = false;

  // Running sequences first, oldest first; victims come from the back.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence& seq = *running_[i].seq;
    int64_t n = std::min(seq.num_uncomputed(), budget);
    if (n <= 0) {
      ++i;
      continue;
    }
    bool self_preempted = false;
    while (!reserve(seq, n, plan)) {
      // The lowest-priority, newest running sequence gives up its blocks.
      auto victim = std::max_element(running_.begin() + static_cast<int64_t>(i), running_.end(),
                                     [](const Entry& a, const Entry& b) {
                                       return a.priority != b.priority ? a.priority < b.priority
                                                                       : a.order < b.order;
                                     });
      Entry v = *victim;
      running_.erase(victim);
      preempt(v);
      preempted = true;
      if (v.seq == &seq) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) continue;  // running_[i] is now the next sequence
    plan.chunks.push_back({&seq, n, n == seq.num_uncomputed()});
    budget -= n;
    ++i;
  }

  // Then admit waiting sequences, unless this step had to preempt.
  while (!preempted && !waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    Entry entry = waiting_.front();
    Sequence& seq = *entry.seq;
    if (seq.num_pending() > 0) break;  // preempted with a token still on the device: the next step
    if (seq.num_computed() == 0 && seq.blocks().num_tokens() == 0 && config_.enable_prefix_caching &&
        !seq.request().request.params.prompt_logprobs) {
      auto matched = seq.blocks().match_prefix(seq.tokens());
      if (matched.is_ok() && *matched > 0) {
        seq.set_num_computed(*matched);
        if (!seq.request().first_scheduled) seq.request().num_cached_tokens += *matched;
      }
    }
    int64_t n = std::min(seq.num_uncomputed(), budget);
    if (!reserve(seq, n, plan)) {
      seq.preempt();  // give back any prefix blocks it matched; it retries next step
      break;
    }
    waiting_.erase(waiting_.begin());
    seq.status = SequenceStatus::kRunning;
    running_.push_back(entry);
    plan.chunks.push_back({&seq, n, n == seq.num_uncomputed()});
    budget -= n;
  }
  return plan;
}

}  // namespace tern
