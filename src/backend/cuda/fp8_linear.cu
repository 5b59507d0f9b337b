// The FP8 linear layers' two kernels (gemm_fp8.h): per-token e4m3
// quantization of the activations for the tensor-core GEMM, and the
// weights dequantized to bf16 for the fallback.
#include <algorithm>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/fp8_utils.cuh"
#include "backend/cuda/gemm_fp8.h"

namespace tern::cuda {
namespace {

constexpr int kQuantThreads = 256;

// One block per row: the row's largest magnitude, then its codes (the row
// is read twice; the second pass finds it in L1/L2).
__global__ void __launch_bounds__(kQuantThreads)
    quantize_rows_kernel(const bf16* x, int64_t cols, uint8_t* q, float* scales) {
  const int64_t row = blockIdx.x;
  const bf16* xr = x + row * cols;
  uint8_t* qr = q + row * cols;
  float amax = 0.0f;
  for (int64_t k = threadIdx.x; k < cols; k += kQuantThreads) amax = fmaxf(amax, fabsf(load_bf16(xr + k)));
  __shared__ float partial[kQuantThreads / 32];
  __shared__ float row_amax;
  amax = warp_max(amax);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = amax;
  __syncthreads();
  if (threadIdx.x < 32) {
    float m = threadIdx.x < kQuantThreads / 32 ? partial[threadIdx.x] : 0.0f;
    m = warp_max(m);
    if (threadIdx.x == 0) row_amax = m;
  }
  __syncthreads();
  const float a = row_amax;
  if (a == 0.0f) {  // a zero row (or one of NaNs, which the model never makes): scale 0, codes 0
    for (int64_t k = threadIdx.x; k < cols; k += kQuantThreads) qr[k] = 0;
    if (threadIdx.x == 0) scales[row] = 0.0f;
    return;
  }
  const float s = a / 448.0f;  // correctly rounded division, as the host's
  for (int64_t k = threadIdx.x; k < cols; k += kQuantThreads) qr[k] = f32_to_e4m3(load_bf16(xr + k) / s);
  if (threadIdx.x == 0) scales[row] = s;
}

__global__ void dequantize_rows_kernel(const uint8_t* w, const float* scales, int64_t rows, int64_t cols,
                                       bf16* out) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = e4m3x2_to_float2(w[i]).x;
    store_bf16(out + i, v * scales[i / cols]);
  }
}

}  // namespace

cudaError_t quantize_rows_e4m3(const bf16* x, int64_t rows, int64_t cols, uint8_t* q, float* scales,
                               cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  quantize_rows_kernel<<<static_cast<unsigned int>(rows), kQuantThreads, 0, stream>>>(x, cols, q, scales);
  return cudaGetLastError();
}

cudaError_t dequantize_e4m3_rows(const uint8_t* w, const float* scales, int64_t rows, int64_t cols, bf16* out,
                                 cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const int64_t total = rows * cols;
  const auto blocks = static_cast<unsigned int>(std::min<int64_t>((total + 255) / 256, 4096));
  dequantize_rows_kernel<<<blocks, 256, 0, stream>>>(w, scales, rows, cols, out);
  return cudaGetLastError();
}

}  // namespace tern::cuda
