// Interleaved RoPE fused with the write of K/V into the paged cache: one
// block per token rotates its q heads in place in the qkv row and writes the
// rotated k and the v straight into the token's slot of the layer's K and V
// planes, so k never makes a round trip through memory. The token's cos/sin
// are computed once into shared memory (not once per head). The kernel is
// latency-bound (a token's row is ~5 KB): its position, slot, frequencies,
// v and first kRopeLoads pairs per thread all go out in one round trip
// before any of them is used. An fp8 pool (KvPlanes::fp8) takes the rotated
// k in fp32 and v as e4m3, rounded once.
#include "backend/cuda/device_utils.cuh"

namespace tern::cuda {
namespace {

constexpr int kRopeThreads = 256;
constexpr int kRopeLoads = 8;  // q|k pairs in flight per thread (2048 per round: ERNIE-0.3B's 1152 in one)
constexpr int kVLoads = 2;     // v words in flight per thread (512 per round)

template <typename Cache>
__global__ void __launch_bounds__(kRopeThreads) rope_store_kv_kernel(RopeKvParams p) {
  allow_dependent_launch();
  grid_dependency_wait();
  extern __shared__ float cos_sin[];  // [head_dim / 2][2]: the token's rotations, shared by its heads
  const int64_t t = blockIdx.x;
  const int half = p.heads.head_dim / 2;
  const int64_t kv_dim = static_cast<int64_t>(p.heads.num_kv_heads) * p.heads.head_dim;
  const int num_pairs = (p.heads.num_heads + p.heads.num_kv_heads) * half;
  const int v_words = static_cast<int>(kv_dim / 2);  // two values per word (head_dim is even)
  bf16* q = p.qkv + t * p.row_stride;
  const bf16* k = q + static_cast<int64_t>(p.heads.num_heads) * p.heads.head_dim;
  const uint32_t* v = reinterpret_cast<const uint32_t*>(k + kv_dim);
  // Pair idx is dims (2i, 2i + 1) of head idx / half: q heads in place, then k heads into the slot.
  auto source = [&](int idx) -> const uint32_t* {
    const int head = idx / half, i = idx - head * half;
    return reinterpret_cast<const uint32_t*>(
        head < p.heads.num_heads ? q + head * p.heads.head_dim + 2 * i
                                 : k + static_cast<int64_t>(head - p.heads.num_heads) * p.heads.head_dim + 2 * i);
  };
  const int tid = static_cast<int>(threadIdx.x);
  uint32_t in[kRopeLoads], vw[kVLoads];
  const auto load_pairs = [&](int base) {
#pragma unroll
    for (int u = 0; u < kRopeLoads; ++u) {
      const int idx = base + u * kRopeThreads;
      in[u] = idx < num_pairs ? *source(idx) : 0u;
    }
  };
  const auto load_v = [&](int base) {
#pragma unroll
    for (int u = 0; u < kVLoads; ++u) {
      const int j = base + u * kRopeThreads;
      vw[u] = j < v_words ? v[j] : 0u;
    }
  };
  // One round trip: the token's position and slot, the frequencies, v's and the pairs' first words.
  const float pos = static_cast<float>(p.places.positions[t]);
  const int64_t slot = p.places.slots[t];
  load_v(tid);
  load_pairs(tid);
  // As the reference: the angle is rounded to fp32, then cos/sin of it are
  // computed accurately (sincosf without fast math).
  for (int i = tid; i < half; i += kRopeThreads) {
    float sn, cs;
    sincosf(p.places.inv_freq[i] * pos, &sn, &cs);
    cos_sin[2 * i] = cs;
    cos_sin[2 * i + 1] = sn;
  }
  Cache* k_out = k_plane<Cache>(p.planes) + slot * kv_dim;
  Cache* v_out = v_plane<Cache>(p.planes) + slot * kv_dim;
  for (int base = tid;;) {
#pragma unroll
    for (int u = 0; u < kVLoads; ++u) {
      const int j = base + u * kRopeThreads;
      if (j < v_words) store_kv2(v_out, 2 * j, vw[u]);
    }
    base += kVLoads * kRopeThreads;
    if (base >= v_words) break;
    load_v(base);
  }
  __syncthreads();  // cos_sin
  for (int base = tid;;) {
#pragma unroll
    for (int u = 0; u < kRopeLoads; ++u) {
      const int idx = base + u * kRopeThreads;
      if (idx >= num_pairs) break;
      const int head = idx / half, i = idx - head * half;
      if (head < p.heads.num_heads) {
        *reinterpret_cast<uint32_t*>(q + head * p.heads.head_dim + 2 * i) =
            rope_pair(in[u], cos_sin[2 * i], cos_sin[2 * i + 1]);
      } else if constexpr (sizeof(Cache) == 1) {
        const float2 r = rope_pair_f32(in[u], cos_sin[2 * i], cos_sin[2 * i + 1]);
        store_kv2(k_out, static_cast<int64_t>(head - p.heads.num_heads) * p.heads.head_dim + 2 * i, r.x, r.y);
      } else {
        store_kv2(k_out, static_cast<int64_t>(head - p.heads.num_heads) * p.heads.head_dim + 2 * i,
                  rope_pair(in[u], cos_sin[2 * i], cos_sin[2 * i + 1]));
      }
    }
    base += kRopeLoads * kRopeThreads;
    if (base >= num_pairs) break;
    load_pairs(base);
  }
}

}  // namespace

cudaError_t rope_store_kv(const RopeKvParams& p, cudaStream_t stream, bool pdl) {
  if (p.num_tokens <= 0) return cudaSuccess;
  if (p.heads.head_dim <= 0 || p.heads.head_dim % 2 != 0) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned int>(p.num_tokens));
  const size_t smem = static_cast<size_t>(p.heads.head_dim) * sizeof(float);
  if (p.planes.fp8()) {
    if (p.planes.v_fp8 == nullptr) return cudaErrorInvalidValue;
    return launch_kernel(rope_store_kv_kernel<fp8e4m3>, grid, dim3(kRopeThreads), smem, stream, pdl, p);
  }
  return launch_kernel(rope_store_kv_kernel<bf16>, grid, dim3(kRopeThreads), smem, stream, pdl, p);
}

}  // namespace tern::cuda
