// The CUDA backend behind the Runner interface: a StepPlan becomes
// SequenceChunks for cuda::DeviceModel, which holds the weights and the KV
// pool on the GPU. In a build without CUDA, make_cuda_runner says so.
// Engine thread only, as every Runner.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "engine/runner.h"
#include "model/arch/ernie4_5.h"

namespace tern {

// True when this tern was built with the CUDA backend (a GPU may still be absent).
bool cuda_backend_built();

struct CudaRunnerOptions {
  int64_t block_size = 16;
  int64_t kv_cache_bytes = 0;             // the GPU KV pool: whole blocks of block_size positions
  double gpu_memory_utilization = 0;      // > 0: size the pool from this share of the GPU instead
  bool kv_fit_to_free = false;            // kv_cache_bytes is a default: shrink it to what is free
  int64_t max_num_batched_tokens = 2048;  // the scheduler's token budget: no step holds more
  int64_t max_num_seqs = 256;             // the scheduler's sequence limit: decode graphs go up to it (<= 256)
  int64_t max_model_len = 0;              // longest sequence (0: the model's max positions)
  bool enforce_eager = false;             // --enforce-eager: no CUDA graphs
  bool decode_kernel = true;              // --no-decode-kernel: one-token steps on the GEMV kernels
};

// Uploads `model`'s weights to GPU 0, sizes the GPU KV pool and captures
// the decode graphs. Plain-greedy rows (ScheduledChunk::device_greedy) get
// their token picked on the GPU; the other rows' logits come to the host.
// The model must outlive the runner only for its config; the weights are
// copied. Errors: Unsupported (built without CUDA, no GPU, a shape the
// kernels do not handle), ResourceExhausted (does not fit in GPU memory),
// InvalidArgument.
Result<std::unique_ptr<Runner>> make_cuda_runner(Ernie45Model& model, const CudaRunnerOptions& options);
// The same with the other options at their defaults.
Result<std::unique_ptr<Runner>> make_cuda_runner(Ernie45Model& model, int64_t block_size, int64_t kv_cache_bytes,
                                                 int64_t max_num_batched_tokens);

}  // namespace tern

#ifdef TERN_HAVE_CUDA
#include "backend/cuda/device_model.h"

namespace tern {

// The model's weights as host views for cuda::DeviceModel::create (tests, benchmarks).
cuda::HostWeights cuda_host_weights(const Ernie45Model& model);

}  // namespace tern
#endif
