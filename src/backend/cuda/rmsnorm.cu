// Residual add fused with RMSNorm: one block (for the common widths, one
// warp) per row reads the fp32 residual (and the delta to add), writes the
// sum back, and writes the normalized, scaled row in bf16 for the next
// GEMM. fp32 math throughout.
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

// The same with one warp per row for rows of 128 N floats: each lane loads
// its N float4 of the row (and of delta, and of the weight) at once and
// keeps them in registers, the sum of squares is a warp reduction, and
// there is no block barrier; 8 rows per block. The sums run in the same
// order as the GEMV's RMSNorm input (gemv.cu).
template <int N>
__global__ void __launch_bounds__(kThreads) add_rmsnorm_warp_kernel(float* x, const float* delta, const float* weight,
                                                                   const int32_t* rows, int64_t num_rows, float eps,
                                                                   bf16* out) {
  constexpr int64_t kHidden = 128 * N;
  const int lane = threadIdx.x & 31;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5);
  if (i >= num_rows) return;
  const int64_t r = rows != nullptr ? rows[i] : i;
  float4* xr = reinterpret_cast<float4*>(x + r * kHidden);
  const float4* w4 = reinterpret_cast<const float4*>(weight);
  float4 v[N], w[N];
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = xr[lane + 32 * k];
  if (delta != nullptr) {
    const float4* dr = reinterpret_cast<const float4*>(delta + r * kHidden);
    float4 d[N];
#pragma unroll
    for (int k = 0; k < N; ++k) d[k] = dr[lane + 32 * k];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      v[k] = make_float4(v[k].x + d[k].x, v[k].y + d[k].y, v[k].z + d[k].z, v[k].w + d[k].w);
      xr[lane + 32 * k] = v[k];
    }
  }
#pragma unroll
  for (int k = 0; k < N; ++k) w[k] = w4[lane + 32 * k];
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < N; ++k) sum_sq += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
  const float scale = 1.0f / sqrtf(warp_sum(sum_sq) / static_cast<float>(kHidden) + eps);
  uint2* o = reinterpret_cast<uint2*>(out + i * kHidden);
#pragma unroll
  for (int k = 0; k < N; ++k) {
    o[lane + 32 * k] = make_uint2(pack_bf16x2(v[k].x * scale * w[k].x, v[k].y * scale * w[k].y),
                                  pack_bf16x2(v[k].z * scale * w[k].z, v[k].w * scale * w[k].w));
  }
}

template <int N>
cudaError_t launch_warp(float* x, const float* delta, const float* weight, const int32_t* rows, int64_t num_rows,
                        float eps, bf16* out, cudaStream_t stream) {
  add_rmsnorm_warp_kernel<N><<<blocks_for(num_rows, kThreads / 32), kThreads, 0, stream>>>(x, delta, weight, rows,
                                                                                        num_rows, eps, out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t add_rmsnorm(float* x, const float* delta, const float* weight, const int32_t* rows, int64_t num_rows,
                        int64_t hidden, float eps, bf16* out, cudaStream_t stream) {
  if (num_rows <= 0) return cudaSuccess;
  switch (hidden) {  // rows the warp form holds in registers
    case 256: return launch_warp<2>(x, delta, weight, rows, num_rows, eps, out, stream);
    case 512: return launch_warp<4>(x, delta, weight, rows, num_rows, eps, out, stream);
    case 1024: return launch_warp<8>(x, delta, weight, rows, num_rows, eps, out, stream);
    case 2048: return launch_warp<16>(x, delta, weight, rows, num_rows, eps, out, stream);
    default: break;
  }
  add_rmsnorm_kernel<<<static_cast<unsigned int>(num_rows), kThreads, 0, stream>>>(x, delta, weight, rows, hidden,
                                                                                   eps, out);
  return cudaGetLastError();
}

}  // namespace tern::cuda
