// Interleaved RoPE fused with the write of K/V into the paged cache: one
// block per token rotates its q heads in place in the qkv row and writes the
// rotated k and the v straight into the token's slot of the layer's K and V
// planes, so k never makes a round trip through memory. The token's cos/sin
// are computed once into shared memory (not once per head), and each thread
// has several pairs' loads in flight.
#include "backend/cuda/device_utils.cuh"

namespace tern::cuda {
namespace {

constexpr int kRopeThreads = 256;
constexpr int kRopeUnroll = 4;  // pairs in flight per thread

__global__ void __launch_bounds__(kRopeThreads) rope_store_kv_kernel(RopeKvParams p) {
  allow_dependent_launch();
  grid_dependency_wait();
  extern __shared__ float cos_sin[];  // [head_dim / 2][2]: the token's rotations, shared by its heads
  const int64_t t = blockIdx.x;
  const int half = p.head_dim / 2;
  const int64_t kv_dim = static_cast<int64_t>(p.num_kv_heads) * p.head_dim;
  // As the reference: the angle is rounded to fp32, then cos/sin of it are
  // computed accurately (sincosf without fast math).
  const float pos = static_cast<float>(p.positions[t]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float sn, cs;
    sincosf(p.inv_freq[i] * pos, &sn, &cs);
    cos_sin[2 * i] = cs;
    cos_sin[2 * i + 1] = sn;
  }
  const int64_t slot = p.slots[t];
  bf16* q = p.qkv + t * p.row_stride;
  const bf16* k = q + static_cast<int64_t>(p.num_heads) * p.head_dim;
  const bf16* v = k + kv_dim;
  bf16* k_out = p.k_cache + slot * kv_dim;
  bf16* v_out = p.v_cache + slot * kv_dim;
  // v as it is, two values per word (head_dim is even).
  for (int64_t j = threadIdx.x; j < kv_dim / 2; j += blockDim.x) {
    reinterpret_cast<uint32_t*>(v_out)[j] = reinterpret_cast<const uint32_t*>(v)[j];
  }
  __syncthreads();
  // Pair idx is dims (2i, 2i + 1) of head idx / half: q heads in place, then k heads into the slot.
  auto source = [&](int idx) -> const uint32_t* {
    const int head = idx / half, i = idx - head * half;
    return reinterpret_cast<const uint32_t*>(
        head < p.num_heads ? q + head * p.head_dim + 2 * i
                           : k + static_cast<int64_t>(head - p.num_heads) * p.head_dim + 2 * i);
  };
  const int num_pairs = (p.num_heads + p.num_kv_heads) * half;
  for (int base = threadIdx.x; base < num_pairs; base += kRopeUnroll * blockDim.x) {
    uint32_t in[kRopeUnroll];
#pragma unroll
    for (int u = 0; u < kRopeUnroll; ++u) {
      const int idx = base + u * static_cast<int>(blockDim.x);
      in[u] = idx < num_pairs ? *source(idx) : 0u;
    }
#pragma unroll
    for (int u = 0; u < kRopeUnroll; ++u) {
      const int idx = base + u * static_cast<int>(blockDim.x);
      if (idx >= num_pairs) break;
      const int head = idx / half, i = idx - head * half;
      const float c = cos_sin[2 * i], sn = cos_sin[2 * i + 1];
      const float a = lo_bf16(in[u]), b = hi_bf16(in[u]);
      const __nv_bfloat162 r = __floats2bfloat162_rn(a * c - b * sn, b * c + a * sn);
      uint32_t* dst = reinterpret_cast<uint32_t*>(
          head < p.num_heads ? q + head * p.head_dim + 2 * i
                             : k_out + static_cast<int64_t>(head - p.num_heads) * p.head_dim + 2 * i);
      *dst = *reinterpret_cast<const uint32_t*>(&r);
    }
  }
}

}  // namespace

cudaError_t rope_store_kv(const RopeKvParams& p, cudaStream_t stream, bool pdl) {
  if (p.num_tokens <= 0) return cudaSuccess;
  if (p.head_dim <= 0 || p.head_dim % 2 != 0) return cudaErrorInvalidValue;
  return launch_kernel(rope_store_kv_kernel, dim3(static_cast<unsigned int>(p.num_tokens)), dim3(kRopeThreads),
                       static_cast<size_t>(p.head_dim) * sizeof(float), stream, pdl, p);
}

}  // namespace tern::cuda
