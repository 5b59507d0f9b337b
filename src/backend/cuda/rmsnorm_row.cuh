// The row form shared by add_rmsnorm (rmsnorm.cu) and add_rmsnorm_e4m3
// (fp8_linear.cu), so the two normalize a row with the same sums: one
// block of W warps per row of hidden = 128 V W floats, each thread holding
// V float4 of it (thread t the float4s t, t + 32 W, ...): hidden 256 as
// V 1 in 2 warps, 512, 1,024 and 2,048 as V 1, 2 and 4 in 4 warps. A decode
// step's few hundred rows then run as that many blocks of up to 128
// threads, not one warp each.
#pragma once

#include "backend/cuda/device_utils.cuh"

namespace tern::cuda {

// 1 / sqrt(mean(v^2) + eps) over the block's row: each thread's squares in
// order, then its warp's (butterfly), then the W warps' sums in warp order;
// every thread gets the same value. One barrier.
template <int V, int W>
__device__ __forceinline__ float block_rms_scale(const float4 (&v)[V], float eps) {
  __shared__ float partial[W];
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < V; ++k) s += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
  s = warp_sum(s);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = s;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < W; ++w) total += partial[w];
  return 1.0f / sqrtf(total / static_cast<float>(128 * V * W) + eps);
}

}  // namespace tern::cuda
