// The CUDA backend behind the Runner interface: a StepPlan becomes
// SequenceChunks for cuda::DeviceModel, which holds the weights and the KV
// pool on the GPU. In a build without CUDA, make_cuda_runner says so.
// Engine thread only, as every Runner.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "engine/runner.h"
#include "model/ernie4_5/ernie4_5_model.h"
#include "model/runner_options.h"

namespace tern {

// True when this tern was built with the CUDA backend (a GPU may still be absent).
bool cuda_backend_built();

// Uploads `model`'s weights to GPU 0, sizes the GPU KV pool and captures
// the decode graphs. Plain-greedy rows (ScheduledChunk::device_greedy) get
// their token picked on the GPU; the other rows' logits come to the host.
// The model must outlive the runner only for its config; the weights are
// copied. Errors: Unsupported (built without CUDA, no GPU, a shape the
// kernels do not handle), ResourceExhausted (does not fit in GPU memory),
// InvalidArgument.
Result<std::unique_ptr<Runner>> make_cuda_runner(Ernie45Model& model, const RunnerOptions& options);
// The same with the other options at their defaults.
Result<std::unique_ptr<Runner>> make_cuda_runner(Ernie45Model& model, int64_t block_size, int64_t kv_cache_bytes,
                                                 int64_t max_num_batched_tokens);

}  // namespace tern

#ifdef TERN_HAVE_CUDA
#include "model/ernie4_5/cuda/device_model.h"

namespace tern {

// The model's weights as host views for cuda::DeviceModel::create (tests, benchmarks).
cuda::HostWeights cuda_host_weights(const Ernie45Model& model);

}  // namespace tern
#endif
