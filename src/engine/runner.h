// Runner: executes a StepPlan on a backend and returns the logits of the
// chunks that want them. The engine sees only this interface, so the CPU
// and CUDA runners (src/runners/) are interchangeable and the engine knows
// no model, backend or device. Engine thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "engine/scheduler.h"

namespace tern {

// What a step returns for the chunks with want_logits, in plan order.
struct StepOutput {
  // One entry per want_logits chunk: the token the runner picked itself (a
  // device_greedy or device_sample chunk on a runner that can), or -1 when
  // the host samples.
  std::vector<int32_t> tokens;
  // vocab_size() floats for each chunk whose entry in `tokens` is -1, in order.
  std::vector<float> logits;
  // vocab_size() floats for every token of each all_logits chunk, in order
  // (a want_logits chunk's last row is in `logits` too), but those of a
  // chunk whose rows the runner picked (below).
  std::vector<float> prompt_logits;
  // Runners that pick_scored_rows(): for each all_logits chunk with
  // device_greedy (a greedy sequence's drafts), the argmax of every row, in
  // order; its entry in `tokens` is its last row's, and none of its rows is
  // in `logits` or `prompt_logits`.
  std::vector<int32_t> scored_picks;
};

class Runner {
 public:
  virtual ~Runner() = default;
  // Performs plan.copies, then the forward pass, filling `out`.
  virtual Status execute(const StepPlan& plan, StepOutput& out) = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t num_kv_blocks() const = 0;
  virtual int64_t block_size() const = 0;
  // Whether execute() samples device_sample chunks itself (StepPlan::samples);
  // the engine plans them only then, since planning draws the row's key.
  virtual bool samples_on_device() const { return false; }
  // Whether execute() fills StepOutput::prompt_logits for all_logits chunks
  // (requests with prompt_logprobs are refused otherwise).
  virtual bool scores_prompts() const { return false; }
  // Whether execute() picks the argmax of every row of an all_logits chunk
  // with device_greedy itself (StepOutput::scored_picks); the engine sets
  // device_greedy on such chunks only then.
  virtual bool picks_scored_rows() const { return false; }

  // Overlap scheduling, on runners that say overlaps(): launch() starts a
  // step and returns without waiting for it; collect() waits for the
  // oldest launched step and fills `out` as execute() would. The engine
  // launches step n + 1 before it collects step n, so a chunk whose
  // feedback_row is set has as its one token the pick of that row of the
  // step launched just before, which the host has not seen yet: the
  // runner takes it on the device. At most two steps are launched and not
  // collected; a step whose rows' logits go to the host is collected
  // before the next one is launched.
  virtual bool overlaps() const { return false; }
  virtual Status launch(const StepPlan& plan);
  virtual Status collect(StepOutput& out);
};

}  // namespace tern
