// Embedding gather: one block per token copies its row of the bf16 table
// into the fp32 residual stream.
#include "backend/cuda/device_utils.cuh"

namespace tern::cuda {
namespace {

__global__ void embedding_gather_kernel(const bf16* table, const int32_t* ids, int64_t hidden, float* x) {
  allow_dependent_launch();
  const int64_t t = blockIdx.x;
  const bf16* row = table + static_cast<int64_t>(ids[t]) * hidden;
  float* out = x + t * hidden;
  grid_dependency_wait();
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) out[i] = load_bf16(row + i);
}

}  // namespace

cudaError_t embedding_gather(const bf16* table, const int32_t* ids, int64_t num_tokens, int64_t hidden, float* x,
                             cudaStream_t stream, bool pdl) {
  if (num_tokens <= 0) return cudaSuccess;
  return launch_kernel(embedding_gather_kernel, dim3(static_cast<unsigned int>(num_tokens)), dim3(256), 0, stream, pdl,
                       table, ids, hidden, x);
}

}  // namespace tern::cuda
