// Greedy picks on the device for rows whose logits come from cuBLAS (the
// GEMV head folds its own): kBlocksPerRow blocks share a row, each finds
// the largest key (device_utils.cuh, pick_key) of its slice and folds it
// into the row's key with one atomicMax, so only a 64-bit key per row
// crosses to the host. The maximum does not depend on the order the
// blocks arrive in.
#include "backend/cuda/device_utils.cuh"

namespace tern::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerRow = 16;

__device__ __forceinline__ uint64_t warp_max_u64(uint64_t v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const uint64_t o = __shfl_xor_sync(0xffffffffu, v, offset);
    v = o > v ? o : v;
  }
  return v;
}

// The largest key of row[begin, end), kUnroll 16-byte loads in flight per
// thread (the kernel streams the logits once: bandwidth needs many bytes
// in flight per SM, more than one 4-byte load per thread gives).
constexpr int kUnroll = 4;

__device__ __forceinline__ uint64_t fold4(const float4 v, int64_t j, uint64_t best) {
  const float f[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (f[i] == f[i]) {
      const uint64_t k = pick_key(f[i], j + i);
      best = k > best ? k : best;
    }
  }
  return best;
}

__global__ void argmax_kernel(const float* logits, int64_t vocab, uint64_t* keys) {
  allow_dependent_launch();
  grid_dependency_wait();
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  uint64_t best = 0;
  if (vocab % 4 == 0) {  // rows 16-byte aligned: slices of whole float4s
    const int64_t quads = vocab / 4;
    const int64_t per = (quads + gridDim.y - 1) / gridDim.y;
    const int64_t begin = static_cast<int64_t>(blockIdx.y) * per;
    const int64_t end = begin + per < quads ? begin + per : quads;
    const float4* q = reinterpret_cast<const float4*>(row);
    const float nan = __int_as_float(0x7fffffff);  // past the slice: skipped as NaN logits are
    for (int64_t j = begin + threadIdx.x; j < end; j += kUnroll * kThreads) {
      float4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t at = j + u * kThreads;
        v[u] = at < end ? __ldcs(q + at) : make_float4(nan, nan, nan, nan);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) best = fold4(v[u], 4 * (j + u * kThreads), best);
    }
  } else {
    const int64_t per = (vocab + gridDim.y - 1) / gridDim.y;
    const int64_t begin = static_cast<int64_t>(blockIdx.y) * per;
    const int64_t end = begin + per < vocab ? begin + per : vocab;
    for (int64_t j = begin + threadIdx.x; j < end; j += kThreads) {
      const float v = row[j];
      if (v == v) {
        const uint64_t k = pick_key(v, j);
        best = k > best ? k : best;
      }
    }
  }
  __shared__ uint64_t warp_best[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  best = warp_max_u64(best);
  if (lane == 0) warp_best[warp] = best;
  __syncthreads();
  if (warp == 0) {
    best = lane < kThreads / 32 ? warp_best[lane] : 0;
    best = warp_max_u64(best);
    if (lane == 0 && best != 0) {
      atomicMax(reinterpret_cast<unsigned long long*>(keys) + blockIdx.x, static_cast<unsigned long long>(best));
    }
  }
}

}  // namespace

cudaError_t argmax_rows(const float* logits, int64_t num_rows, int64_t vocab, uint64_t* keys, cudaStream_t stream,
                        bool pdl) {
  if (num_rows <= 0) return cudaSuccess;
  if (vocab <= 0 || vocab >= INT32_MAX) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned int>(num_rows), kBlocksPerRow);
  return launch_kernel(argmax_kernel, grid, dim3(kThreads), 0, stream, pdl, logits, vocab, keys);
}

}  // namespace tern::cuda
