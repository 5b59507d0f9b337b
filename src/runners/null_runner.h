// NullRunner (--device null): a runner that computes nothing, for measuring
// what the server and the engine cost themselves (HTTP, scheduling,
// detokenization, streaming) apart from any model: every chunk that wants a
// token gets the same one (a host-sampled chunk gets all-zero logits, so the
// host draws uniformly), and no KV cache is held, only the count of blocks
// the scheduler plans with. With a step time (--null-step-us) it stands in
// for a device: steps run one after another, each taking that long, and
// overlap with the host's work as a GPU runner's do (launch, then collect).
// Engine thread only, as every Runner.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>

#include "engine/runner.h"

namespace tern {

class NullRunner final : public Runner {
 public:
  // num_kv_blocks blocks of block_size positions for the scheduler; `token`
  // (below vocab_size) is every runner-picked token; step_us: each step's
  // time (0: at once, no overlap).
  NullRunner(int64_t vocab_size, int64_t num_kv_blocks, int64_t block_size, int32_t token, int64_t step_us)
      : vocab_size_(vocab_size),
        num_kv_blocks_(num_kv_blocks),
        block_size_(block_size),
        token_(token),
        step_(std::chrono::microseconds(step_us)) {}

  Status execute(const StepPlan& plan, StepOutput& out) override;
  bool samples_on_device() const override { return true; }
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t num_kv_blocks() const override { return num_kv_blocks_; }
  int64_t block_size() const override { return block_size_; }
  bool overlaps() const override { return step_.count() > 0; }
  Status launch(const StepPlan& plan) override;
  Status collect(StepOutput& out) override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Launched {
    StepOutput out;
    Clock::time_point done;
  };
  void fill(const StepPlan& plan, StepOutput& out) const;

  int64_t vocab_size_, num_kv_blocks_, block_size_;
  int32_t token_;
  Clock::duration step_;
  std::deque<Launched> launched_;  // oldest first
  Clock::time_point device_free_{};  // when the last launched step ends
};

}  // namespace tern
