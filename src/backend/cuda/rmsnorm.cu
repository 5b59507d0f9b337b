// Residual add fused with RMSNorm: one block per row reads the fp32 residual
// (and the delta to add), writes the sum back, and writes the normalized,
// scaled row in bf16 for the next GEMM. fp32 math throughout.
#include "backend/cuda/device_utils.cuh"

namespace tern::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void add_rmsnorm_kernel(float* x, const float* delta, const float* weight, const int32_t* rows,
                                   int64_t hidden, float eps, bf16* out) {
  const int64_t i = blockIdx.x;
  const int64_t r = rows != nullptr ? rows[i] : i;
  float* xr = x + r * hidden;
  float sum_sq = 0.0f;
  if (delta != nullptr) {
    const float* dr = delta + r * hidden;
    for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
      const float v = xr[j] + dr[j];
      xr[j] = v;
      sum_sq += v * v;
    }
  } else {
    for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) sum_sq += xr[j] * xr[j];
  }
  // Each thread re-reads only the elements it wrote, so no barrier is needed
  // for xr; block_sum has its own.
  const float total = block_sum(sum_sq);
  const float scale = 1.0f / sqrtf(total / static_cast<float>(hidden) + eps);
  bf16* o = out + i * hidden;
  for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) store_bf16(o + j, xr[j] * scale * weight[j]);
}

}  // namespace

cudaError_t add_rmsnorm(float* x, const float* delta, const float* weight, const int32_t* rows, int64_t num_rows,
                        int64_t hidden, float eps, bf16* out, cudaStream_t stream) {
  if (num_rows <= 0) return cudaSuccess;
  add_rmsnorm_kernel<<<static_cast<unsigned int>(num_rows), kThreads, 0, stream>>>(x, delta, weight, rows, hidden,
                                                                                   eps, out);
  return cudaGetLastError();
}

}  // namespace tern::cuda
