// Interleaved RoPE fused with the write of K/V into the paged cache: one
// block per token rotates its q heads in place in the qkv row and writes the
// rotated k and the v straight into the token's slot of the layer's K and V
// planes, so k never makes a round trip through memory.
#include "backend/cuda/device_utils.cuh"

namespace tern::cuda {
namespace {

__global__ void rope_store_kv_kernel(RopeKvParams p) {
  allow_dependent_launch();
  grid_dependency_wait();
  const int64_t t = blockIdx.x;
  const int half = p.head_dim / 2;
  const int64_t kv_dim = static_cast<int64_t>(p.num_kv_heads) * p.head_dim;
  // As the reference: the angle is rounded to fp32, then cos/sin of it are
  // computed accurately (sincosf without fast math).
  const float pos = static_cast<float>(p.positions[t]);
  const int64_t slot = p.slots[t];
  bf16* q = p.qkv + t * p.row_stride;
  const bf16* k = q + static_cast<int64_t>(p.num_heads) * p.head_dim;
  const bf16* v = k + kv_dim;
  bf16* k_out = p.k_cache + slot * kv_dim;
  bf16* v_out = p.v_cache + slot * kv_dim;
  const int num_pairs = (p.num_heads + p.num_kv_heads) * half;
  for (int idx = threadIdx.x; idx < num_pairs; idx += blockDim.x) {
    const int head = idx / half, i = idx - head * half;
    float s, c;
    sincosf(p.inv_freq[i] * pos, &s, &c);
    if (head < p.num_heads) {
      bf16* x = q + head * p.head_dim + 2 * i;
      const float a = load_bf16(x), b = load_bf16(x + 1);
      store_bf16(x, a * c - b * s);
      store_bf16(x + 1, b * c + a * s);
    } else {
      const int64_t off = static_cast<int64_t>(head - p.num_heads) * p.head_dim + 2 * i;
      const float a = load_bf16(k + off), b = load_bf16(k + off + 1);
      store_bf16(k_out + off, a * c - b * s);
      store_bf16(k_out + off + 1, b * c + a * s);
    }
  }
  for (int64_t j = threadIdx.x; j < kv_dim; j += blockDim.x) v_out[j] = v[j];
}

}  // namespace

cudaError_t rope_store_kv(const RopeKvParams& p, cudaStream_t stream, bool pdl) {
  if (p.num_tokens <= 0) return cudaSuccess;
  return launch_kernel(rope_store_kv_kernel, dim3(static_cast<unsigned int>(p.num_tokens)), dim3(128), 0, stream, pdl,
                       p);
}

}  // namespace tern::cuda
