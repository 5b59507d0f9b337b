// SiLU(gate) * up over the fused gate|up GEMM output, fp32 math, bf16 out.
#include "backend/cuda/device_utils.cuh"

namespace tern::cuda {
namespace {

__global__ void silu_mul_kernel(const bf16* gu, int64_t num_tokens, int64_t inter, bf16* out) {
  const int64_t n = num_tokens * inter;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = idx / inter, i = idx - t * inter;
    const bf16* row = gu + t * 2 * inter;
    const float g = load_bf16(row + i), u = load_bf16(row + inter + i);
    store_bf16(out + idx, g / (1.0f + expf(-g)) * u);
  }
}

}  // namespace

cudaError_t silu_mul(const bf16* gu, int64_t num_tokens, int64_t inter, bf16* out, cudaStream_t stream) {
  const int64_t n = num_tokens * inter;
  if (n <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  const unsigned int grid = static_cast<unsigned int>(blocks < 65536 ? blocks : 65536);
  silu_mul_kernel<<<grid, kThreads, 0, stream>>>(gu, num_tokens, inter, out);
  return cudaGetLastError();
}

}  // namespace tern::cuda
