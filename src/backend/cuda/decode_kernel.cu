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
// and o share one slot (the four do not fit in 227 KiB at hidden 1024,
// intermediate 3072 and q|k|v 2560 on 132 multiprocessors): o loads during attention, the next
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
// kernel is latency- and issue-bound, not bandwidth-bound (bench/kernels/NOTES.md).
// The dot products (in the same order), RoPE and roundings are the GEMV
// path's (gemv.cu); the RMSNorm's sum of squares is taken over the block,
// and attention is an online softmax on the tensor cores for head_dim 64
// and 128 (attend_mma; a CUDA-core one like paged_attention_kernel for
// other shapes) with its own split of the keys, so results agree with the
// GEMV path within bf16 noise, not bit for bit.
//
// Parts: decode_kernel_common.cuh (block shape, row shares, shared-memory
// layout, timeline), decode_kernel_weights.cuh (the weight slots and when
// their copies go out), decode_kernel_attention.cuh (phase B); this file
// holds the grid barrier, the row products, the kernel and its host side.
// With FP8 weights (p.fp8) the slots hold e4m3 codes, half the bytes, and
// the row products convert them in registers and multiply each row's sum
// by its scale: the FP8 GEMV path's math. With int4 weights (p.int4) a
// slot holds each slice's codes, block scales and zeros (a quarter of the
// bytes and 3 per 32 weights), and the row products are the int4 GEMV's
// (dot8_int4, the lanes' order the same). With an FP8 KV cache (p.kv_fp8)
// phase A rounds the token's k and v to e4m3 from the fp32 rotation and
// phase B converts the codes to bf16 exactly as it loads them (the Cache
// template parameter; the bf16 instance is the kernel as it was).
//
// A chunk of up to kMaxDecodeLayersTokens consecutive tokens of one
// sequence (a token and its drafts, p.num_tokens > 1) runs in the same
// launch (the kTok = kMaxDecodeLayersTokens instances; kTok = 1 is the
// one-token kernel unchanged): each phase takes every token's rows from one
// load of the weights, each token's products in the one-token order; phase
// A writes every token's k and v before the barrier, and in phase B block b
// attends for token b / (kv heads x splits) over the keys up to its own
// position, the splits those of the first token's context (a later token's
// last split takes the keys past it); phase C merges each token's partials
// in turn. A token's products are the one-token kernel's; its attention's
// splits may not be (they follow the first token's context), so its rows
// agree with one-token launches within the attention's rounding.
#include <algorithm>
#include <cfloat>
#include <climits>
#include <type_traits>

#include "backend/cuda/decode_kernel_attention.cuh"
#include "backend/cuda/decode_kernel_common.cuh"
#include "backend/cuda/decode_kernel_weights.cuh"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/fp8_utils.cuh"
#include "backend/cuda/int4_utils.cuh"
#include "backend/cuda/key_splits.h"

namespace tern::cuda {
namespace {

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

// 8 e4m3 codes against 8 bf16 inputs, in dot8_e4m3's order.
__device__ __forceinline__ float dot8_e4m3_bf16(const uint2 w, const uint4 x, float acc) {
  const float4 a = make_float4(lo_bf16(x.x), hi_bf16(x.x), lo_bf16(x.y), hi_bf16(x.y));
  const float4 b = make_float4(lo_bf16(x.z), hi_bf16(x.z), lo_bf16(x.w), hi_bf16(x.w));
  return dot8_e4m3(w, a, b, acc);
}

// Row `row` of a slot's slice of `rows` rows (K weights each: bf16, e4m3
// codes when W is uint8_t, the row's scale applied by the caller, or int4
// codes with their block scales and zeros, the slot's layout: slice_bytes),
// weights [k0, k0 + len), against each token t < T's input xs + t * ld
// ([0, len), bf16 in shared memory: the GEMV path's inputs are
// bf16-rounded, so the values are the same), summed over the warp into
// dot[t]. Lane covers k = lane * 8 + 256 u, in order, 8 weights at a time,
// as gemv_kernel's lanes do; each piece of weights is loaded once for all
// the tokens (after the first token's inputs), each token's sum in the same
// order.
template <typename W, int kTok>
__device__ __forceinline__ void slot_dots(const unsigned char* slice, int rows, int row, int K, int k0, int len,
                                          const bf16* xs, int ld, int T, int lane, float (&dot)[kTok]) {
#pragma unroll
  for (int t = 0; t < kTok; ++t) dot[t] = 0.0f;
  const auto input = [&](int t, int k) { return *reinterpret_cast<const uint4*>(xs + t * ld + k); };
  if constexpr (std::is_same_v<W, Int4Slot>) {
    const unsigned char* codes = slice + static_cast<int64_t>(row) * (K / 2) + k0 / 2;
    const uint16_t* scales = reinterpret_cast<const uint16_t*>(slice + static_cast<int64_t>(rows) * (K / 2)) +
                             static_cast<int64_t>(row) * (K / 32) + k0 / 32;
    const unsigned char* zeros = slice + static_cast<int64_t>(rows) * (K / 2 + K / 16) +
                                 static_cast<int64_t>(row) * (K / 32) + k0 / 32;
    const auto dot_int4 = [](const Int4x8& w, const uint4 x, float acc) {
      const float4 a = make_float4(lo_bf16(x.x), hi_bf16(x.x), lo_bf16(x.y), hi_bf16(x.y));
      const float4 b = make_float4(lo_bf16(x.z), hi_bf16(x.z), lo_bf16(x.w), hi_bf16(x.w));
      return dot8_int4(w, a, b, acc);
    };
    for (int k = lane * 8; k < len; k += 256) {
      const uint4 x0 = input(0, k);
      Int4x8 w;
      w.codes = *reinterpret_cast<const uint32_t*>(codes + k / 2);
      w.dz = static_cast<uint32_t>(scales[k / 32]) | (static_cast<uint32_t>(zeros[k / 32]) << 16);
      dot[0] = dot_int4(w, x0, dot[0]);
#pragma unroll
      for (int t = 1; t < kTok; ++t) {
        if (t < T) dot[t] = dot_int4(w, input(t, k), dot[t]);
      }
    }
  } else {
    const W* w = reinterpret_cast<const W*>(slice) + static_cast<int64_t>(row) * K + k0;
    for (int k = lane * 8; k < len; k += 256) {
      const uint4 x0 = input(0, k);
      if constexpr (sizeof(W) == 1) {
        const uint2 wv = *reinterpret_cast<const uint2*>(w + k);
        dot[0] = dot8_e4m3_bf16(wv, x0, dot[0]);
#pragma unroll
        for (int t = 1; t < kTok; ++t) {
          if (t < T) dot[t] = dot8_e4m3_bf16(wv, input(t, k), dot[t]);
        }
      } else {
        const uint4 wv = *reinterpret_cast<const uint4*>(w + k);
        dot[0] = dot8_bf16(wv, x0, dot[0]);
#pragma unroll
        for (int t = 1; t < kTok; ++t) {
          if (t < T) dot[t] = dot8_bf16(wv, input(t, k), dot[t]);
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kTok; ++t) {
    if (t == 0 || t < T) dot[t] = warp_sum(dot[t]);
  }
}

// Row n's scale (FP8 weights) or 1 (bf16; int4's scales are per block, inside the dot).
template <typename W>
__device__ __forceinline__ float row_scale(const float* scales, int64_t n) {
  if constexpr (std::is_same_v<W, uint8_t>) {
    return __ldg(scales + n);
  } else {
    return 1.0f;
  }
}

// Every block arrives, then waits for all: the writes before it, by any
// block, are visible to the reads after it (reads of data written during
// the launch go through L2: __ldcg, never L1, which is not coherent).
// `before_arrival` runs once the block's threads are all here, before it
// arrives (before sm_90 the weight copies go out there, kCopiesInPhases;
// the release then waits for them).
template <typename F>
__device__ __forceinline__ void grid_barrier(unsigned int* counter, unsigned int& target, F&& before_arrival) {
  target += gridDim.x;
  __syncthreads();
  before_arrival();
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

// Each token t < T's xs[t * K + k] = bf16(x[t * K + k] / sqrt(mean(x_t^2) +
// eps) * w[k]), as gemv's kRmsNorm input but summed over the block: every
// thread loads its part of the rows at once (one round trip to L2), so the
// sum's order is not the GEMV's. K <= 4 * kThreads * kNormLoads; red holds
// kWarps floats per token.
constexpr int kNormLoads = 2;
// Loads per thread of one token's SiLU products (inter <= 2 * kThreads *
// kActLoads), the merge's outputs per thread (q_dim <= kThreads *
// kMergeOutputs, 4 consecutive dims in one 16-byte load) and splits loaded
// at once.
constexpr int kActLoads = 4;
constexpr int kMergeOutputs = 4;
constexpr int kMergeSplits = 8;
constexpr int kMaxRopePairs = 32;  // q|k|v row pairs per block
template <int kTok>
__device__ __forceinline__ void rmsnorm_inputs(const float* x, const float* w, int K, float eps, int T, bf16* xs,
                                               float* red) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float4* wt = reinterpret_cast<const float4*>(w);
  float4 v[kTok][kNormLoads], g[kNormLoads];
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int u = 0; u < kNormLoads; ++u) {  // the rows and the norm weights in one round trip
    const int j = threadIdx.x + u * kThreads;
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      v[t][u] = (t == 0 || t < T) && j < K / 4 ? __ldcg(reinterpret_cast<const float4*>(x + t * K) + j) : zero;
    }
    g[u] = j < K / 4 ? wt[j] : zero;
  }
#pragma unroll
  for (int t = 0; t < kTok; ++t) {
    float sum_sq = 0.0f;
#pragma unroll
    for (int u = 0; u < kNormLoads; ++u) {
      sum_sq += v[t][u].x * v[t][u].x + v[t][u].y * v[t][u].y + v[t][u].z * v[t][u].z + v[t][u].w * v[t][u].w;
    }
    sum_sq = warp_sum(sum_sq);
    if (lane == 0) red[t * kWarps + warp] = sum_sq;
  }
  __syncthreads();
#pragma unroll
  for (int t = 0; t < kTok; ++t) {
    if (t > 0 && t >= T) break;
    float total = lane < kWarps ? red[t * kWarps + lane] : 0.0f;
    total = warp_sum(total);
    const float scale = 1.0f / sqrtf(total / static_cast<float>(K) + eps);
#pragma unroll
    for (int u = 0; u < kNormLoads; ++u) {
      const int j = threadIdx.x + u * kThreads;
      if (j < K / 4) {
        __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(xs + t * K + 4 * j);
        out[0] = __floats2bfloat162_rn(v[t][u].x * scale * g[u].x, v[t][u].y * scale * g[u].y);
        out[1] = __floats2bfloat162_rn(v[t][u].z * scale * g[u].z, v[t][u].w * scale * g[u].w);
      }
    }
  }
}

// Each token t < T's x[t * ldx + n] += row n of the slot (rows r, K weights
// each) . xs + t * K (times the row's scale with FP8 weights). With at most
// half as many rows as warps (o and down at hidden 1024 on 132
// multiprocessors: 8 rows), two warps share a row, one half of K each,
// summed through red (kWarps floats per token).
template <typename W, int kTok>
__device__ __forceinline__ void rows_add(const unsigned char* slot, Range r, int K, const bf16* xs, float* x, int ldx,
                                         int T, float* red, const float* scales) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int rows = r.end - r.begin;
  float v[kTok];
  if (2 * rows <= kWarps && K % 16 == 0) {
    const int row = warp >> 1, half = warp & 1, hk = K / 2;
    const bool mine = row < rows;
    float old[kTok];
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      old[t] = mine && half == 0 && (t == 0 || t < T) ? __ldcg(x + t * ldx + r.begin + row) : 0.0f;
    }
    // Every warp takes part in its dot's shuffles (rows beyond the block's read slot row 0 and are dropped).
    slot_dots<W, kTok>(slot, rows, mine ? row : 0, K, half * hk, hk, xs + half * hk, K, T, lane, v);
    if (lane == 0) {
#pragma unroll
      for (int t = 0; t < kTok; ++t) red[t * kWarps + warp] = v[t];
    }
    __syncthreads();
    if (mine && half == 0 && lane == 0) {
      const float scale = row_scale<W>(scales, r.begin + row);
#pragma unroll
      for (int t = 0; t < kTok; ++t) {
        if (t == 0 || t < T) {
          x[t * ldx + r.begin + row] = old[t] + (red[t * kWarps + warp] + red[t * kWarps + warp + 1]) * scale;
        }
      }
    }
    return;
  }
  for (int n = r.begin + warp; n < r.end; n += kWarps) {
    float old[kTok];
#pragma unroll
    for (int t = 0; t < kTok; ++t) old[t] = t == 0 || t < T ? __ldcg(x + t * ldx + n) : 0.0f;
    slot_dots<W, kTok>(slot, rows, n - r.begin, K, 0, K, xs, K, T, lane, v);
    if (lane == 0) {
#pragma unroll
      for (int t = 0; t < kTok; ++t) {
        if (t == 0 || t < T) x[t * ldx + n] = old[t] + v[t] * row_scale<W>(scales, n);
      }
    }
  }
}

// kTok: the most tokens the instance takes (1, or kMaxDecodeLayersTokens;
// p.num_tokens of them run).
template <typename W, typename Cache, int kTok>
__global__ void __launch_bounds__(kThreads, 1) decode_layers_kernel(DecodeLayersParams p) {
  extern __shared__ float4 smem_raw[];
  const Smem s = carve<W>(p, reinterpret_cast<unsigned char*>(smem_raw));
  __shared__ float red[kWarps * kTok];
  __shared__ float merge_w[kMaxDecodeLayersHeads * kMaxDecodeLayersSplits];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int H = p.hidden, Q = p.q_dim, I = p.inter, hd = p.heads.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(p.heads.num_kv_heads) * hd;
  unsigned int target = 0;
  int mark_at = 0;
  auto mark = [&]() {  // the block's clock at each phase boundary (p.timeline)
    timeline_mark(p, mark_at);
    ++mark_at;
  };
  mark();

  // The step's tokens (consecutive positions of one sequence), their KV
  // slots and the sequence's block table.
  const int T = kTok == 1 ? 1 : p.num_tokens;
  const int32_t* table = p.tables.block_tables + p.tables.table_offsets[p.tables.token_seq[0]];
  __shared__ int64_t token_slots[kTok];
  if (static_cast<int>(threadIdx.x) < T) {
    token_slots[threadIdx.x] = p.places.slots[threadIdx.x];
  }  // read after init_slots' __syncthreads
  // Splits of the first token's context per kv head (key_splits.h): one
  // pass of the attention each (a key tile, or kMmaSplitKeys on the tensor
  // cores), at most kMaxDecodeLayersSplits and no more blocks than the grid
  // has for every token; every split has keys (phase B's copies go out
  // after its first loads). Block b attends for token b / (kv heads x
  // splits); a later token's last split takes its keys past the first's.
  const bool mma = (hd == 64 || hd == 128) && p.heads.num_heads / p.heads.num_kv_heads <= kMmaMaxGroup;
  const int ctx0 = p.places.positions[0] + 1;
  const KeySplits ks = key_splits(ctx0, mma ? kMmaSplitKeys : kKeyTile, mma ? kChunkKeys : kKeyTile,
                                  min(kMaxDecodeLayersSplits, static_cast<int>(gridDim.x) / (p.heads.num_kv_heads * T)));
  const int splits = ks.splits, per = ks.per;
  const int token_blocks = p.heads.num_kv_heads * splits;
  const bool attends = static_cast<int>(blockIdx.x) < T * token_blocks;
  const int tok = kTok == 1 || !attends ? 0 : static_cast<int>(blockIdx.x) / token_blocks;
  const int kvh = static_cast<int>(blockIdx.x) % (kTok == 1 ? INT_MAX : token_blocks) / splits;
  const int split = static_cast<int>(blockIdx.x) % splits;
  const int ctx = kTok == 1 ? ctx0 : p.places.positions[tok] + 1;
  const int key_begin = split * per, key_end = kTok == 1 || split + 1 < splits ? min(ctx, key_begin + per) : ctx;
  __shared__ int key_slots[kSlotKeys];
  if (attends) {
    for (int j = threadIdx.x; j < kSlotKeys && key_begin + j < key_end; j += kThreads) {
      const int key = key_begin + j;
      key_slots[j] = table[key / p.tables.block_size] * p.tables.block_size + key % p.tables.block_size;
    }
  }  // read after the first grid barrier's __syncthreads

  // RoPE's cos and sin of this block's q|k pairs at each token's position, for every layer.
  __shared__ float rope_cos[kTok][kMaxRopePairs], rope_sin[kTok][kMaxRopePairs];
  {
    const Range r = share_of(p.qkv_dim / 2);
    const int pairs = r.end - r.begin;
    for (int i = static_cast<int>(threadIdx.x); i < T * pairs; i += kThreads) {
      const int t = kTok == 1 ? 0 : i / pairs, pair = r.begin + i - t * pairs, n = 2 * pair;
      const float pos = static_cast<float>(p.places.positions[t]);
      if (n < Q + kv_dim) {
        sincosf(p.places.inv_freq[(n % hd) / 2] * pos, &rope_sin[t][pair - r.begin], &rope_cos[t][pair - r.begin]);
      }
    }
  }  // read after init_slots' __syncthreads
  __shared__ alignas(8) uint64_t slot_bars[3];
  Slots sl;
  sl.bars = slot_bars;
  init_slots(sl);
  load_qkv<W>(p, s, sl, 0);
  load_gu<W>(p, s, sl, 0);
  load_down<W>(p, s, sl, 0);

  // The block's keys' K and V rows of layer `layer` into L2 (attending
  // blocks, in phase A): phase B's loads then wait for L2, not HBM.
  const auto prefetch_kv = [&](int layer) {
    if (!attends) return;
    const int lines = (hd * static_cast<int>(sizeof(Cache)) + 127) / 128;
    const int n = (key_end - key_begin) * 2 * lines;
    for (int t = threadIdx.x; t < n; t += kThreads) {
      const int j = t / (2 * lines), rem = t % (2 * lines);
      const int64_t kslot = key_slot(p, table, key_slots, key_begin, key_begin + j);
      const Cache* row =
          kv_plane<Cache>(p, layer, rem < lines ? 0 : 1) + kslot * kv_dim + static_cast<int64_t>(kvh) * hd;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const char*>(row) + (rem % lines) * 128));
    }
  };

  for (int l = 0; l < p.num_layers; ++l) {
    const DecodeLayerWeights& w = p.layers[l];
    Cache* k_cache = kv_plane<Cache>(p, l, 0);
    Cache* v_cache = kv_plane<Cache>(p, l, 1);

    // A: q|k|v rows in pairs (dims 2i, 2i + 1 of one head), RoPE, the KV write.
    rmsnorm_inputs<kTok>(p.x, w.input_norm, H, p.eps, T, s.xs, red);
    if (kCopiesInPhases && l > 0) load_down<W>(p, s, sl, l);  // layer 0's went out before the loop
    prefetch_kv(l);  // the attention's rows, after the norm's loads
    mark();
    wait_slot<2>(sl, kSlotQkvO);
    __syncthreads();
    mark();
    {
      const Range r = share_of(p.qkv_dim / 2);
      const int rows = 2 * (r.end - r.begin);
      for (int pair = r.begin + warp; pair < r.end; pair += kWarps) {
        const int row = 2 * (pair - r.begin);
        float da[kTok], db[kTok];
        slot_dots<W, kTok>(s.w_qkv, rows, row, H, 0, H, s.xs, H, T, lane, da);
        slot_dots<W, kTok>(s.w_qkv, rows, row + 1, H, 0, H, s.xs, H, T, lane, db);
        if (lane == 0) {
          const int n = 2 * pair;
          const float sa = row_scale<W>(w.qkv_scale, n), sb = row_scale<W>(w.qkv_scale, n + 1);
#pragma unroll
          for (int t = 0; t < kTok; ++t) {
            if (t > 0 && t >= T) break;
            const float a = da[t] * sa, b = db[t] * sb;
            const int64_t slot = token_slots[t];
            if (n >= Q + kv_dim) {  // v
              store_kv2(v_cache, slot * kv_dim + (n - Q - kv_dim), a, b);
            } else {
              const float sn = rope_sin[t][pair - r.begin], cs = rope_cos[t][pair - r.begin];
              const float ra = a * cs - b * sn, rb = b * cs + a * sn;
              if (n < Q) {
                store_bf16(p.qkv_out + t * Q + n, ra);
                store_bf16(p.qkv_out + t * Q + n + 1, rb);
              } else {
                store_kv2(k_cache, slot * kv_dim + (n - Q), ra, rb);
              }
            }
          }
        }
      }
    }
    __syncthreads();
    mark();
    grid_barrier(p.barrier, target, [&] {
      if (!kCopiesInPhases) load_o<W>(p, s, sl, l);  // into the q|k|v slot, now used
    });
    mark();

    // B: attention partials.
    const auto b_copies = [&] {
      if (kCopiesInPhases) {
        load_o<W>(p, s, sl, l);  // into the q|k|v slot, now used
        if (l > 0) load_gu<W, Pieces::kSecond>(p, s, sl, l);  // layer 0's went out whole before the loop
      }
    };
    if (attends) {
      if (mma && hd == 128) {
        attend_mma<128, Cache>(p, s, l, tok, kvh, split, key_begin, key_end, table, key_slots, mark_at, b_copies);
      } else if (mma) {
        attend_mma<64, Cache>(p, s, l, tok, kvh, split, key_begin, key_end, table, key_slots, mark_at, b_copies);
      } else {
        attend_split<Cache>(p, s, l, tok, kvh, split, key_begin, key_end, table, key_slots, mark_at, b_copies);
      }
    } else if (kCopiesInPhases) {
      spin_cycles(p.b_o_delay_cycles);
      load_o<W>(p, s, sl, l);
      spin_cycles(p.b_up_delay_cycles);
      if (l > 0) load_gu<W, Pieces::kSecond>(p, s, sl, l);
    }
    ++mark_at;
    mark();
    grid_barrier(p.barrier, target, [] {});
    mark();

    // C: merge every head's partials into xs (bf16-rounded), then the o rows.
    // Partials are loaded kMergeSplits splits at a time, every output's at
    // once (the first chunk while the split weights are worked out): one
    // round trip per chunk, token after token.
    for (int t = 0; t < T; ++t) {
      // Thread i merges outputs 4i .. 4i + 3 (dims of one head: head_dim %
      // 8 == 0), one 16-byte load per split.
      const int i0 = 4 * static_cast<int>(threadIdx.x);
      const bool has = i0 < Q;
      const int mh = i0 / hd;
      const int64_t head0 = static_cast<int64_t>(t) * p.heads.num_heads;  // the token's first partial head
      const float4* src = reinterpret_cast<const float4*>(p.partial_out + (head0 + mh) * kMaxDecodeLayersSplits * hd +
                                                          (i0 - mh * hd));
      const int step4 = hd / 4;  // float4s from one split to the next
      float4 pv[kMergeSplits];
      auto load_chunk = [&](int sp0) {
#pragma unroll
        for (int u = 0; u < kMergeSplits; ++u) {
          pv[u] = has && sp0 + u < splits ? __ldcg(src + (sp0 + u) * step4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
      };
      load_chunk(0);
      if (t > 0) __syncthreads();  // the last token's merge weights are read
      for (int h = warp; h < p.heads.num_heads; h += kWarps) {
        const int64_t row = (head0 + h) * kMaxDecodeLayersSplits + lane;
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
        __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(s.xs + t * Q + i0);
        out[0] = __floats2bfloat162_rn(o.x, o.y);
        out[1] = __floats2bfloat162_rn(o.z, o.w);
      }
    }
    mark();
    wait_slot<0>(sl, kSlotQkvO);
    __syncthreads();
    mark();
    rows_add<W, kTok>(s.w_o, share_of(H), Q, s.xs, p.x, H, T, merge_w, w.o_scale);
    __syncthreads();
    mark();
    grid_barrier(p.barrier, target, [&] {
      if (!kCopiesInPhases) load_qkv<W>(p, s, sl, l + 1);  // into the o slot, now used
    });
    mark();

    // D: gate and up rows of the same i, then SiLU(g) * u (each rounded as the GEMV path's bf16 outputs are).
    rmsnorm_inputs<kTok>(p.x, w.post_norm, H, p.eps, T, s.xs, red);
    if (kCopiesInPhases) load_qkv<W>(p, s, sl, l + 1);  // into the o slot, now used
    mark();
    wait_slot<3>(sl, kSlotGu);
    __syncthreads();
    mark();
    {
      // The block's gate rows then its up rows, one row per warp in turn
      // (2 units' rows over the warps evenly), bf16-rounded into merge_w's
      // space, then SiLU(g) * u per unit and token.
      const Range r = share_of(I);
      const int units = r.end - r.begin;
      float* gu_s = merge_w;  // [token][2][units]
      const unsigned char* up_slice = s.w_gu + slice_bytes_of<W>(units, H);
      for (int j = warp; j < 2 * units; j += kWarps) {
        const bool gate = j < units;
        float v[kTok];
        slot_dots<W, kTok>(gate ? s.w_gu : up_slice, units, gate ? j : j - units, H, 0, H, s.xs, H, T, lane, v);
        const int64_t row = j < units ? r.begin + j : I + r.begin + (j - units);  // gate rows, then up rows
        if (lane == 0) {
          const float scale = row_scale<W>(w.gate_up_scale, row);
#pragma unroll
          for (int t = 0; t < kTok; ++t) {
            if (t == 0 || t < T) gu_s[t * 2 * units + j] = round_bf16(v[t] * scale);
          }
        }
      }
      __syncthreads();
      for (int i = threadIdx.x; i < T * units; i += kThreads) {
        const int t = kTok == 1 ? 0 : i / units, u = i - t * units;
        const float g = gu_s[t * 2 * units + u], up = gu_s[t * 2 * units + units + u];
        store_bf16(p.act + static_cast<int64_t>(t) * I + r.begin + u, g / (1.0f + expf(-g)) * up);
      }
    }
    __syncthreads();
    mark();
    grid_barrier(p.barrier, target, [&] {
      if (!kCopiesInPhases) load_gu<W>(p, s, sl, l + 1);
    });
    mark();

    // E: the down rows, added to the residual.
    {
      // Every token's products, [token][inter] as in act.
      uint32_t au[kActLoads * kTok];
#pragma unroll
      for (int u = 0; u < kActLoads * kTok; ++u) {
        const int j = threadIdx.x + u * kThreads;
        au[u] = j < T * I / 2 ? __ldcg(reinterpret_cast<const unsigned int*>(p.act) + j) : 0u;
      }
      if (kCopiesInPhases) load_gu<W, Pieces::kFirst>(p, s, sl, l + 1);  // the gate half; up goes out in B(l + 1)
#pragma unroll
      for (int u = 0; u < kActLoads * kTok; ++u) {
        const int j = threadIdx.x + u * kThreads;
        if (j < T * I / 2) reinterpret_cast<uint32_t*>(s.xs)[j] = au[u];
      }
    }
    mark();
    wait_slot<3>(sl, kSlotDown);
    __syncthreads();
    mark();
    rows_add<W, kTok>(s.w_down, share_of(H), I, s.xs, p.x, H, T, merge_w, w.down_scale);
    __syncthreads();
    mark();
    if (l + 1 < p.num_layers) {
      grid_barrier(p.barrier, target, [&] {
        if (!kCopiesInPhases) load_down<W>(p, s, sl, l + 1);
      });
    } else if (!kCopiesInPhases) {
      load_down<W>(p, s, sl, l + 1);  // nothing left to load (the cp.async form's empty group)
    }
    mark();
  }
}

}  // namespace

namespace {

// The kernel instance's most tokens for p.num_tokens.
int tokens_cap(const DecodeLayersParams& p) { return p.num_tokens > 1 ? kMaxDecodeLayersTokens : 1; }

}  // namespace

int64_t decode_layers_smem(const DecodeLayersParams& p) {
  const int64_t weights = shared_slot_bytes(p) + 2 * slice_bytes(p, p.cap_gu_units, p.hidden) +
                          slice_bytes(p, p.cap_down_rows, p.inter);
  const int64_t group = p.heads.num_kv_heads > 0 ? p.heads.num_heads / p.heads.num_kv_heads : 0;
  const int64_t attention =
      (p.heads.head_dim == 64 || p.heads.head_dim == 128) && group <= kMmaMaxGroup
          ? 8 * static_cast<int64_t>(attend_mma_frags(p.heads.head_dim)) * 32 * 4
          : group * p.heads.head_dim + kKeyTile * (p.heads.head_dim + 1) + kKeyTile * p.heads.head_dim +
                group * kKeyTile;
  const int64_t inputs = tokens_cap(p) * std::max<int64_t>({p.hidden, p.q_dim, p.inter}) * sizeof(bf16);
  const int64_t input = std::max<int64_t>(inputs, attention * static_cast<int64_t>(sizeof(float)));
  return weights + (input + 15) / 16 * 16;
}

namespace {

// decode_layers_unsupported's checks of the kernel itself, and the launch, per weight and cache type and the
// instance's most tokens.
template <typename W, typename Cache, int kTok>
const char* unsupported_for(const DecodeLayersParams& p, int optin) {
  cudaFuncAttributes attributes{};
  if (cudaFuncGetAttributes(&attributes, decode_layers_kernel<W, Cache, kTok>) != cudaSuccess) {
    cudaGetLastError();
    return "kernel attributes unavailable";
  }
  if (decode_layers_smem(p) + static_cast<int64_t>(attributes.sharedSizeBytes) > optin) {
    return kTok > 1 ? "a layer's weight slices and several tokens' inputs do not fit in one block's shared memory"
                    : "a layer's weight slices do not fit in one block's shared memory";
  }
  if (allow_large_smem<decode_layers_kernel<W, Cache, kTok>>() != cudaSuccess) {
    cudaGetLastError();
    return "the kernel's shared memory cannot be raised";
  }
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_layers_kernel<W, Cache, kTok>, kThreads,
                                                    static_cast<size_t>(decode_layers_smem(p))) != cudaSuccess ||
      per_sm < 1) {
    cudaGetLastError();
    return "one block per multiprocessor does not fit";
  }
  return nullptr;
}

template <typename W, typename Cache, int kTok>
cudaError_t launch_layers(const DecodeLayersParams& p, int grid, cudaStream_t stream) {
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
  return cudaLaunchKernelEx(&config, decode_layers_kernel<W, Cache, kTok>, p);
}

// The instance with room for p.num_tokens tokens.
template <typename W, typename Cache>
const char* unsupported_of(const DecodeLayersParams& p, int optin) {
  return p.num_tokens > 1 ? unsupported_for<W, Cache, kMaxDecodeLayersTokens>(p, optin)
                          : unsupported_for<W, Cache, 1>(p, optin);
}
template <typename W, typename Cache>
cudaError_t launch_of(const DecodeLayersParams& p, int grid, cudaStream_t stream) {
  return p.num_tokens > 1 ? launch_layers<W, Cache, kMaxDecodeLayersTokens>(p, grid, stream)
                          : launch_layers<W, Cache, 1>(p, grid, stream);
}

}  // namespace

const char* decode_layers_unsupported(const DecodeLayersParams& p, int grid) {
  if (p.heads.num_kv_heads <= 0 || p.heads.num_heads % p.heads.num_kv_heads != 0) {
    return "q heads not a multiple of kv heads";
  }
  if (p.heads.num_heads / p.heads.num_kv_heads > kWarps) return "more q heads per kv head than warps per block";
  if (p.heads.num_heads > kMaxDecodeLayersHeads) return "more q heads than the kernel merges";
  if (p.heads.head_dim <= 0 || p.heads.head_dim % 8 != 0 || p.heads.head_dim > kMaxAttentionHeadDim) {
    return "head_dim not a multiple of 8 or too large";
  }
  if (p.hidden % 8 != 0 || p.q_dim % 8 != 0 || p.inter % 8 != 0) return "widths not multiples of 8";
  // FP8 slices are copied in 16-byte pieces: a row of codes must be whole pieces.
  if (p.fp8 && (p.hidden % 16 != 0 || p.q_dim % 16 != 0 || p.inter % 16 != 0)) {
    return "FP8 weights with widths not multiples of 16";
  }
  // int4 slices' zeros (a byte per 32 weights) are copied in 16-byte pieces too.
  if (p.int4 && (p.hidden % 512 != 0 || p.q_dim % 512 != 0 || p.inter % 512 != 0)) {
    return "int4 weights with widths not multiples of 512";
  }
  if (p.int4 && p.fp8) return "both FP8 and int4 weights";
  if (p.hidden > 4 * kThreads * kNormLoads) return "hidden size larger than the kernel's norm takes";
  if (p.inter > 2 * kThreads * kActLoads) return "intermediate size larger than the kernel takes";
  if (p.q_dim > kThreads * kMergeOutputs) return "q width larger than the kernel's merge takes";
  if (p.cap_qkv_pairs > kMaxRopePairs) return "more q|k|v rows per block than the kernel takes";
  if (p.num_tokens < 1 || p.num_tokens > kMaxDecodeLayersTokens) return "token count outside the kernel's";
  if (2 * p.cap_gu_units * tokens_cap(p) > kMaxDecodeLayersHeads * kMaxDecodeLayersSplits) {
    return "more gate|up rows per block than the kernel takes";
  }
  if (p.q_dim != p.heads.num_heads * p.heads.head_dim) return "q width is not heads x head_dim";
  if (grid < p.heads.num_kv_heads * tokens_cap(p)) return "fewer multiprocessors than kv heads for every token";
  int device = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    cudaGetLastError();
    return "device attributes unavailable";
  }
  if (p.fp8) return p.kv_fp8 ? unsupported_of<uint8_t, fp8e4m3>(p, optin) : unsupported_of<uint8_t, bf16>(p, optin);
  if (p.int4) {
    return p.kv_fp8 ? unsupported_of<Int4Slot, fp8e4m3>(p, optin) : unsupported_of<Int4Slot, bf16>(p, optin);
  }
  return p.kv_fp8 ? unsupported_of<bf16, fp8e4m3>(p, optin) : unsupported_of<bf16, bf16>(p, optin);
}

cudaError_t decode_layers(const DecodeLayersParams& p, int grid, cudaStream_t stream) {
  if (p.fp8) return p.kv_fp8 ? launch_of<uint8_t, fp8e4m3>(p, grid, stream) : launch_of<uint8_t, bf16>(p, grid, stream);
  if (p.int4) {
    return p.kv_fp8 ? launch_of<Int4Slot, fp8e4m3>(p, grid, stream) : launch_of<Int4Slot, bf16>(p, grid, stream);
  }
  return p.kv_fp8 ? launch_of<bf16, fp8e4m3>(p, grid, stream) : launch_of<bf16, bf16>(p, grid, stream);
}

}  // namespace tern::cuda
