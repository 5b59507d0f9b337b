// Embedding gather: one block per token copies its row of the bf16 table
// into the fp32 residual stream. The first block also clears the step's
// argmax keys, so a decode graph needs no separate memset.
#include "backend/cuda/device_utils.cuh"

namespace tern::cuda {
namespace {

__global__ void embedding_gather_kernel(const bf16* table, const int32_t* ids, int64_t hidden, float* x,
                                        uint64_t* clear_keys, int64_t num_clear) {
  allow_dependent_launch();
  const int64_t t = blockIdx.x;
  const bf16* row = table + static_cast<int64_t>(ids[t]) * hidden;
  float* out = x + t * hidden;
  grid_dependency_wait();
  if (t == 0) {
    for (int64_t i = threadIdx.x; i < num_clear; i += blockDim.x) clear_keys[i] = 0;
  }
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) out[i] = load_bf16(row + i);
}

__global__ void feed_picks_kernel(int32_t* ids, const int32_t* pairs, int64_t count, const uint64_t* keys) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t key = keys[pairs[2 * i + 1]];  // as pick_of (kernels.h)
    ids[pairs[2 * i]] = key == 0 ? 0 : static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key & 0xffffffffu));
  }
}

}  // namespace

cudaError_t feed_picks(int32_t* ids, const int32_t* pairs, int64_t count, const uint64_t* keys,
                       cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  feed_picks_kernel<<<blocks_for(count, 256), 256, 0, stream>>>(ids, pairs, count, keys);
  return cudaGetLastError();
}

cudaError_t embedding_gather(const bf16* table, const int32_t* ids, int64_t num_tokens, int64_t hidden, float* x,
                             cudaStream_t stream, bool pdl, uint64_t* clear_keys, int64_t num_clear) {
  if (num_tokens <= 0) return cudaSuccess;
  return launch_kernel(embedding_gather_kernel, dim3(static_cast<unsigned int>(num_tokens)), dim3(256), 0, stream, pdl,
                       table, ids, hidden, x, clear_keys, clear_keys != nullptr ? num_clear : int64_t{0});
}

}  // namespace tern::cuda
