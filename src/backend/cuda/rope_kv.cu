// Interleaved RoPE fused with the write of K/V into the paged cache: a
// warp per token rotates its q heads in place in the qkv row and writes the
// rotated k and the v straight into the token's slot of the layer's K and V
// planes, so k never makes a round trip through memory. The token's cos/sin
// are computed once into shared memory (not once per head). The kernel is
// latency-bound (a token's row is ~2.5 KB): its position, slot, frequencies
// and the first kRopeLoads units of its row per lane all go out in one round
// trip before any of them is used. A unit is 16 bytes (4 q|k pairs or 8 v
// values, never across a head) when the shapes and pointers allow, else one
// pair. An fp8 pool (KvPlanes::fp8) takes the rotated k in fp32 and v as
// e4m3, rounded once. With kv_only the warp starts at k's first unit and
// q stays as it is (the prefill tiles rotate it).
#include "backend/cuda/device_utils.cuh"

namespace tern::cuda {
namespace {

constexpr int kRopeTokensPerBlock = 8;  // a warp each
constexpr int kRopeLoads = 5;           // units in flight per lane (16 + 2 + 2 heads of 64: 160 16-byte units, one round)

// kWords bf16 pairs (32-bit words) moved as one load or store.
template <int kWords>
struct alignas(4 * kWords) Words {
  uint32_t w[kWords];
};
// The same count of e4m3 pairs.
template <int kWords>
struct alignas(2 * kWords) Fp8Words {
  uint16_t h[kWords];
};

template <typename Cache, int kWords>
__device__ __forceinline__ void store_unit(Cache* at, const Words<kWords>& bf16_pairs) {
  if constexpr (sizeof(Cache) == 1) {
    Fp8Words<kWords> out;
#pragma unroll
    for (int w = 0; w < kWords; ++w) out.h[w] = fp8x2_of(lo_bf16(bf16_pairs.w[w]), hi_bf16(bf16_pairs.w[w]));
    *reinterpret_cast<Fp8Words<kWords>*>(at) = out;
  } else {
    *reinterpret_cast<Words<kWords>*>(at) = bf16_pairs;
  }
}

template <typename Cache, int kWords>
__global__ void __launch_bounds__(32 * kRopeTokensPerBlock) rope_store_kv_kernel(RopeKvParams p) {
  allow_dependent_launch();
  grid_dependency_wait();
  extern __shared__ float cos_sin_all[];  // [warp][head_dim / 2][2]: each token's rotations, shared by its heads
  constexpr int kValues = 2 * kWords;     // bf16 values per unit
  using Unit = Words<kWords>;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRopeTokensPerBlock + warp;
  if (t >= p.num_tokens) return;
  const int head_dim = p.heads.head_dim, half = head_dim / 2;
  const int q_dim = p.heads.num_heads * head_dim, kv_dim = p.heads.num_kv_heads * head_dim;
  const int units = (q_dim + 2 * kv_dim) / kValues;
  const int first_unit = p.kv_only ? q_dim / kValues : 0;  // kv_only: from k's first unit (q_dim % kValues == 0)
  float* cos_sin = cos_sin_all + warp * head_dim;
  bf16* row = p.qkv + t * p.row_stride;  // q | k | v
  Unit in[kRopeLoads];
  const auto load = [&](int base) {
#pragma unroll
    for (int u = 0; u < kRopeLoads; ++u) {
      const int idx = base + u * 32;
      if (idx < units) in[u] = reinterpret_cast<const Unit*>(row)[idx];
    }
  };
  // One round trip: the token's position and slot, the frequencies and the row's first units.
  const float pos = static_cast<float>(p.places.positions[t]);
  const int64_t slot = p.places.slots[t];
  load(first_unit + lane);
  // As the reference: the angle is rounded to fp32, then cos/sin of it are
  // computed accurately (sincosf without fast math).
  for (int i = lane; i < half; i += 32) {
    float sn, cs;
    sincosf(p.places.inv_freq[i] * pos, &sn, &cs);
    cos_sin[2 * i] = cs;
    cos_sin[2 * i + 1] = sn;
  }
  __syncwarp();  // cos_sin
  Cache* k_out = k_plane<Cache>(p.planes) + slot * kv_dim;
  Cache* v_out = v_plane<Cache>(p.planes) + slot * kv_dim;
  for (int base = first_unit + lane;;) {
#pragma unroll
    for (int u = 0; u < kRopeLoads; ++u) {
      const int idx = base + u * 32;
      if (idx >= units) break;
      const int e = idx * kValues;  // the unit's first value in the row
      if (e >= q_dim + kv_dim) {
        store_unit<Cache, kWords>(v_out + (e - q_dim - kv_dim), in[u]);
        continue;
      }
      const int i0 = (e % head_dim) / 2;  // its first pair within the head
      if constexpr (sizeof(Cache) == 1) {
        if (e >= q_dim) {  // k: rotated in fp32, rounded once to e4m3
          Fp8Words<kWords> out;
#pragma unroll
          for (int w = 0; w < kWords; ++w) {
            const float2 r = rope_pair_f32(in[u].w[w], cos_sin[2 * (i0 + w)], cos_sin[2 * (i0 + w) + 1]);
            out.h[w] = fp8x2_of(r.x, r.y);
          }
          *reinterpret_cast<Fp8Words<kWords>*>(k_out + (e - q_dim)) = out;
          continue;
        }
      }
      Unit r;
#pragma unroll
      for (int w = 0; w < kWords; ++w) r.w[w] = rope_pair(in[u].w[w], cos_sin[2 * (i0 + w)], cos_sin[2 * (i0 + w) + 1]);
      bf16* to = e < q_dim ? row + e : reinterpret_cast<bf16*>(k_out) + (e - q_dim);  // q in place, k to its slot
      *reinterpret_cast<Unit*>(to) = r;
    }
    base += kRopeLoads * 32;
    if (base >= units) break;
    load(base);
  }
}

bool aligned(const void* ptr, size_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

}  // namespace

cudaError_t rope_store_kv(const RopeKvParams& p, cudaStream_t stream, bool pdl) {
  if (p.num_tokens <= 0) return cudaSuccess;
  if (p.heads.head_dim <= 0 || p.heads.head_dim % 2 != 0) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned int>((p.num_tokens + kRopeTokensPerBlock - 1) / kRopeTokensPerBlock));
  const dim3 block(32 * kRopeTokensPerBlock);
  const size_t smem = static_cast<size_t>(kRopeTokensPerBlock) * p.heads.head_dim * sizeof(float);
  const bool fp8 = p.planes.fp8();
  if (fp8 && p.planes.v_fp8 == nullptr) return cudaErrorInvalidValue;
  // 16-byte units: 8 values never cross a head, and every row, plane and slot start is aligned to them.
  const bool wide = p.heads.head_dim % 8 == 0 && p.row_stride % 8 == 0 && aligned(p.qkv, 16) &&
                    (fp8 ? aligned(p.planes.k_fp8, 8) && aligned(p.planes.v_fp8, 8)
                         : aligned(p.planes.k_cache, 16) && aligned(p.planes.v_cache, 16));
  if (fp8) {
    return wide ? launch_kernel(rope_store_kv_kernel<fp8e4m3, 4>, grid, block, smem, stream, pdl, p)
                : launch_kernel(rope_store_kv_kernel<fp8e4m3, 1>, grid, block, smem, stream, pdl, p);
  }
  return wide ? launch_kernel(rope_store_kv_kernel<bf16, 4>, grid, block, smem, stream, pdl, p)
              : launch_kernel(rope_store_kv_kernel<bf16, 1>, grid, block, smem, stream, pdl, p);
}

}  // namespace tern::cuda
