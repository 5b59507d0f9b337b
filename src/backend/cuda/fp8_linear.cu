// The FP8 linear layers' kernels (gemm_fp8.h): per-token e4m3
// quantization of the activations for the tensor-core GEMM, the scales
// applied to its unscaled fp32 sums, and the weights dequantized to bf16
// for the fallback.
#include <algorithm>
#include <cstdint>

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

// The same values 16 codes at a time (cols a multiple of 16, so the 16 are
// one row's): one 16-byte load, two 16-byte stores. Bit for bit the
// kernel above: each code's value times its row's scale, rounded once.
__global__ void dequantize_rows16_kernel(const uint8_t* w, const float* scales, int64_t groups, int64_t cols,
                                         bf16* out) {
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 c = __ldg(reinterpret_cast<const uint4*>(w) + g);
    const float s = __ldg(scales + g * 16 / cols);
    const uint32_t words[4] = {c.x, c.y, c.z, c.w};
    uint32_t pairs[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 lo = e4m3x2_to_float2(words[j]), hi = e4m3x2_to_float2(words[j] >> 16);
      pairs[2 * j] = pack_bf16x2(lo.x * s, lo.y * s);
      pairs[2 * j + 1] = pack_bf16x2(hi.x * s, hi.y * s);
    }
    uint4* dst = reinterpret_cast<uint4*>(out) + 2 * g;
    dst[0] = make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
    dst[1] = make_uint4(pairs[4], pairs[5], pairs[6], pairs[7]);
  }
}

// y[t, n] (=, or += for kAddF32) sums[t, n] * x_scales[t] * w_scales[n],
// four outputs of one row a thread (N a multiple of 4).
template <GemmOut kOut>
__global__ void scale_sums_kernel(const float* sums, int64_t quads, int64_t N, const float* x_scales,
                                  const float* w_scales, void* y) {
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < quads;
       q += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = q * 4 / N, n = q * 4 - t * N;
    const float4 v = __ldg(reinterpret_cast<const float4*>(sums) + q);
    const float4 ws = __ldg(reinterpret_cast<const float4*>(w_scales + n));
    const float xs = __ldg(x_scales + t);
    const float4 r = make_float4(v.x * xs * ws.x, v.y * xs * ws.y, v.z * xs * ws.z, v.w * xs * ws.w);
    if constexpr (kOut == GemmOut::kBf16) {
      reinterpret_cast<uint2*>(y)[q] = make_uint2(pack_bf16x2(r.x, r.y), pack_bf16x2(r.z, r.w));
    } else if constexpr (kOut == GemmOut::kF32) {
      reinterpret_cast<float4*>(y)[q] = r;
    } else {
      float4* p = reinterpret_cast<float4*>(y) + q;
      const float4 old = *p;
      *p = make_float4(old.x + r.x, old.y + r.y, old.z + r.z, old.w + r.w);
    }
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
  const bool aligned = reinterpret_cast<uintptr_t>(w) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if (cols % 16 == 0 && aligned) {
    const int64_t groups = total / 16;
    const auto blocks = static_cast<unsigned int>(std::min<int64_t>((groups + 255) / 256, 8192));
    dequantize_rows16_kernel<<<blocks, 256, 0, stream>>>(w, scales, groups, cols, out);
    return cudaGetLastError();
  }
  const auto blocks = static_cast<unsigned int>(std::min<int64_t>((total + 255) / 256, 4096));
  dequantize_rows_kernel<<<blocks, 256, 0, stream>>>(w, scales, rows, cols, out);
  return cudaGetLastError();
}

cudaError_t scale_e4m3_sums(const float* sums, int64_t rows, int64_t cols, const float* x_scales,
                            const float* w_scales, void* y, GemmOut out, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (cols % 4 != 0 || reinterpret_cast<uintptr_t>(sums) % 16 != 0 || reinterpret_cast<uintptr_t>(w_scales) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(y) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t quads = rows * cols / 4;
  const auto blocks = static_cast<unsigned int>(std::min<int64_t>((quads + 255) / 256, 8192));
  switch (out) {
    case GemmOut::kBf16:
      scale_sums_kernel<GemmOut::kBf16><<<blocks, 256, 0, stream>>>(sums, quads, cols, x_scales, w_scales, y);
      break;
    case GemmOut::kF32:
      scale_sums_kernel<GemmOut::kF32><<<blocks, 256, 0, stream>>>(sums, quads, cols, x_scales, w_scales, y);
      break;
    case GemmOut::kAddF32:
      scale_sums_kernel<GemmOut::kAddF32><<<blocks, 256, 0, stream>>>(sums, quads, cols, x_scales, w_scales, y);
      break;
  }
  return cudaGetLastError();
}

}  // namespace tern::cuda
