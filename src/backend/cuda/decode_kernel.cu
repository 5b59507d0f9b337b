// All decoder layers of a one-token step in one launch (kernels.h,
// decode_layers). At batch 1 each layer of the GEMV path is 5 kernels that
// each stream a few MB of weights, and most of their time is the launch,
// the first loads' round trip and the tail, not the bytes. Here one block
// per multiprocessor stays resident for the whole step; the layer's phases
// are separated by grid-wide barriers, and every block owns a fixed slice
// of each weight matrix, which the copy engine brings into shared memory
// (cp.async.bulk on sm_90, cp.async before) ahead of use, so the weights
// stream in the background and a phase waits only for the barrier and its
// activations. gate|up and down have a slot each, refilled with layer
// l + 1's slice right after layer l's was used (a whole layer ahead); q|k|v
// and o share one slot (the four do not fit in 227 KiB at ERNIE-0.3B's
// shapes on 132 multiprocessors): o loads during attention, the next
// layer's q|k|v during the MLP.
//
// Phases of layer l (every block, the rows its slices name):
//   A  RMSNorm of the residual row (each block, redundantly) -> q|k|v rows,
//      RoPE, q to qkv_out, k and v to the token's KV slot;
//   B  attention: block (kv head, split) scores its keys of the context for
//      the kv head's q heads and writes an unnormalized partial;
//   C  each block merges the partials of all heads (redundantly) -> its o
//      rows (two warps a row when they are few), added to the residual;
//   D  RMSNorm -> its gate and up rows (the same units i of both), SiLU(g) * u;
//   E  its down rows of the SiLU products, added to the residual.
// Loads of data written during the launch are issued all at once, with
// offsets worked out once, as 16-byte loads where the layout allows: the
// kernel is latency- and issue-bound, not bandwidth-bound (tests/gpu/NOTES.md).
// The dot products (in the same order), RoPE and roundings are the GEMV
// path's (gemv.cu); the RMSNorm's sum of squares is taken over the block,
// and attention is an online softmax on the tensor cores for head_dim 64
// and 128 (attend_mma; a CUDA-core one like paged_attention_kernel for
// other shapes) with its own split of the keys, so results agree with the
// GEMV path within bf16 noise, not bit for bit.
#include <algorithm>
#include <cfloat>
#include <climits>

#include "backend/cuda/device_utils.cuh"

namespace tern::cuda {
namespace {

constexpr int kThreads = kDecodeLayersThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kKeyTile = 32;

// 8 weights against 8 inputs, both bf16, in dot8's order.
__device__ __forceinline__ float dot8_bf16(const uint4 w, const uint4 x, float acc) {
  acc = fmaf(lo_bf16(w.x), lo_bf16(x.x), acc);
  acc = fmaf(hi_bf16(w.x), hi_bf16(x.x), acc);
  acc = fmaf(lo_bf16(w.y), lo_bf16(x.y), acc);
  acc = fmaf(hi_bf16(w.y), hi_bf16(x.y), acc);
  acc = fmaf(lo_bf16(w.z), lo_bf16(x.z), acc);
  acc = fmaf(hi_bf16(w.z), hi_bf16(x.z), acc);
  acc = fmaf(lo_bf16(w.w), lo_bf16(x.w), acc);
  acc = fmaf(hi_bf16(w.w), hi_bf16(x.w), acc);
  return acc;
}

// One row (K bf16 in shared memory) against the input xs (K bf16 in shared
// memory: the GEMV path's inputs are bf16-rounded, so the values are the
// same), summed over the warp; lane covers k = lane * 8 + 256 u, in order,
// as gemv_kernel's lanes do.
__device__ __forceinline__ float row_dot(const bf16* w, const bf16* xs, int K, int lane) {
  float acc = 0.0f;
  for (int k = lane * 8; k < K; k += 256) {
    acc = dot8_bf16(*reinterpret_cast<const uint4*>(w + k), *reinterpret_cast<const uint4*>(xs + k), acc);
  }
  return warp_sum(acc);
}

// Weights reach shared memory through the copy engine on sm_90
// (TERN_BULK_WEIGHTS, fill_slot below), through cp.async before.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TERN_BULK_WEIGHTS 1
#endif

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

#ifndef TERN_BULK_WEIGHTS
__device__ __forceinline__ void copy_async16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(smem)), "l"(gmem) : "memory");
}
__device__ __forceinline__ void commit_async() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most N of this thread's copy groups are pending. Groups go
// out in the order q|k|v(0), gate|up(0), down(0), then per layer l: o(l),
// q|k|v(l + 1), gate|up(l + 1), down(l + 1) (empty groups past the last
// layer), so before phase A the slice needed has 2 newer groups, before C
// none, before D and E 3.
template <int N>
__device__ __forceinline__ void wait_async() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Copies elems bf16 (a multiple of 8, 16-byte aligned) into shared memory; no commit.
__device__ __forceinline__ void load_async(bf16* dst, const bf16* src, int64_t elems) {
  for (int64_t i = threadIdx.x; i < elems / 8; i += kThreads) copy_async16(dst + i * 8, src + i * 8);
}
#endif

// Every block arrives, then waits for all: the writes before it, by any
// block, are visible to the reads after it (reads of data written during
// the launch go through L2: __ldcg, never L1, which is not coherent).
// Before sm_90 `between` runs just before the block arrives (every thread
// issues its cp.async copies there; the release then waits for them).
template <typename F>
__device__ __forceinline__ void grid_barrier(unsigned int* counter, unsigned int& target, F&& between) {
  target += gridDim.x;
  __syncthreads();
#ifndef TERN_BULK_WEIGHTS
  between();
#else
  (void)between;
#endif
  if (threadIdx.x == 0) {
    // The release orders the block's writes (made before the __syncthreads) before the arrival.
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
    unsigned int seen = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
    } while (seen < target);
  }
  __syncthreads();
}

// Block b's share [begin, end) of `units` units.
struct Range {
  int begin = 0, end = 0;
};
__device__ __forceinline__ Range share_of(int units) {  // units * grid < 2^31
  const int b = static_cast<int>(blockIdx.x), g = static_cast<int>(gridDim.x);
  return Range{b * units / g, (b + 1) * units / g};
}

// xs[k] = bf16(x[k] / sqrt(mean(x^2) + eps) * w[k]), as gemv's kRmsNorm
// input but summed over the block: every thread loads its part of the row
// at once (one round trip to L2), so the sum's order is not the GEMV's.
// K <= 4 * kThreads * kNormLoads.
constexpr int kNormLoads = 2;
// Loads per thread of the SiLU products (inter <= 2 * kThreads * kActLoads),
// the merge's outputs per thread (q_dim <= kThreads * kMergeOutputs, 4
// consecutive dims in one 16-byte load) and splits loaded at once.
constexpr int kActLoads = 4;
constexpr int kMergeOutputs = 4;
constexpr int kMergeSplits = 8;
constexpr int kMaxRopePairs = 32;  // q|k|v row pairs per block
__device__ __forceinline__ void rmsnorm_input(const float* x, const float* w, int K, float eps, bf16* xs,
                                              float* red) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float4* xr = reinterpret_cast<const float4*>(x);
  const float4* wt = reinterpret_cast<const float4*>(w);
  float4 v[kNormLoads], g[kNormLoads];
  float sum_sq = 0.0f;
#pragma unroll
  for (int u = 0; u < kNormLoads; ++u) {  // the row and the norm weights in one round trip
    const int j = threadIdx.x + u * kThreads;
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    v[u] = j < K / 4 ? __ldcg(xr + j) : zero;
    g[u] = j < K / 4 ? wt[j] : zero;
  }
#pragma unroll
  for (int u = 0; u < kNormLoads; ++u) {
    sum_sq += v[u].x * v[u].x + v[u].y * v[u].y + v[u].z * v[u].z + v[u].w * v[u].w;
  }
  sum_sq = warp_sum(sum_sq);
  if (lane == 0) red[warp] = sum_sq;
  __syncthreads();
  float total = lane < kWarps ? red[lane] : 0.0f;
  total = warp_sum(total);
  const float scale = 1.0f / sqrtf(total / static_cast<float>(K) + eps);
#pragma unroll
  for (int u = 0; u < kNormLoads; ++u) {
    const int j = threadIdx.x + u * kThreads;
    if (j < K / 4) {
      __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(xs + 4 * j);
      out[0] = __floats2bfloat162_rn(v[u].x * scale * g[u].x, v[u].y * scale * g[u].y);
      out[1] = __floats2bfloat162_rn(v[u].z * scale * g[u].z, v[u].w * scale * g[u].w);
    }
  }
}

struct Smem {
  bf16 *w_qkv, *w_o, *w_gu, *w_down;  // w_qkv == w_o: one slot
  bf16* xs;  // the phase's input row; attention's tiles (fp32) share its space
};

__host__ __device__ __forceinline__ int64_t shared_slot_elems(const DecodeLayersParams& p) {
  const int64_t qkv = static_cast<int64_t>(p.cap_qkv_pairs) * 2 * p.hidden;
  const int64_t o = static_cast<int64_t>(p.cap_o_rows) * p.q_dim;
  return qkv > o ? qkv : o;
}

__device__ __forceinline__ Smem carve(const DecodeLayersParams& p, unsigned char* base) {
  Smem s;
  s.w_qkv = s.w_o = reinterpret_cast<bf16*>(base);
  s.w_gu = s.w_qkv + shared_slot_elems(p);
  s.w_down = s.w_gu + static_cast<int64_t>(p.cap_gu_units) * 2 * p.hidden;
  s.xs = s.w_down + static_cast<int64_t>(p.cap_down_rows) * p.inter;
  return s;
}

// A weight slot is filled by one or two pieces of consecutive rows. On
// sm_90 one thread hands each piece to the copy engine (cp.async.bulk) and
// an mbarrier per slot counts its bytes in, so the block's warps issue no
// loads for weights at all; the slot's n-th fill is waited for with parity
// n & 1. Before sm_90 every thread issues 16-byte cp.async copies, one
// commit group per fill (empty past the last layer), waited for by count
// (wait_async above).
constexpr int kSlotQkvO = 0, kSlotGu = 1, kSlotDown = 2;
// When the copies go out. A grid barrier's release waits for every memory
// operation its block has in flight, bulk copies included, and a phase's
// first loads wait behind whatever bytes were issued just before them. So
// on sm_90 each copy is issued inside a phase, just after that phase's own
// first loads, sized to land before the phase ends: layer l's down slice in
// A(l) after the norm's loads, its o slice and the up half of its gate|up
// slice in B(l) after the attention's loads, layer l + 1's q|k|v in D(l)
// after the norm's loads and the gate half of its gate|up in E(l) after the
// activations' loads. Before sm_90 (cp.async, waited for by count) every
// fill goes out whole just before a barrier: o(l) before A's, q|k|v(l + 1)
// before C's, gate|up(l + 1) before D's, down(l + 1) before E's.
#ifdef TERN_BULK_WEIGHTS
constexpr bool kCopiesInPhases = true;
#else
constexpr bool kCopiesInPhases = false;
#endif
struct Slots {
  uint64_t* bars;      // [3] mbarriers (sm_90)
  unsigned waited[3];  // fills waited for, per slot
};

// A fill of one or two pieces; on sm_90 the pieces may go out at different
// times: kFirst arrives with the whole fill's byte count and copies piece
// 0, kSecond then copies piece 1 (the slot's wait ends when both are in).
// Before sm_90 kFirst issues both pieces and kSecond nothing.
enum class Pieces { kBoth, kFirst, kSecond };

template <Pieces kWhich = Pieces::kBoth>
__device__ __forceinline__ void fill_slot(Slots& sl, int slot, bf16* dst0, const bf16* src0, int64_t n0, bf16* dst1,
                                          const bf16* src1, int64_t n1) {
#ifdef TERN_BULK_WEIGHTS
  if (threadIdx.x == 0) {
    const unsigned bar = smem_addr(sl.bars + slot);
    const auto bytes0 = static_cast<unsigned>(n0 * 2), bytes1 = static_cast<unsigned>(n1 * 2);
    // The slot's last reads (generic proxy, ordered before by a __syncthreads) before the copy's writes.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    if (kWhich != Pieces::kSecond) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes0 + bytes1)
                   : "memory");
    }
    if (bytes0 > 0 && kWhich != Pieces::kSecond) {
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       smem_addr(dst0)),
                   "l"(src0), "r"(bytes0), "r"(bar)
                   : "memory");
    }
    if (bytes1 > 0 && kWhich != Pieces::kFirst) {
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       smem_addr(dst1)),
                   "l"(src1), "r"(bytes1), "r"(bar)
                   : "memory");
    }
  }
#else
  (void)sl;
  (void)slot;
  if (kWhich == Pieces::kSecond) return;
  load_async(dst0, src0, n0);
  load_async(dst1, src1, n1);
  commit_async();
#endif
}

// Past the last layer: nothing to load (an empty commit group keeps the cp.async counts).
__device__ __forceinline__ void skip_fill() {
#ifndef TERN_BULK_WEIGHTS
  commit_async();
#endif
}

// Waits for the slot's next fill; `pending` is the cp.async form's count
// of newer groups allowed (wait_async). The caller's __syncthreads follows.
template <int Pending>
__device__ __forceinline__ void wait_slot(Slots& sl, int slot) {
#ifdef TERN_BULK_WEIGHTS
  const unsigned bar = smem_addr(sl.bars + slot), parity = sl.waited[slot] & 1u;
  unsigned done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (done == 0);
  ++sl.waited[slot];
#else
  (void)sl;
  (void)slot;
  wait_async<Pending>();
#endif
}

__device__ __forceinline__ void init_slots(Slots& sl) {
  sl.waited[0] = sl.waited[1] = sl.waited[2] = 0;
#ifdef TERN_BULK_WEIGHTS
  if (threadIdx.x == 0) {
    for (int i = 0; i < 3; ++i) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(sl.bars + i)) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
#endif
  __syncthreads();
}

// Issues the copies of layer l's slices, in phase order.
__device__ __forceinline__ void load_qkv(const DecodeLayersParams& p, const Smem& s, Slots& sl, int l) {
  if (l >= p.num_layers) return skip_fill();
  const Range r = share_of(p.qkv_dim / 2);
  fill_slot(sl, kSlotQkvO, s.w_qkv, p.layers[l].qkv + static_cast<int64_t>(2 * r.begin) * p.hidden,
            static_cast<int64_t>(2 * (r.end - r.begin)) * p.hidden, nullptr, nullptr, 0);
}
__device__ __forceinline__ void load_o(const DecodeLayersParams& p, const Smem& s, Slots& sl, int l) {
  const Range r = share_of(p.hidden);
  fill_slot(sl, kSlotQkvO, s.w_o, p.layers[l].o + static_cast<int64_t>(r.begin) * p.q_dim,
            static_cast<int64_t>(r.end - r.begin) * p.q_dim, nullptr, nullptr, 0);
}
template <Pieces kWhich = Pieces::kBoth>  // gate rows, then up rows
__device__ __forceinline__ void load_gu(const DecodeLayersParams& p, const Smem& s, Slots& sl, int l) {
  if (l >= p.num_layers) {
    if (kWhich != Pieces::kSecond) skip_fill();
    return;
  }
  const Range r = share_of(p.inter);
  const int64_t n = static_cast<int64_t>(r.end - r.begin) * p.hidden;
  const bf16* w = p.layers[l].gate_up;
  fill_slot<kWhich>(sl, kSlotGu, s.w_gu, w + static_cast<int64_t>(r.begin) * p.hidden, n,  // gate rows
                    s.w_gu + n, w + static_cast<int64_t>(p.inter + r.begin) * p.hidden, n);  // up rows
}
__device__ __forceinline__ void load_down(const DecodeLayersParams& p, const Smem& s, Slots& sl, int l) {
  if (l >= p.num_layers) return skip_fill();
  const Range r = share_of(p.hidden);
  fill_slot(sl, kSlotDown, s.w_down, p.layers[l].down + static_cast<int64_t>(r.begin) * p.inter,
            static_cast<int64_t>(r.end - r.begin) * p.inter, nullptr, nullptr, 0);
}

// The first kSlotKeys keys of a block's split have their KV slots worked
// out once per step (the block table does not change within it), so a key
// tile's K/V loads need no table lookup first.
constexpr int kSlotKeys = 4 * kKeyTile;
// 16-byte loads per thread: a key tile's K (and V); the q heads of one kv head.
constexpr int kKvLoads = kKeyTile * kMaxAttentionHeadDim / 8 / kThreads;
constexpr int kQLoads = (kWarps * kMaxAttentionHeadDim / 8 + kThreads - 1) / kThreads;

// Every block's clocks at mark `at` (p.timeline: [grid][marks] ns, then
// [grid][marks] SM cycles).
__device__ __forceinline__ void timeline_mark(const DecodeLayersParams& p, int at) {
  if (p.timeline != nullptr && threadIdx.x == 0) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    const int64_t marks = 1 + static_cast<int64_t>(p.num_layers) * kDecodeLayersMarks;
    const int64_t at_block = static_cast<int64_t>(blockIdx.x) * marks + at;
    p.timeline[at_block] = now;
    p.timeline[static_cast<int64_t>(gridDim.x) * marks + at_block] = clock64();
  }
}

// Phase B for block (kvh, split): keys [begin, end) of the context, the
// kv head's `group` q heads (warp w: head kvh * group + w). Every load of a
// tile (and, with the first, of q) is issued before any is used: one round
// trip per tile.
template <typename F>
__device__ void attend_split(const DecodeLayersParams& p, const Smem& s, int l, int kvh, int split, int begin,
                             int end, const int32_t* table, const int* key_slots, int mark_at, F&& after_loads) {
  const int hd = p.head_dim, group = p.num_heads / p.num_kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t kv_dim = static_cast<int64_t>(p.num_kv_heads) * hd;
  float* q_s = reinterpret_cast<float*>(s.xs);  // [group][hd], scaled by 1/sqrt(hd)
  float* k_s = q_s + group * hd;         // [kKeyTile][hd + 1]
  float* v_s = k_s + kKeyTile * (hd + 1);  // [kKeyTile][hd]
  float* p_s = v_s + kKeyTile * hd;        // [group][kKeyTile]
  // K, V and q in 16-byte pieces of 8 dims (head_dim % 8 == 0).
  const uint4* k_plane = reinterpret_cast<const uint4*>(p.kv + (static_cast<int64_t>(l) * 2) * p.plane_elems);
  const uint4* v_plane = k_plane + p.plane_elems / 8;
  const uint4* q = reinterpret_cast<const uint4*>(p.qkv_out + static_cast<int64_t>(kvh) * group * hd);
  const float scale = rsqrtf(static_cast<float>(hd));
  const int pieces = hd / 8;                        // per key row
  const bool pow2 = (pieces & (pieces - 1)) == 0;  // then / pieces is a shift
  const int shift = __ffs(pieces) - 1, head_off = kvh * pieces;
  const int64_t row_pieces = kv_dim / 8;

  float m = -FLT_MAX, sum = 0.0f;
  float acc[kMaxAttentionHeadDim / 32];
#pragma unroll
  for (int i = 0; i < kMaxAttentionHeadDim / 32; ++i) acc[i] = 0.0f;

  for (int tile = begin; tile < end; tile += kKeyTile) {
    const int n = min(kKeyTile, end - tile);
    uint4 qu[kQLoads], ku[kKvLoads], vu[kKvLoads];
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    if (tile == begin) {
#pragma unroll
      for (int u = 0; u < kQLoads; ++u) {
        const int i = threadIdx.x + u * kThreads;
        qu[u] = i < group * pieces ? __ldcg(q + i) : zero;
      }
    }
#pragma unroll
    for (int u = 0; u < kKvLoads; ++u) {
      const int i = threadIdx.x + u * kThreads;
      ku[u] = vu[u] = zero;
      if (i < n * pieces) {
        const int j = pow2 ? i >> shift : i / pieces, c = i - j * pieces;
        const int key = tile + j, idx = key - begin;
        const int64_t slot = idx < kSlotKeys ? key_slots[idx]
                                             : static_cast<int64_t>(table[key / p.block_size]) * p.block_size +
                                                   key % p.block_size;
        const int64_t at = slot * row_pieces + head_off + c;
        ku[u] = __ldcg(k_plane + at);
        vu[u] = __ldcg(v_plane + at);
      }
    }
    if (tile == begin) after_loads();
    __syncthreads();  // the previous tile is consumed
    if (tile == begin) {
#pragma unroll
      for (int u = 0; u < kQLoads; ++u) {
        const int i = threadIdx.x + u * kThreads;
        if (i < group * pieces) {
          const uint32_t w[4] = {qu[u].x, qu[u].y, qu[u].z, qu[u].w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            q_s[8 * i + 2 * e] = lo_bf16(w[e]) * scale;
            q_s[8 * i + 2 * e + 1] = hi_bf16(w[e]) * scale;
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kKvLoads; ++u) {
      const int i = threadIdx.x + u * kThreads;
      if (i < n * pieces) {
        const int j = pow2 ? i >> shift : i / pieces, d = 8 * (i - j * pieces);
        const uint32_t kw[4] = {ku[u].x, ku[u].y, ku[u].z, ku[u].w}, vw[4] = {vu[u].x, vu[u].y, vu[u].z, vu[u].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          k_s[j * (hd + 1) + d + 2 * e] = lo_bf16(kw[e]);
          k_s[j * (hd + 1) + d + 2 * e + 1] = hi_bf16(kw[e]);
        }
        reinterpret_cast<float4*>(v_s + j * hd + d)[0] =
            make_float4(lo_bf16(vw[0]), hi_bf16(vw[0]), lo_bf16(vw[1]), hi_bf16(vw[1]));
        reinterpret_cast<float4*>(v_s + j * hd + d)[1] =
            make_float4(lo_bf16(vw[2]), hi_bf16(vw[2]), lo_bf16(vw[3]), hi_bf16(vw[3]));
      }
    }
    __syncthreads();
    if (tile == begin) timeline_mark(p, mark_at);  // the first tile is in
    if (warp < group) {
      float score = -FLT_MAX;
      if (lane < n) {
        const float* qh = q_s + warp * hd;
        const float* kr = k_s + lane * (hd + 1);
        float s0 = 0.0f, s1 = 0.0f;
        for (int d = 0; d < hd; d += 2) {
          s0 = fmaf(qh[d], kr[d], s0);
          s1 = fmaf(qh[d + 1], kr[d + 1], s1);
        }
        score = s0 + s1;
      }
      const float m_new = fmaxf(m, warp_max(score));
      const float correction = __expf(m - m_new);
      const float prob = lane < n ? __expf(score - m_new) : 0.0f;
      sum = sum * correction + warp_sum(prob);
      m = m_new;
      p_s[warp * kKeyTile + lane] = prob;
      __syncwarp();
#pragma unroll
      for (int i = 0; i < kMaxAttentionHeadDim / 32; ++i) {
        const int d = lane + 32 * i;
        if (d < hd) {
          float a = acc[i] * correction;
          for (int j = 0; j < n; ++j) a = fmaf(p_s[warp * kKeyTile + j], v_s[j * hd + d], a);
          acc[i] = a;
        }
      }
      __syncwarp();
    }
  }
  if (warp < group) {
    const int h = kvh * group + warp;
    const int64_t row = static_cast<int64_t>(h) * kMaxDecodeLayersSplits + split;
#pragma unroll
    for (int i = 0; i < kMaxAttentionHeadDim / 32; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) p.partial_out[row * hd + d] = acc[i];
    }
    if (lane == 0) {
      p.partial_ml[2 * row] = m;
      p.partial_ml[2 * row + 1] = sum;
    }
  }
}

// Phase B on the tensor cores, for head_dim HD of 64 or 128 and at most 8
// q heads per kv head. Each warp takes 8-key chunks (warp w: chunks w,
// w + kWarps, ...). S = q K^T is an m16n8k16 MMA with the q heads as rows
// (g, g + 8) and the 8 keys as columns: each lane loads 16 contiguous bytes
// of its key's K straight into the B fragment, and q's A fragment takes the
// same permutation of dims (as mma_attention_kernel, attention.cu). Then
// O^T = V^T P^T with dims as rows and heads as columns: P's accumulator is
// already the B fragment (keys 2c, 2c + 1 of head g; keys 8-15 are zero),
// and V^T's A fragment pairs two keys of one dim with a byte permute, so 8
// heads need 4 MMAs per 64 dims and 32 accumulators per lane. The warps
// merge in two steps through shared memory (8 into 8, then 8 into one) and
// the split's partial is written in natural-log units as attend_split's.
constexpr int kChunkKeys = 8;
constexpr int kMmaSplitKeys = kWarps * kChunkKeys;  // a split's keys in one pass of the warps
constexpr int kMmaMaxGroup = 8;
static_assert(kMmaSplitKeys <= kSlotKeys, "the first pass's KV slots are worked out once");
static_assert(kWarps == 16, "the merge takes 16 warps in two steps");

// float4s per lane of one warp's state: o's, then the columns' (m, m, l, l).
__host__ __device__ constexpr int attend_mma_frags(int hd) { return hd / 64 * 4 + 1; }

template <int HD, typename F>
__device__ void attend_mma(const DecodeLayersParams& p, const Smem& s, int l, int kvh, int split, int begin,
                           int end, const int32_t* table, const int* key_slots, int mark_at, F&& after_loads) {
  constexpr int kPairs = HD / 32;   // 32-dim steps of S (two MMAs each)
  constexpr int kHalves = HD / 64;  // 64-dim steps of O^T (four MMAs each)
  constexpr int kFrags = attend_mma_frags(HD);
  const int group = p.num_heads / p.num_kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int64_t kv_dim = static_cast<int64_t>(p.num_kv_heads) * HD;
  const bf16* k_base = p.kv + (static_cast<int64_t>(l) * 2) * p.plane_elems + static_cast<int64_t>(kvh) * HD;
  const bf16* v_base = k_base + p.plane_elems;
  auto row_of = [&](int key) {  // the key's offset in the K/V planes
    const int idx = key - begin;
    const int64_t slot = idx < kSlotKeys ? key_slots[idx]
                                         : static_cast<int64_t>(table[key / p.block_size]) * p.block_size +
                                               key % p.block_size;
    return slot * kv_dim;
  };

  // q rows g and g + 8 (heads kvh * group + row), dims 32 j + 8 c .. + 7;
  // written this launch, so read through L2. Rows past the group are zero.
  uint4 qa[kPairs];
  {
    const bf16* q = p.qkv_out + static_cast<int64_t>(kvh) * group * HD;
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      qa[j] = g < group ? __ldcg(reinterpret_cast<const uint4*>(q + g * HD + 32 * j + 8 * c))
                        : make_uint4(0u, 0u, 0u, 0u);
    }
  }
  const float scale = rsqrtf(static_cast<float>(HD)) * 1.44269504088896340736f;  // log2(e) / sqrt(hd)
  float m = -FLT_MAX, sum = 0.0f;  // head g's (log2 units)
  // o[h][jj]: rows g and g + 8 are dims 64 h + 8 g + 2 jj and + 1; columns 2c and 2c + 1 heads.
  float o[kHalves][4][4];
#pragma unroll
  for (int h = 0; h < kHalves; ++h) {
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) o[h][jj][0] = o[h][jj][1] = o[h][jj][2] = o[h][jj][3] = 0.0f;
  }
  for (int base = begin + warp * kChunkKeys; base < end; base += kWarps * kChunkKeys) {
    const int last = end - 1;  // keys past the end read the last key and are masked below
    uint4 kr[kPairs];          // key base + g, dims 32 j + 8 c .. + 7
    {
      const int64_t off = row_of(min(base + g, last));
#pragma unroll
      for (int j = 0; j < kPairs; ++j) kr[j] = __ldcg(reinterpret_cast<const uint4*>(k_base + off + 32 * j + 8 * c));
    }
    uint4 vr[2][kHalves];  // keys base + 2c, + 1; dims 64 h + 8 g .. + 7
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int64_t off = row_of(min(base + 2 * c + i, last));
#pragma unroll
      for (int h = 0; h < kHalves; ++h) vr[i][h] = __ldcg(reinterpret_cast<const uint4*>(v_base + off + 64 * h + 8 * g));
    }
    if (base == begin) after_loads();  // warp 0's first chunk is on its way
    // sc: keys base + 2c, + 1 of rows g (0, 1) and g + 8 (2, 3; unused).
    float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      mma_bf16(sc, qa[j].x, 0u, qa[j].y, 0u, kr[j].x, kr[j].y);
      mma_bf16(sc, qa[j].z, 0u, qa[j].w, 0u, kr[j].z, kr[j].w);
    }
    float row_max = -FLT_MAX;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      sc[i] = base + 2 * c + i < end ? sc[i] * scale : -INFINITY;
      row_max = fmaxf(row_max, sc[i]);
    }
    row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));
    row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 2));
    const float m_new = fmaxf(m, row_max);
    const float corr = exp2f(m - m_new);
    m = m_new;
    const float p0 = exp2f(sc[0] - m), p1 = exp2f(sc[1] - m);
    sum = sum * corr + p0 + p1;
    const __nv_bfloat162 pp = __floats2bfloat162_rn(p0, p1);
    const uint32_t pb = *reinterpret_cast<const uint32_t*>(&pp);  // B: keys 2c, 2c + 1 of head g
    // The columns' corrections: heads 2c and 2c + 1 are rows of lanes 8c and 8c + 4.
    const float c0 = __shfl_sync(0xffffffffu, corr, 8 * c), c1 = __shfl_sync(0xffffffffu, corr, 8 * c + 4);
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        o[h][jj][0] *= c0;
        o[h][jj][1] *= c1;
        o[h][jj][2] *= c0;
        o[h][jj][3] *= c1;
        const uint32_t a0 = __byte_perm(word(vr[0][h], jj), word(vr[1][h], jj), 0x5410u);  // dim 2jj
        const uint32_t a1 = __byte_perm(word(vr[0][h], jj), word(vr[1][h], jj), 0x7632u);  // dim 2jj + 1
        mma_bf16(o[h][jj], a0, a1, 0u, 0u, pb, 0u);
      }
    }
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  // The columns' state: heads 2c and 2c + 1.
  float4 ml = make_float4(__shfl_sync(0xffffffffu, m, 8 * c), __shfl_sync(0xffffffffu, m, 8 * c + 4),
                          __shfl_sync(0xffffffffu, sum, 8 * c), __shfl_sync(0xffffffffu, sum, 8 * c + 4));
  timeline_mark(p, mark_at);  // warp 0's chunks are done

  // Warps 8-15 into 0-7, lane for lane (the same dims and heads), then 0-7 into one.
  float4* frag = reinterpret_cast<float4*>(s.xs);  // [8 warps][kFrags][32 lanes]
  auto store_state = [&](int slot) {  // this lane's o and (m, m, l, l) into the slot's lane
    float4* mine = frag + slot * kFrags * 32 + lane;
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        mine[(h * 4 + jj) * 32] = make_float4(o[h][jj][0], o[h][jj][1], o[h][jj][2], o[h][jj][3]);
      }
    }
    mine[(kFrags - 1) * 32] = ml;
  };
  if (warp >= 8) store_state(warp - 8);
  __syncthreads();
  if (warp < 8) {
    const float4* other = frag + warp * kFrags * 32 + lane;
    const float4 mo = other[(kFrags - 1) * 32];
    const float mx0 = fmaxf(ml.x, mo.x), mx1 = fmaxf(ml.y, mo.y);
    const float a0 = exp2f(ml.x - mx0), b0 = exp2f(mo.x - mx0), a1 = exp2f(ml.y - mx1), b1 = exp2f(mo.y - mx1);
    ml = make_float4(mx0, mx1, ml.z * a0 + mo.z * b0, ml.w * a1 + mo.w * b1);
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const float4 v = other[(h * 4 + jj) * 32];
        o[h][jj][0] = o[h][jj][0] * a0 + v.x * b0;
        o[h][jj][1] = o[h][jj][1] * a1 + v.y * b1;
        o[h][jj][2] = o[h][jj][2] * a0 + v.z * b0;
        o[h][jj][3] = o[h][jj][3] * a1 + v.w * b1;
      }
    }
  }
  __syncthreads();
  if (warp < 8) store_state(warp);
  __syncthreads();
  constexpr float kLn2 = 0.69314718055994530942f;
  for (int t = threadIdx.x; t < (kFrags - 1) * 32; t += kThreads) {
    const int ln = t & 31, f = t >> 5;  // the lane and o float4 merged here
    const int lg = ln >> 2, lc = ln & 3;
    float mx0 = -FLT_MAX, mx1 = -FLT_MAX;
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      const float4 mw = frag[(w * kFrags + kFrags - 1) * 32 + ln];
      mx0 = fmaxf(mx0, mw.x);
      mx1 = fmaxf(mx1, mw.y);
    }
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float l0 = 0.0f, l1 = 0.0f;
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      const float4 mw = frag[(w * kFrags + kFrags - 1) * 32 + ln];
      const float4 v = frag[(w * kFrags + f) * 32 + ln];
      const float w0 = exp2f(mw.x - mx0), w1 = exp2f(mw.y - mx1);
      l0 += mw.z * w0;
      l1 += mw.w * w1;
      acc.x += v.x * w0;
      acc.y += v.y * w1;
      acc.z += v.z * w0;
      acc.w += v.w * w1;
    }
    const int d = 64 * (f >> 2) + 8 * lg + 2 * (f & 3);  // rows lg and lg + 8: dims d and d + 1
    const int h0 = 2 * lc, h1 = 2 * lc + 1;
    const int64_t r0 = static_cast<int64_t>(kvh * group + h0) * kMaxDecodeLayersSplits + split;
    const int64_t r1 = static_cast<int64_t>(kvh * group + h1) * kMaxDecodeLayersSplits + split;
    if (h0 < group) {
      p.partial_out[r0 * HD + d] = acc.x;
      p.partial_out[r0 * HD + d + 1] = acc.z;
      if (f == 0 && lg == 0) {
        p.partial_ml[2 * r0] = mx0 * kLn2;  // natural-log units, as the merge reads them
        p.partial_ml[2 * r0 + 1] = l0;
      }
    }
    if (h1 < group) {
      p.partial_out[r1 * HD + d] = acc.y;
      p.partial_out[r1 * HD + d + 1] = acc.w;
      if (f == 0 && lg == 0) {
        p.partial_ml[2 * r1] = mx1 * kLn2;
        p.partial_ml[2 * r1 + 1] = l1;
      }
    }
  }
}

// x[n] += row n of the slot (rows r, K bf16 each) . xs. With at most half
// as many rows as warps (o and down at ERNIE-0.3B's shapes: 8 rows), two
// warps share a row, one half of K each, summed through red (kWarps floats).
__device__ __forceinline__ void rows_add(const bf16* slot, Range r, int K, const bf16* xs, float* x, float* red) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rows = r.end - r.begin;
  if (2 * rows <= kWarps && K % 16 == 0) {
    const int row = warp >> 1, half = warp & 1, hk = K / 2;
    const bool mine = row < rows;
    const float old = mine && half == 0 ? __ldcg(x + r.begin + row) : 0.0f;
    // Every warp takes part in its dot's shuffles (rows beyond the block's read slot row 0 and are dropped).
    const float v = row_dot(slot + static_cast<int64_t>(mine ? row : 0) * K + half * hk, xs + half * hk, hk, lane);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (mine && half == 0 && lane == 0) x[r.begin + row] = old + red[warp] + red[warp + 1];
    return;
  }
  for (int n = r.begin + warp; n < r.end; n += kWarps) {
    const float old = __ldcg(x + n);
    const float v = row_dot(slot + static_cast<int64_t>(n - r.begin) * K, xs, K, lane);
    if (lane == 0) x[n] = old + v;
  }
}

__global__ void __launch_bounds__(kThreads, 1) decode_layers_kernel(DecodeLayersParams p) {
  extern __shared__ float4 smem_raw[];
  const Smem s = carve(p, reinterpret_cast<unsigned char*>(smem_raw));
  __shared__ float red[kWarps];
  __shared__ float merge_w[kMaxDecodeLayersHeads * kMaxDecodeLayersSplits];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int H = p.hidden, Q = p.q_dim, I = p.inter, hd = p.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(p.num_kv_heads) * hd;
  unsigned int target = 0;
  int mark_at = 0;
  auto mark = [&]() {  // the block's clock at each phase boundary (p.timeline)
    timeline_mark(p, mark_at);
    ++mark_at;
  };
  mark();

  // The step's token: its position, KV slot and block table.
  const int pos = p.positions[0];
  const int64_t slot = p.slots[0];
  const int32_t* table = p.block_tables + p.table_offsets[p.token_seq[0]];
  const int ctx = pos + 1;
  // Splits of the context per kv head: one pass of the attention each (a
  // key tile, or kMmaSplitKeys on the tensor cores), at most
  // kMaxDecodeLayersSplits and no more blocks than the grid has. Rounding
  // the keys per split up can leave the last splits empty; they are dropped,
  // so every split has keys (phase B's copies go out after its first loads).
  const bool mma = (hd == 64 || hd == 128) && p.num_heads / p.num_kv_heads <= kMmaMaxGroup;
  const int pass = mma ? kMmaSplitKeys : kKeyTile, unit = mma ? kChunkKeys : kKeyTile;
  int splits = (ctx + pass - 1) / pass;
  splits = min(splits, min(kMaxDecodeLayersSplits, static_cast<int>(gridDim.x) / p.num_kv_heads));
  splits = max(splits, 1);
  const int per = ((ctx + splits - 1) / splits + unit - 1) / unit * unit;
  splits = (ctx + per - 1) / per;
  const bool attends = static_cast<int>(blockIdx.x) < p.num_kv_heads * splits;
  const int kvh = static_cast<int>(blockIdx.x) / splits, split = static_cast<int>(blockIdx.x) % splits;
  const int key_begin = split * per, key_end = min(ctx, key_begin + per);
  __shared__ int key_slots[kSlotKeys];
  if (attends) {
    for (int j = threadIdx.x; j < kSlotKeys && key_begin + j < key_end; j += kThreads) {
      const int key = key_begin + j;
      key_slots[j] = table[key / p.block_size] * p.block_size + key % p.block_size;
    }
  }  // read after the first grid barrier's __syncthreads

  // RoPE's cos and sin of this block's q|k pairs: the position is the step's, for every layer.
  __shared__ float rope_cos[kMaxRopePairs], rope_sin[kMaxRopePairs];
  {
    const Range r = share_of(p.qkv_dim / 2);
    for (int pair = r.begin + static_cast<int>(threadIdx.x); pair < r.end; pair += kThreads) {
      const int n = 2 * pair;
      if (n < Q + kv_dim) sincosf(p.inv_freq[(n % hd) / 2] * static_cast<float>(pos), &rope_sin[pair - r.begin],
                                  &rope_cos[pair - r.begin]);
    }
  }  // read after init_slots' __syncthreads
  __shared__ alignas(8) uint64_t slot_bars[3];
  Slots sl;
  sl.bars = slot_bars;
  init_slots(sl);
  load_qkv(p, s, sl, 0);
  load_gu(p, s, sl, 0);
  load_down(p, s, sl, 0);

  for (int l = 0; l < p.num_layers; ++l) {
    const DecodeLayerWeights& w = p.layers[l];
    bf16* k_cache = p.kv + (static_cast<int64_t>(l) * 2) * p.plane_elems;
    bf16* v_cache = k_cache + p.plane_elems;

    // A: q|k|v rows in pairs (dims 2i, 2i + 1 of one head), RoPE, the KV write.
    rmsnorm_input(p.x, w.input_norm, H, p.eps, s.xs, red);
    if (kCopiesInPhases && l > 0) load_down(p, s, sl, l);  // layer 0's went out before the loop
    mark();
    wait_slot<2>(sl, kSlotQkvO);
    __syncthreads();
    mark();
    {
      const Range r = share_of(p.qkv_dim / 2);
      for (int pair = r.begin + warp; pair < r.end; pair += kWarps) {
        const bf16* wr = s.w_qkv + static_cast<int64_t>(pair - r.begin) * 2 * H;
        const float a = row_dot(wr, s.xs, H, lane);
        const float b = row_dot(wr + H, s.xs, H, lane);
        if (lane == 0) {
          const int n = 2 * pair;
          if (n >= Q + kv_dim) {  // v
            bf16* out = v_cache + slot * kv_dim + (n - Q - kv_dim);
            store_bf16(out, a);
            store_bf16(out + 1, b);
          } else {
            const float sn = rope_sin[pair - r.begin], cs = rope_cos[pair - r.begin];
            bf16* out = n < Q ? p.qkv_out + n : k_cache + slot * kv_dim + (n - Q);
            store_bf16(out, a * cs - b * sn);
            store_bf16(out + 1, b * cs + a * sn);
          }
        }
      }
    }
    __syncthreads();
    mark();
    grid_barrier(p.barrier, target, [&] {
      if (!kCopiesInPhases) load_o(p, s, sl, l);  // into the q|k|v slot, now used
    });
    mark();

    // B: attention partials.
    const auto b_copies = [&] {
      if (kCopiesInPhases) {
        load_o(p, s, sl, l);  // into the q|k|v slot, now used
        if (l > 0) load_gu<Pieces::kSecond>(p, s, sl, l);  // layer 0's went out whole before the loop
      }
    };
    if (attends) {
      if (mma && hd == 128) {
        attend_mma<128>(p, s, l, kvh, split, key_begin, key_end, table, key_slots, mark_at, b_copies);
      } else if (mma) {
        attend_mma<64>(p, s, l, kvh, split, key_begin, key_end, table, key_slots, mark_at, b_copies);
      } else {
        attend_split(p, s, l, kvh, split, key_begin, key_end, table, key_slots, mark_at, b_copies);
      }
    } else {
      b_copies();
    }
    ++mark_at;
    mark();
    grid_barrier(p.barrier, target, [] {});
    mark();

    // C: merge every head's partials into xs (bf16-rounded), then the o rows.
    // Partials are loaded kMergeSplits splits at a time, every output's at
    // once (the first chunk while the split weights are worked out): one
    // round trip per chunk.
    {
      // Thread t merges outputs 4t .. 4t + 3 (dims of one head: head_dim %
      // 8 == 0), one 16-byte load per split.
      const int i0 = 4 * static_cast<int>(threadIdx.x);
      const bool has = i0 < Q;
      const int mh = i0 / hd;
      const float4* src =
          reinterpret_cast<const float4*>(p.partial_out + mh * kMaxDecodeLayersSplits * hd + (i0 - mh * hd));
      const int step4 = hd / 4;  // float4s from one split to the next
      float4 pv[kMergeSplits];
      auto load_chunk = [&](int sp0) {
#pragma unroll
        for (int u = 0; u < kMergeSplits; ++u) {
          pv[u] = has && sp0 + u < splits ? __ldcg(src + (sp0 + u) * step4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
      };
      load_chunk(0);
      for (int h = warp; h < p.num_heads; h += kWarps) {
        const int64_t row = static_cast<int64_t>(h) * kMaxDecodeLayersSplits + lane;
        const float ms = lane < splits ? __ldcg(p.partial_ml + 2 * row) : -FLT_MAX;
        const float ls = lane < splits ? __ldcg(p.partial_ml + 2 * row + 1) : 0.0f;
        const float mx = warp_max(ms);
        const float e = lane < splits ? __expf(ms - mx) : 0.0f;
        const float total = warp_sum(e * ls);
        if (lane < splits) merge_w[h * kMaxDecodeLayersSplits + lane] = total > 0.0f ? e / total : 0.0f;
      }
      __syncthreads();
      float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      for (int sp0 = 0; sp0 < splits; sp0 += kMergeSplits) {
        if (sp0 > 0) load_chunk(sp0);
        if (has) {
#pragma unroll
          for (int u = 0; u < kMergeSplits; ++u) {
            if (sp0 + u < splits) {
              const float wt = merge_w[mh * kMaxDecodeLayersSplits + sp0 + u];
              o.x = fmaf(wt, pv[u].x, o.x);
              o.y = fmaf(wt, pv[u].y, o.y);
              o.z = fmaf(wt, pv[u].z, o.z);
              o.w = fmaf(wt, pv[u].w, o.w);
            }
          }
        }
      }
      if (has) {
        __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(s.xs + i0);
        out[0] = __floats2bfloat162_rn(o.x, o.y);
        out[1] = __floats2bfloat162_rn(o.z, o.w);
      }
    }
    mark();
    wait_slot<0>(sl, kSlotQkvO);
    __syncthreads();
    mark();
    rows_add(s.w_o, share_of(H), Q, s.xs, p.x, merge_w);
    __syncthreads();
    mark();
    grid_barrier(p.barrier, target, [&] {
      if (!kCopiesInPhases) load_qkv(p, s, sl, l + 1);  // into the o slot, now used
    });
    mark();

    // D: gate and up rows of the same i, then SiLU(g) * u (each rounded as the GEMV path's bf16 outputs are).
    rmsnorm_input(p.x, w.post_norm, H, p.eps, s.xs, red);
    if (kCopiesInPhases) load_qkv(p, s, sl, l + 1);  // into the o slot, now used
    mark();
    wait_slot<3>(sl, kSlotGu);
    __syncthreads();
    mark();
    {
      // The block's gate rows then its up rows, one row per warp in turn
      // (2 units' rows over the warps evenly), bf16-rounded into merge_w's
      // space, then SiLU(g) * u per unit.
      const Range r = share_of(I);
      const int units = r.end - r.begin;
      float* gu_s = merge_w;  // [2][units]
      for (int t = warp; t < 2 * units; t += kWarps) {
        const float v = row_dot(s.w_gu + static_cast<int64_t>(t) * H, s.xs, H, lane);
        if (lane == 0) gu_s[t] = round_bf16(v);
      }
      __syncthreads();
      for (int u = threadIdx.x; u < units; u += kThreads) {
        const float g = gu_s[u], up = gu_s[units + u];
        store_bf16(p.act + r.begin + u, g / (1.0f + expf(-g)) * up);
      }
    }
    __syncthreads();
    mark();
    grid_barrier(p.barrier, target, [&] {
      if (!kCopiesInPhases) load_gu(p, s, sl, l + 1);
    });
    mark();

    // E: the down rows, added to the residual.
    {
      uint32_t au[kActLoads];
#pragma unroll
      for (int u = 0; u < kActLoads; ++u) {
        const int j = threadIdx.x + u * kThreads;
        au[u] = j < I / 2 ? __ldcg(reinterpret_cast<const unsigned int*>(p.act) + j) : 0u;
      }
      if (kCopiesInPhases) load_gu<Pieces::kFirst>(p, s, sl, l + 1);  // the gate half; up goes out in B(l + 1)
#pragma unroll
      for (int u = 0; u < kActLoads; ++u) {
        const int j = threadIdx.x + u * kThreads;
        if (j < I / 2) reinterpret_cast<uint32_t*>(s.xs)[j] = au[u];
      }
    }
    mark();
    wait_slot<3>(sl, kSlotDown);
    __syncthreads();
    mark();
    rows_add(s.w_down, share_of(H), I, s.xs, p.x, merge_w);
    __syncthreads();
    mark();
    if (l + 1 < p.num_layers) {
      grid_barrier(p.barrier, target, [&] {
        if (!kCopiesInPhases) load_down(p, s, sl, l + 1);
      });
    } else if (!kCopiesInPhases) {
      load_down(p, s, sl, l + 1);  // nothing left to load (the cp.async form's empty group)
    }
    mark();
  }
}

}  // namespace

int64_t decode_layers_smem(const DecodeLayersParams& p) {
  const int64_t weights = (shared_slot_elems(p) + static_cast<int64_t>(p.cap_gu_units) * 2 * p.hidden +
                           static_cast<int64_t>(p.cap_down_rows) * p.inter) *
                          static_cast<int64_t>(sizeof(bf16));
  const int64_t group = p.num_kv_heads > 0 ? p.num_heads / p.num_kv_heads : 0;
  const int64_t attention =
      (p.head_dim == 64 || p.head_dim == 128) && group <= kMmaMaxGroup
          ? 8 * static_cast<int64_t>(attend_mma_frags(p.head_dim)) * 32 * 4
          : group * p.head_dim + kKeyTile * (p.head_dim + 1) + kKeyTile * p.head_dim + group * kKeyTile;
  const int64_t input = std::max<int64_t>(std::max<int64_t>({p.hidden, p.q_dim, p.inter}) * sizeof(bf16),
                                          attention * static_cast<int64_t>(sizeof(float)));
  return weights + (input + 15) / 16 * 16;
}

const char* decode_layers_unsupported(const DecodeLayersParams& p, int grid) {
  if (p.num_kv_heads <= 0 || p.num_heads % p.num_kv_heads != 0) return "q heads not a multiple of kv heads";
  if (p.num_heads / p.num_kv_heads > kWarps) return "more q heads per kv head than warps per block";
  if (p.num_heads > kMaxDecodeLayersHeads) return "more q heads than the kernel merges";
  if (p.head_dim <= 0 || p.head_dim % 8 != 0 || p.head_dim > kMaxAttentionHeadDim) {
    return "head_dim not a multiple of 8 or too large";
  }
  if (p.hidden % 8 != 0 || p.q_dim % 8 != 0 || p.inter % 8 != 0) return "widths not multiples of 8";
  if (p.hidden > 4 * kThreads * kNormLoads) return "hidden size larger than the kernel's norm takes";
  if (p.inter > 2 * kThreads * kActLoads) return "intermediate size larger than the kernel takes";
  if (p.q_dim > kThreads * kMergeOutputs) return "q width larger than the kernel's merge takes";
  if (p.cap_qkv_pairs > kMaxRopePairs) return "more q|k|v rows per block than the kernel takes";
  if (2 * p.cap_gu_units > kMaxDecodeLayersHeads * kMaxDecodeLayersSplits) {
    return "more gate|up rows per block than the kernel takes";
  }
  if (p.q_dim != p.num_heads * p.head_dim) return "q width is not heads x head_dim";
  if (grid < p.num_kv_heads) return "fewer multiprocessors than kv heads";
  int device = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    cudaGetLastError();
    return "device attributes unavailable";
  }
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, decode_layers_kernel) != cudaSuccess) {
    cudaGetLastError();
    return "kernel attributes unavailable";
  }
  if (decode_layers_smem(p) + static_cast<int64_t>(attributes.sharedSizeBytes) > optin) {
    return "a layer's weight slices do not fit in one block's shared memory";
  }
  if (allow_large_smem<decode_layers_kernel>() != cudaSuccess) {
    cudaGetLastError();
    return "the kernel's shared memory cannot be raised";
  }
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_layers_kernel, kThreads,
                                                    static_cast<size_t>(decode_layers_smem(p))) != cudaSuccess ||
      per_sm < 1) {
    cudaGetLastError();
    return "one block per multiprocessor does not fit";
  }
  return nullptr;
}

cudaError_t decode_layers(const DecodeLayersParams& p, int grid, cudaStream_t stream) {
  const cudaError_t e = cudaMemsetAsync(p.barrier, 0, sizeof(unsigned int), stream);
  if (e != cudaSuccess) return e;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned int>(grid));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = static_cast<size_t>(decode_layers_smem(p));
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeCooperative;  // all blocks resident, or the launch fails
  attribute.val.cooperative = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, decode_layers_kernel, p);
}

}  // namespace tern::cuda
