// The decode kernel's phase B: one block's split of the context scored for
// its kv head's q heads, written as an unnormalized partial. Included by
// decode_kernel.cu only, after decode_kernel_common.cuh.
#pragma once

#include <cfloat>

#include "backend/cuda/decode_kernel_common.cuh"

namespace tern::cuda {
namespace {

// The first kSlotKeys keys of a block's split have their KV slots worked
// out once per step (the block table does not change within it), so a key
// tile's K/V loads need no table lookup first.
constexpr int kSlotKeys = 4 * kKeyTile;
// The KV slot of `key` of a split starting at `begin`.
__device__ __forceinline__ int64_t key_slot(const DecodeLayersParams& p, const int32_t* table, const int* key_slots,
                                            int begin, int key) {
  const int idx = key - begin;
  return idx < kSlotKeys ? key_slots[idx]
                         : static_cast<int64_t>(table[key / p.tables.block_size]) * p.tables.block_size +
                               key % p.tables.block_size;
}
// 16-byte loads per thread: a key tile's K (and V); the q heads of one kv head.
constexpr int kKvLoads = kKeyTile * kMaxAttentionHeadDim / 8 / kThreads;
constexpr int kQLoads = (kWarps * kMaxAttentionHeadDim / 8 + kThreads - 1) / kThreads;

// Phase B for block (tok, kvh, split): keys [begin, end) of token tok's
// context, the kv head's `group` q heads (warp w: head kvh * group + w) of
// the token's q (qkv_out row tok), the partials its rows. Every load of a
// tile (and, with the first, of q) is issued before any is used: one round
// trip per tile. Cache: the pool's element (bf16, or e4m3 converted to
// bf16 exactly as it is loaded).
template <typename Cache, typename F>
__device__ void attend_split(const DecodeLayersParams& p, const Smem& s, int l, int tok, int kvh, int split,
                             int begin, int end, const int32_t* table, const int* key_slots, int mark_at,
                             F&& after_loads) {
  const int hd = p.heads.head_dim, group = p.heads.num_heads / p.heads.num_kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t kv_dim = static_cast<int64_t>(p.heads.num_kv_heads) * hd;
  float* q_s = reinterpret_cast<float*>(s.xs);  // [group][hd], scaled by 1/sqrt(hd)
  float* k_s = q_s + group * hd;         // [kKeyTile][hd + 1]
  float* v_s = k_s + kKeyTile * (hd + 1);  // [kKeyTile][hd]
  float* p_s = v_s + kKeyTile * hd;        // [group][kKeyTile]
  // K, V and q in pieces of 8 dims (head_dim % 8 == 0), 16 bytes as bf16.
  const Cache* k_plane = kv_plane<Cache>(p, l, 0);
  const Cache* v_plane = kv_plane<Cache>(p, l, 1);
  const uint4* q = reinterpret_cast<const uint4*>(p.qkv_out + static_cast<int64_t>(tok) * p.q_dim +
                                                  static_cast<int64_t>(kvh) * group * hd);
  const float scale = rsqrtf(static_cast<float>(hd));
  const int pieces = hd / 8;                        // per key row
  const bool pow2 = (pieces & (pieces - 1)) == 0;  // then / pieces is a shift
  const int shift = __ffs(pieces) - 1;

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
        const int64_t at = key_slot(p, table, key_slots, begin, tile + j) * kv_dim + kvh * hd + 8 * c;
        ku[u] = load_kv8_cg(k_plane + at);
        vu[u] = load_kv8_cg(v_plane + at);
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
    const int h = tok * p.heads.num_heads + kvh * group + warp;  // the token's partial rows come after the last's
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
// (g, g + 8) and the 8 keys as columns: each lane loads 8 contiguous dims
// of its key's K (16 bytes of bf16, or 8 of e4m3 converted exactly) straight
// into the B fragment, and q's A fragment takes the
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

template <int HD, typename Cache, typename F>
__device__ void attend_mma(const DecodeLayersParams& p, const Smem& s, int l, int tok, int kvh, int split, int begin,
                           int end, const int32_t* table, const int* key_slots, int mark_at, F&& after_loads) {
  constexpr int kPairs = HD / 32;   // 32-dim steps of S (two MMAs each)
  constexpr int kHalves = HD / 64;  // 64-dim steps of O^T (four MMAs each)
  constexpr int kFrags = attend_mma_frags(HD);
  const int group = p.heads.num_heads / p.heads.num_kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int64_t kv_dim = static_cast<int64_t>(p.heads.num_kv_heads) * HD;
  const Cache* k_base = kv_plane<Cache>(p, l, 0) + static_cast<int64_t>(kvh) * HD;
  const Cache* v_base = kv_plane<Cache>(p, l, 1) + static_cast<int64_t>(kvh) * HD;
  auto row_of = [&](int key) { return key_slot(p, table, key_slots, begin, key) * kv_dim; };  // in the K/V planes

  // q rows g and g + 8 (heads kvh * group + row), dims 32 j + 8 c .. + 7;
  // written this launch, so read through L2. Rows past the group are zero.
  uint4 qa[kPairs];
  {
    const bf16* q = p.qkv_out + static_cast<int64_t>(tok) * p.q_dim + static_cast<int64_t>(kvh) * group * HD;
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
      for (int j = 0; j < kPairs; ++j) kr[j] = load_kv8_cg(k_base + off + 32 * j + 8 * c);
    }
    uint4 vr[2][kHalves];  // keys base + 2c, + 1; dims 64 h + 8 g .. + 7
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int64_t off = row_of(min(base + 2 * c + i, last));
#pragma unroll
      for (int h = 0; h < kHalves; ++h) {
        vr[i][h] = load_kv8_cg(v_base + off + 64 * h + 8 * g);
      }
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
    const int64_t h_first = static_cast<int64_t>(tok) * p.heads.num_heads + kvh * group;  // the token's rows
    const int64_t r0 = (h_first + h0) * kMaxDecodeLayersSplits + split;
    const int64_t r1 = (h_first + h1) * kMaxDecodeLayersSplits + split;
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

}  // namespace
}  // namespace tern::cuda
