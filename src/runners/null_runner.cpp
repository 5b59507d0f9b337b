// NullRunner: a step's output without a forward pass, after the step time.
#include "runners/null_runner.h"

#include <algorithm>
#include <thread>

namespace tern {

void NullRunner::fill(const StepPlan& plan, StepOutput& out) const {
  out.tokens.clear();
  out.logits.clear();
  out.prompt_logits.clear();
  for (const ScheduledChunk& c : plan.chunks) {
    if (!c.want_logits) continue;
    if (c.device_greedy || c.device_sample) {
      out.tokens.push_back(token_);
    } else {
      out.tokens.push_back(-1);
      out.logits.resize(out.logits.size() + static_cast<size_t>(vocab_size_), 0.0f);
    }
  }
}

Status NullRunner::execute(const StepPlan& plan, StepOutput& out) {
  TERN_RETURN_IF_ERROR(launch(plan));
  return collect(out);
}

// A step starts when the one before it ends (one device), or now.
Status NullRunner::launch(const StepPlan& plan) {
  if (launched_.size() >= 2) return internal_error("two steps are launched and not collected");
  const Clock::time_point start = std::max(Clock::now(), device_free_);
  device_free_ = start + step_;
  launched_.push_back({StepOutput{}, device_free_});
  fill(plan, launched_.back().out);
  return Status::ok();
}

Status NullRunner::collect(StepOutput& out) {
  if (launched_.empty()) return internal_error("no step is launched");
  std::this_thread::sleep_until(launched_.front().done);
  out = std::move(launched_.front().out);
  launched_.pop_front();
  return Status::ok();
}

}  // namespace tern
