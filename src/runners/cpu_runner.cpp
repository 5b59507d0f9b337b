// CPU runner: StepPlan -> SequenceChunks -> Ernie45Model::forward_batch.
#include "runners/cpu_runner.h"

#include <algorithm>
#include <string>

#include "runners/sequence_chunk.h"

namespace tern {

Result<int64_t> CpuRunner::pool_blocks(const ModelConfig& c, const RunnerOptions& options) {
  const int64_t block_size = options.block_size;
  if (block_size < 1 || block_size > 1024)
    return invalid_argument("block size must be in [1, 1024], got " + std::to_string(block_size));
  int64_t per_block = PagedKvPool::bytes_per_block(c.num_layers, c.kv_dim(), block_size, options.kv_cache_dtype);
  int64_t blocks = options.kv_cache_bytes / per_block;
  if (blocks < 1) {
    return resource_exhausted("the KV cache budget of " + std::to_string(options.kv_cache_bytes) +
                              " bytes holds no block of " + std::to_string(per_block) +
                              " bytes; raise --kv-cache-memory");
  }
  return blocks;
}

Result<std::unique_ptr<CpuRunner>> CpuRunner::create(Ernie45Model& model, const RunnerOptions& options) {
  const ModelConfig& c = model.config();
  TERN_ASSIGN_OR_RETURN(const int64_t blocks, pool_blocks(c, options));
  PagedKvPool pool(c.num_layers, c.kv_dim(), blocks, options.block_size, options.kv_cache_dtype);
  return std::unique_ptr<CpuRunner>(new CpuRunner(model, std::move(pool)));
}

Result<std::unique_ptr<CpuRunner>> CpuRunner::create(Ernie45Model& model, int64_t block_size,
                                                      int64_t kv_cache_bytes) {
  RunnerOptions options;
  options.block_size = block_size;
  options.kv_cache_bytes = kv_cache_bytes;
  return create(model, options);
}

Status CpuRunner::execute(const StepPlan& plan, StepOutput& out) {
  for (const BlockCopy& c : plan.copies) pool_.copy_block(c.src, c.dst);
  chunks_.clear();
  size_t want = 0, all_rows = 0;
  for (const ScheduledChunk& sc : plan.chunks) {
    want += sc.want_logits ? 1 : 0;
    all_rows += sc.all_logits ? static_cast<size_t>(sc.num_tokens) : 0;
    chunks_.push_back(sequence_chunk(sc));
  }
  // The CPU samples every row on the host (the argmax is no cheaper here).
  out.tokens.assign(want, -1);
  const auto vocab = static_cast<size_t>(vocab_size());
  out.logits.resize(want * vocab);
  out.prompt_logits.resize(all_rows * vocab);
  if (all_rows == 0) return model_.forward_batch(chunks_, pool_, out.logits);

  // The model writes every row of an all_logits chunk; its last one is also
  // the chunk's sampling row when it wants logits.
  size_t model_rows = 0;
  for (const ScheduledChunk& sc : plan.chunks)
    model_rows += sc.all_logits ? static_cast<size_t>(sc.num_tokens) : sc.want_logits ? 1 : 0;
  rows_.resize(model_rows * vocab);
  TERN_RETURN_IF_ERROR(model_.forward_batch(chunks_, pool_, rows_));
  const float* from = rows_.data();
  float* sample_row = out.logits.data();
  float* prompt_row = out.prompt_logits.data();
  for (const ScheduledChunk& sc : plan.chunks) {
    if (sc.all_logits) {
      const size_t n = static_cast<size_t>(sc.num_tokens) * vocab;
      std::copy_n(from, n, prompt_row);
      prompt_row += n;
      from += n;
      if (sc.want_logits) sample_row = std::copy_n(from - vocab, vocab, sample_row);
    } else if (sc.want_logits) {
      sample_row = std::copy_n(from, vocab, sample_row);
      from += vocab;
    }
  }
  return Status::ok();
}

}  // namespace tern
