// The CPU backend behind the Runner interface: Ernie45Model's forward over a
// paged fp32 KV pool in host memory. Engine thread only, as every Runner.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "engine/runner.h"
#include "model/ernie4_5/ernie4_5_model.h"
#include "model/forward_batch.h"
#include "model/paged_kv_pool.h"
#include "model/runner_options.h"

namespace tern {

class CpuRunner final : public Runner {
 public:
  // options.kv_cache_bytes sizes the pool (the number of blocks of
  // options.block_size positions that fit); the other options are the
  // scheduler's or the GPU's. The model must outlive the runner.
  static Result<std::unique_ptr<CpuRunner>> create(Ernie45Model& model, const RunnerOptions& options);
  static Result<std::unique_ptr<CpuRunner>> create(Ernie45Model& model, int64_t block_size, int64_t kv_cache_bytes);
  // The blocks the pool of `options` holds for model `c` (an error when
  // none, or for a block size outside [1, 1024]).
  static Result<int64_t> pool_blocks(const ModelConfig& c, const RunnerOptions& options);

  Status execute(const StepPlan& plan, StepOutput& out) override;
  bool scores_prompts() const override { return true; }
  int64_t vocab_size() const override { return model_.config().vocab_size; }
  int64_t num_kv_blocks() const override { return pool_.num_blocks(); }
  int64_t block_size() const override { return pool_.block_size(); }

 private:
  CpuRunner(Ernie45Model& model, PagedKvPool pool) : model_(model), pool_(std::move(pool)) {}
  Ernie45Model& model_;
  PagedKvPool pool_;
  std::vector<SequenceChunk> chunks_;  // reused across steps
  std::vector<float> rows_;            // the model's rows of a step with all_logits chunks
};

}  // namespace tern
