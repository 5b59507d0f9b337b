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

// Uploads `model`'s weights to GPU 0 and sizes the GPU KV pool from
// kv_cache_bytes (whole blocks of block_size positions). Every step must
// hold at most max_num_batched_tokens tokens (the scheduler's budget). The
// model must outlive the runner only for its config; the weights are copied.
// Errors: Unsupported (built without CUDA, no GPU, a shape the kernels do
// not handle), ResourceExhausted (does not fit in GPU memory), InvalidArgument.
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
