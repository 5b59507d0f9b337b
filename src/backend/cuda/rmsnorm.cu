// Residual add fused with RMSNorm: one block per row (for the common
// widths, rmsnorm_row.cuh's row form) reads the fp32 residual (and the delta to add), writes the
// sum back, and writes the normalized, scaled row in bf16 for the next
// GEMM. fp32 math throughout.
#include "backend/cuda/rmsnorm_row.cuh"

namespace tern::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void add_rmsnorm_kernel(float* x, const float* delta, const float* weight, const int32_t* rows,
                                   int64_t hidden, float eps, bf16* out, int delta_count, int64_t delta_stride) {
  const int64_t i = blockIdx.x;
  const int64_t r = rows != nullptr ? rows[i] : i;
  float* xr = x + r * hidden;
  float sum_sq = 0.0f;
  if (delta != nullptr) {
    const float* dr = delta + r * hidden;
    for (int64_t j = threadIdx.x; j < hidden; j += blockDim.x) {
      float d = dr[j];
      for (int c = 1; c < delta_count; ++c) d += dr[c * delta_stride + j];
      const float v = xr[j] + d;
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

// The same for rows of 128 V W floats (rmsnorm_row.cuh): a block of W warps
// per row, each thread loading its V float4 of the row (and of delta, and
// of the weight) at once and keeping them in registers.
template <int V, int W>
__global__ void __launch_bounds__(32 * W) add_rmsnorm_row_kernel(float* x, const float* delta, const float* weight,
                                                                const int32_t* rows, float eps, bf16* out,
                                                                int delta_count, int64_t delta_stride) {
  constexpr int kT = 32 * W;
  constexpr int64_t kHidden = 4 * V * kT;
  const int t = threadIdx.x;
  const int64_t i = blockIdx.x;
  const int64_t r = rows != nullptr ? rows[i] : i;
  float4* xr = reinterpret_cast<float4*>(x + r * kHidden);
  const float4* w4 = reinterpret_cast<const float4*>(weight);
  float4 v[V], w[V];
#pragma unroll
  for (int k = 0; k < V; ++k) v[k] = xr[t + kT * k];
  if (delta != nullptr) {
    const float4* dr = reinterpret_cast<const float4*>(delta + r * kHidden);
    float4 d[V];
#pragma unroll
    for (int k = 0; k < V; ++k) d[k] = dr[t + kT * k];
    for (int c = 1; c < delta_count; ++c) {
      const float4* dc = reinterpret_cast<const float4*>(delta + c * delta_stride + r * kHidden);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float4 e = dc[t + kT * k];
        d[k] = make_float4(d[k].x + e.x, d[k].y + e.y, d[k].z + e.z, d[k].w + e.w);
      }
    }
#pragma unroll
    for (int k = 0; k < V; ++k) {
      v[k] = make_float4(v[k].x + d[k].x, v[k].y + d[k].y, v[k].z + d[k].z, v[k].w + d[k].w);
      xr[t + kT * k] = v[k];
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) w[k] = w4[t + kT * k];
  const float scale = block_rms_scale<V, W>(v, eps);
  uint2* o = reinterpret_cast<uint2*>(out + i * kHidden);
#pragma unroll
  for (int k = 0; k < V; ++k) {
    o[t + kT * k] = make_uint2(pack_bf16x2(v[k].x * scale * w[k].x, v[k].y * scale * w[k].y),
                               pack_bf16x2(v[k].z * scale * w[k].z, v[k].w * scale * w[k].w));
  }
}

struct Deltas {
  int count = 1;
  int64_t stride = 0;
};

template <int V, int W>
cudaError_t launch_row(float* x, const float* delta, const float* weight, const int32_t* rows, int64_t num_rows,
                       float eps, bf16* out, cudaStream_t stream, Deltas d) {
  add_rmsnorm_row_kernel<V, W>
      <<<static_cast<unsigned int>(num_rows), 32 * W, 0, stream>>>(x, delta, weight, rows, eps, out, d.count, d.stride);
  return cudaGetLastError();
}

}  // namespace

cudaError_t add_rmsnorm(float* x, const float* delta, const float* weight, const int32_t* rows, int64_t num_rows,
                        int64_t hidden, float eps, bf16* out, cudaStream_t stream, int delta_count,
                        int64_t delta_stride) {
  if (num_rows <= 0) return cudaSuccess;
  if (delta_count < 1) return cudaErrorInvalidValue;
  const Deltas d{delta_count, delta_stride};
  switch (hidden) {  // rows the row form holds in registers (rmsnorm_row.cuh)
    case 256: return launch_row<1, 2>(x, delta, weight, rows, num_rows, eps, out, stream, d);
    case 512: return launch_row<1, 4>(x, delta, weight, rows, num_rows, eps, out, stream, d);
    case 1024: return launch_row<2, 4>(x, delta, weight, rows, num_rows, eps, out, stream, d);
    case 2048: return launch_row<4, 4>(x, delta, weight, rows, num_rows, eps, out, stream, d);
    default: break;
  }
  add_rmsnorm_kernel<<<static_cast<unsigned int>(num_rows), kThreads, 0, stream>>>(x, delta, weight, rows, hidden,
                                                                                   eps, out, d.count, d.stride);
  return cudaGetLastError();
}

}  // namespace tern::cuda
