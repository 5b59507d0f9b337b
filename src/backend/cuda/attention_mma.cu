// The tensor-core form of paged_attention (attention.cu: the scalar form and
// the entry point, which sends head_dim 64 and 128 here).
#include <cfloat>

#include "backend/cuda/attention_mma.h"
#include "backend/cuda/device_utils.cuh"

namespace tern::cuda {
namespace {

// Tensor-core form (sm_80+, head_dim 64 or 128, up to 16 q heads per kv
// head): the q heads of one token and kv head are the 16 rows of an
// m16n8k16 bf16 MMA (rows past the group are zero), keys its columns, so
// S = Q K^T is head_dim / 16 MMAs per 8 keys and O += P V is head_dim / 8
// MMAs per 16 keys, fp32 accumulation. The dot products run over head_dim
// in any order, so each lane loads 16 contiguous bytes of a key and the
// q fragments use the same permutation of dims; V's fragments pair two
// keys of one dim with a byte permute, and the output dims come out
// permuted the same known way. Warp w of the block takes 16-key chunks
// w, w + W, ... of the split (a bf16 pool's through shared memory, cp.async
// stages of 24 KB a warp, where two such blocks fit per SM and the caller
// asks (stage_kv); an e4m3 pool's, or on GPUs with less shared memory,
// straight into registers); the
// warps' softmax states merge through shared memory, then (several splits)
// through the partials, the last split to finish merging them as in the
// scalar form (attention.cu).
//
// Heads as columns (kForm kHeadCols or kKeyRows: at most 8 q heads per kv
// head, the caller's heads_as_columns): O is computed transposed, O^T +=
// V^T P^T with 16 dims as the MMA's rows and the 8 heads as its columns, as
// the one-token kernel's attend_mma does; V's fragments pair two keys of one
// dim with a byte permute into V^T's A fragment, and O takes 32 accumulators
// a lane instead of 64 and half the P V MMAs. kHeadCols keeps S = q K^T with
// the heads as rows (8 of 16 padding), whose accumulator (keys 2c, 2c + 1
// and 8 + 2c, 9 + 2c of head g) is already P^T's B fragment. kKeyRows
// (scores_transposed) computes S^T = K q^T instead, a chunk's 16 keys as the
// rows (K's registers are the A fragment), so no row is padding, S takes
// half the MMAs and a column's softmax state is the lane's own; the P tiles
// reach P^T's B fragment by an 8 x 8 transpose (movmatrix). kKeyRows is the
// default (decode at 256 sequences +1.7% over kHeadCols on an H100, which
// was +3% over kHeadRows). The register form's launch bounds ask for four
// blocks per SM (kHeadCols: 128 registers, 84 bytes of spills; kKeyRows: 20
// bytes; a step of 256 tokens in one wave); two (178 registers, no spills)
// measured the same on an H100, so the gain is the work saved, not the
// occupancy.
constexpr int kMmaWarps = 4;
constexpr int kMmaMaxColumnsGroup = 8;  // q heads per kv head the heads-as-columns form takes (MMA columns)
constexpr int kChunkKeys = 16;
// Shared-memory stages per warp in the staged form (bf16 rows): three, 24 KB
// a warp at head_dim 128, so two blocks per SM on sm_90, the occupancy the
// register form has and the host's split count assumes (kSplitBlocksPerSm):
// three blocks would leave a 256-token step's 512 blocks in 1.3 waves of 396
// slots, the second mostly idle, against 1.94 of 264.
constexpr int kMmaStages = 3;
// Fewest keys per split: a chunk per warp.
constexpr int kMinSplitKeys = kMmaWarps * kChunkKeys;

// Keys per split for a context of ctx keys cut into at most num_splits.
__device__ __forceinline__ int mma_split_keys(int ctx, int num_splits) {
  const int even = (ctx + num_splits - 1) / num_splits;
  const int keys = even > kMinSplitKeys ? even : kMinSplitKeys;
  return (keys + kChunkKeys - 1) / kChunkKeys * kChunkKeys;
}

enum MmaForm : int { kHeadRows, kHeadCols, kKeyRows };

template <int HD, typename Cache, bool kStaged, int kForm>
__global__ void __launch_bounds__(32 * kMmaWarps, kStaged ? 2 : kForm != kHeadRows ? 4 : 1)
    mma_attention_kernel(PagedAttentionParams p) {
  constexpr bool kCols = kForm != kHeadRows;
  constexpr int kPairs = HD / 32;  // 32-dim steps of S (two MMAs each)
  constexpr int kHalves = HD / 64; // 64-dim steps of O (eight MMAs each)
  // Staged: a bf16 pool's chunks come in through shared memory; otherwise (an e4m3 pool, or too little
  // shared memory for two staged blocks per SM) they are loaded into registers.
  static_assert(!kStaged || sizeof(Cache) == 2, "the staged form is for bf16 pools");
  extern __shared__ uint4 attn_smem[];  // the staged chunks during the keys, then the warps' merge
  allow_dependent_launch();
  const int64_t x = blockIdx.x;  // indexes the partials and counters
  const int64_t t = p.token_list != nullptr ? p.token_list[x] : x;
  const int kvh = blockIdx.y, split = blockIdx.z;
  const int group = p.heads.num_heads / p.heads.num_kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;  // MMA fragment row group and column pair
  const int64_t kv_dim = static_cast<int64_t>(p.heads.num_kv_heads) * HD;
  const int ctx = p.places.positions[t] + 1;
  const int per = mma_split_keys(ctx, p.num_splits);
  const int active = (ctx + per - 1) / per;
  const int begin = split * per;
  if (begin >= ctx) return;  // an empty split: not counted below
  const int end = min(ctx, begin + per);
  const int32_t* table = p.tables.block_tables + p.tables.table_offsets[p.tables.token_seq[t]];
  const Cache* k_base = k_plane<Cache>(p.planes) + static_cast<int64_t>(kvh) * HD;
  const Cache* v_base = v_plane<Cache>(p.planes) + static_cast<int64_t>(kvh) * HD;
  auto row_of = [&](int key) {  // the key's offset in the K/V planes
    const int64_t block = table[key / p.tables.block_size];
    return (block * p.tables.block_size + key % p.tables.block_size) * kv_dim;
  };

  grid_dependency_wait();  // q and this step's K/V come from the kernels before

  // q rows g and g + 8 (heads kvh * group + row), dims 32 j + 8 c .. + 7.
  uint4 qa[kPairs], qb[kPairs];
  const bf16* q_row = p.q + t * p.q_row_stride;
  {
    const bf16* q = q_row + static_cast<int64_t>(kvh) * group * HD;
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      qa[j] = g < group ? *reinterpret_cast<const uint4*>(q + g * HD + 32 * j + 8 * c) : make_uint4(0, 0, 0, 0);
      qb[j] = !kCols && g + 8 < group ? *reinterpret_cast<const uint4*>(q + (g + 8) * HD + 32 * j + 8 * c)
                                      : make_uint4(0, 0, 0, 0);
    }
  }
  if (p.rope_kv || p.rope_q) {
    // RoPE and the KV write (PagedAttentionParams::rope_kv), or q's RoPE
    // alone (rope_q): the position's rotations once per block, as
    // rope_store_kv computes them.
    __shared__ float2 rot[HD / 2];
    const auto tid = static_cast<int>(threadIdx.x);
    const float pos = static_cast<float>(ctx - 1);
    if (tid < HD / 2) {
      float sn, cs;
      sincosf(p.places.inv_freq[tid] * pos, &sn, &cs);
      rot[tid] = make_float2(cs, sn);
    }
    const bool writes = p.rope_kv && split == active - 1;  // the split holding the token's own key
    uint32_t kv_word = 0;
    const int64_t own = writes ? static_cast<int64_t>(p.places.slots[t]) * kv_dim + static_cast<int64_t>(kvh) * HD : 0;
    // Threads 0 .. HD/2 - 1 take a k pair each, the next HD/2 a v word (HD <= the block's 128 threads).
    const bf16* k_src = q_row + static_cast<int64_t>(p.heads.num_heads) * HD + static_cast<int64_t>(kvh) * HD;
    if (writes && tid < HD) {
      kv_word = reinterpret_cast<const uint32_t*>(tid < HD / 2 ? k_src : k_src + kv_dim)[tid % (HD / 2)];
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {  // q's word w of unit j is pair 16 j + 4 c + w
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float2 r = rot[16 * j + 4 * c + w];
        uint32_t* a = &qa[j].x + w;
        *a = rope_pair(*a, r.x, r.y);
        if constexpr (!kCols) {
          uint32_t* b = &qb[j].x + w;
          *b = rope_pair(*b, r.x, r.y);
        }
      }
    }
    if (writes && tid < HD) {
      if (tid >= HD / 2) {
        store_kv2(v_plane<Cache>(p.planes), own + 2 * (tid - HD / 2), kv_word);
      } else if constexpr (sizeof(Cache) == 1) {  // e4m3 from the fp32 rotation, as rope_store_kv
        const float2 r = rope_pair_f32(kv_word, rot[tid].x, rot[tid].y);
        store_kv2(k_plane<Cache>(p.planes), own + 2 * tid, r.x, r.y);
      } else {
        store_kv2(k_plane<Cache>(p.planes), own + 2 * tid, rope_pair(kv_word, rot[tid].x, rot[tid].y));
      }
    }
    __syncthreads();  // the token's own K/V row is written before any warp reads it
  }
  const float scale = rsqrtf(static_cast<float>(HD)) * 1.44269504088896340736f;  // log2(e) / sqrt(hd)

  // Rows g and g + 8 (log2 units); kHeadCols: head g in [0]; kKeyRows: heads 2c and 2c + 1 (l over the lane's
  // own keys until the merge).
  float m[2] = {-FLT_MAX, -FLT_MAX}, l[2] = {0.0f, 0.0f};
  // o[h][j]: rows g, g + 8 and dims 8 (2c) + j + 64 h, + 8; kCols (o[h][jj], jj < 4): dims 64 h + 8 g + 2 jj
  // ([0], [1]) and + 1 ([2], [3]) of heads 2c ([0], [2]) and 2c + 1 ([1], [3]).
  constexpr int kOutTiles = kCols ? 4 : 8;
  float o[kHalves][kOutTiles][4];
#pragma unroll
  for (int h = 0; h < kHalves; ++h) {
#pragma unroll
    for (int j = 0; j < kOutTiles; ++j) o[h][j][0] = o[h][j][1] = o[h][j][2] = o[h][j][3] = 0.0f;
  }

  // O^T += V^T P^T for one chunk (kHeadCols, kKeyRows): P^T's B fragment (keys 2c, 2c + 1 and 8 + 2c,
  // 9 + 2c of head g), after the columns' factors c0 (heads 2c) and c1 (2c + 1) where any moved.
  auto ot_update = [&](const uint4 (&vr)[4][kHalves], uint32_t pb0, uint32_t pb1, float c0, float c1, bool scales) {
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        if (scales) {
          o[h][jj][0] *= c0;
          o[h][jj][1] *= c1;
          o[h][jj][2] *= c0;
          o[h][jj][3] *= c1;
        }
        // V^T's A fragment: rows dim 2 jj (a0, a2) and 2 jj + 1 (a1, a3) of the lane's 8, keys 2c, 2c + 1
        // (a0, a1) and 2c + 8, 2c + 9 (a2, a3).
        const uint32_t a0 = __byte_perm(word(vr[0][h], jj), word(vr[1][h], jj), 0x5410u);
        const uint32_t a1 = __byte_perm(word(vr[0][h], jj), word(vr[1][h], jj), 0x7632u);
        const uint32_t a2 = __byte_perm(word(vr[2][h], jj), word(vr[3][h], jj), 0x5410u);
        const uint32_t a3 = __byte_perm(word(vr[2][h], jj), word(vr[3][h], jj), 0x7632u);
        mma_bf16(o[h][jj], a0, a1, a2, a3, pb0, pb1);
      }
    }
  };

  // One 16-key chunk's scores, softmax round and P V, from its K fragments
  // (keys 8 e + g, dims 32 j + 8 c .. + 7) and V fragments (keys 2c, 2c + 1,
  // 2c + 8, 2c + 9; dims 64 h + 8 g .. + 7).
  auto chunk_math = [&](int base, const uint4 (&kr)[2][kPairs], const uint4 (&vr)[4][kHalves]) {
    if constexpr (kForm == kKeyRows) {
      // S^T = K q^T: keys g (st[0], st[1]) and g + 8 (st[2], st[3]) as the MMA's rows, heads 2c (st[0],
      // st[2]) and 2c + 1 (st[1], st[3]) as its columns; K's registers are the A fragment (rows keys g and
      // g + 8, the same permutation of dims as q's B fragment), so no MMA row is padding.
      float st[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {
        mma_bf16(st, kr[0][j].x, kr[1][j].x, kr[0][j].y, kr[1][j].y, qa[j].x, qa[j].y);
        mma_bf16(st, kr[0][j].z, kr[1][j].z, kr[0][j].w, kr[1][j].w, qa[j].z, qa[j].w);
      }
      if (base + kChunkKeys > end) {
        if (base + g >= end) st[0] = st[1] = -INFINITY;
        if (base + g + 8 >= end) st[2] = st[3] = -INFINITY;
      }
      // Each column's (head's) maximum over the 16 keys: the 8 lanes of one c.
      float mx0 = fmaxf(st[0], st[2]), mx1 = fmaxf(st[1], st[3]);
#pragma unroll
      for (int off = 4; off < 32; off <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
      }
      // m[0], m[1] (l[0], l[1]): heads 2c and 2c + 1, the same in every lane of a c (l: this lane's keys).
      const float n0 = fmaxf(m[0], mx0 * scale), n1 = fmaxf(m[1], mx1 * scale);
      const float c0 = exp2f(m[0] - n0), c1 = exp2f(m[1] - n1);
      m[0] = n0;
      m[1] = n1;
      float pr[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) pr[i] = exp2f(fmaf(st[i], scale, -m[i & 1]));
      l[0] = l[0] * c0 + pr[0] + pr[2];
      l[1] = l[1] * c1 + pr[1] + pr[3];
      // P^T's B fragment (keys 2c, 2c + 1 and 8 + 2c, 9 + 2c of head g): the 8 x 8 tiles of P (keys g and
      // g + 8, heads 2c, 2c + 1) transposed across the warp.
      const uint32_t pb0 = movmatrix_trans(pack_bf16x2(pr[0], pr[1]));
      const uint32_t pb1 = movmatrix_trans(pack_bf16x2(pr[2], pr[3]));
      const bool scales = __any_sync(0xffffffffu, c0 != 1.0f || c1 != 1.0f);
      ot_update(vr, pb0, pb1, c0, c1, scales);
    } else {
      // s[e]: keys base + 8 e + 2c, + 1 of rows g (0, 1) and g + 8 (2, 3).
      float s[2][4];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[e][0] = s[e][1] = s[e][2] = s[e][3] = 0.0f;
#pragma unroll
        for (int j = 0; j < kPairs; ++j) {
          mma_bf16(s[e], qa[j].x, qb[j].x, qa[j].y, qb[j].y, kr[e][j].x, kr[e][j].y);
          mma_bf16(s[e], qa[j].z, qb[j].z, qa[j].w, qb[j].w, kr[e][j].z, kr[e][j].w);
        }
      }
      // Scores stay unscaled (the scale goes into exp2's argument); only a chunk past the end masks.
      if (base + kChunkKeys > end) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            if (base + 8 * e + 2 * c + (i & 1) >= end) s[e][i] = -INFINITY;
          }
        }
      }
      if constexpr (kForm == kHeadCols) {
        // Row g (head g) alone: its keys' weights are P^T's B fragment, its factor each column's.
        float row_max = fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1])) * scale;
        row_max = quad_max(row_max);
        const float m_new = fmaxf(m[0], row_max);
        const float corr = exp2f(m[0] - m_new);
        m[0] = m_new;
        float pr[2][2];
        float add = 0.0f;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            pr[e][i] = exp2f(fmaf(s[e][i], scale, -m_new));
            add += pr[e][i];
          }
        }
        l[0] = l[0] * corr + add;
        // The columns' factors: heads 2c and 2c + 1 are rows g of lanes 8c and 8c + 4.
        const float c0 = __shfl_sync(0xffffffffu, corr, 8 * c), c1 = __shfl_sync(0xffffffffu, corr, 8 * c + 4);
        ot_update(vr, pack_bf16x2(pr[0][0], pr[0][1]), pack_bf16x2(pr[1][0], pr[1][1]), c0, c1,
                  __any_sync(0xffffffffu, corr != 1.0f));
      } else {
        float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int e = 0; e < 2; ++e) {
#pragma unroll
          for (int i = 0; i < 4; ++i) row_max[i >> 1] = fmaxf(row_max[i >> 1], s[e][i]);
        }
        row_max[0] *= scale;
        row_max[1] *= scale;
        float corr[2];
        mma_rows_rescale(row_max, m, l, corr);
        uint32_t pa[4];  // P as the A fragment: rows g / g + 8, keys 2c (+1) and 8 + 2c (+1)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float pr[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            pr[i] = exp2f(fmaf(s[e][i], scale, -m[i >> 1]));
            l[i >> 1] += pr[i];
          }
          pa[2 * e] = pack_bf16x2(pr[0], pr[1]);
          pa[2 * e + 1] = pack_bf16x2(pr[2], pr[3]);
        }
        mma_rows_scale(o, corr);
#pragma unroll
        for (int h = 0; h < kHalves; ++h) {
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            // Dim 64 h + 8 g + j of keys (2c, 2c + 1) and (2c + 8, 2c + 9).
            const uint32_t sel = (j & 1) ? 0x7632u : 0x5410u;
            const uint32_t b0 = __byte_perm(word(vr[0][h], j >> 1), word(vr[1][h], j >> 1), sel);
            const uint32_t b1 = __byte_perm(word(vr[2][h], j >> 1), word(vr[3][h], j >> 1), sel);
            mma_bf16(o[h][j], pa[0], pa[1], pa[2], pa[3], b0, b1);
          }
        }
      }
    }
  };

  // Keys past the end read the last key (real data) and are masked in chunk_math.
  const int last = end - 1;
  constexpr int kStride = kMmaWarps * kChunkKeys;  // keys between a warp's chunks
  if constexpr (kStaged) {
    // Each warp streams its chunks through shared-memory stages of its own
    // with cp.async (one group per chunk, all stages but one in flight while
    // one computes), so the loads wait in the copy engine, not in registers;
    // only __syncwarp orders a warp's copies and reads. Rows keep their
    // bytes, their 16-byte units swizzled (k_unit, v_unit).
    constexpr int kStages = kMmaStages;
    constexpr int kRowBytes = HD * static_cast<int>(sizeof(bf16));
    constexpr int kUnits = kRowBytes / 16;                 // 16-byte units per K or V row
    constexpr int kChunk = kChunkKeys * kRowBytes;         // bytes of one stage's K (or V)
    constexpr int kCopies = kChunkKeys * kUnits / 32;      // each lane's copies per plane and chunk
    static_assert(32 % kUnits == 0 || kUnits % 32 == 0, "a lane's rows follow from its lane");
    unsigned char* stages = reinterpret_cast<unsigned char*>(attn_smem) + warp * kStages * 2 * kChunk;
    auto issue = [&](int base, int stage) {
      unsigned char* ks = stages + stage * 2 * kChunk;
      unsigned char* vs = ks + kChunk;
      const int64_t mine = row_of(min(base + (lane & (kChunkKeys - 1)), last));  // lane l: key l % 16
#pragma unroll
      for (int n = 0; n < kCopies; ++n) {
        const int i = lane + 32 * n, row = i / kUnits, unit = i % kUnits;
        const int64_t off = __shfl_sync(0xffffffffu, mine, row);
        copy_async16(ks + row * kRowBytes + 16 * k_unit(row, unit),
                     reinterpret_cast<const unsigned char*>(k_base + off) + 16 * unit);
        copy_async16(vs + row * kRowBytes + 16 * v_unit(row, unit),
                     reinterpret_cast<const unsigned char*>(v_base + off) + 16 * unit);
      }
    };
    const int first = begin + warp * kChunkKeys;
#pragma unroll
    for (int st = 0; st + 1 < kStages; ++st) {
      if (first + st * kStride < end) issue(first + st * kStride, st);
      commit_async();  // empty groups too: every iteration below waits for the same count
    }
    int stage = 0;
    for (int base = first; base < end; base += kStride) {
      if (const int ahead = base + (kStages - 1) * kStride; ahead < end) {
        issue(ahead, stage == 0 ? kStages - 1 : stage - 1);  // that stage was read last iteration
      }
      commit_async();
      wait_async<kStages - 1>();
      __syncwarp();  // every lane's copies of this chunk have landed
      const unsigned char* ks = stages + stage * 2 * kChunk;
      const unsigned char* vs = ks + kChunk;
      // Unit u of a staged row (8 bf16).
      const auto unit8 = [](const unsigned char* rows, int row, int unit) {
        return *reinterpret_cast<const uint4*>(rows + row * kRowBytes + 16 * unit);
      };
      uint4 kr[2][kPairs];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
#pragma unroll
        for (int j = 0; j < kPairs; ++j) kr[e][j] = unit8(ks, 8 * e + g, k_unit(8 * e + g, 4 * j + c));  // dims 32 j + 8 c ..
      }
      uint4 vr[4][kHalves];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = 2 * c + (i & 1) + 8 * (i >> 1);
#pragma unroll
        for (int h = 0; h < kHalves; ++h) vr[i][h] = unit8(vs, row, v_unit(row, 8 * h + g));  // dims 64 h + 8 g ..
      }
      chunk_math(base, kr, vr);
      __syncwarp();  // every lane is done with this stage before a later iteration refills it
      stage = stage + 1 == kStages ? 0 : stage + 1;
    }
    wait_async<0>();
    __syncthreads();  // the stages are the merge's shared memory below
  } else {
    // The warp's chunk at `base` into L2 ahead of its loads: lane l fetches key l / 2's K (even lanes) or V
    // (odd lanes) row, HD elements; p.prefetch_chunks of the warp's chunks ahead of the one computing.
    const auto prefetch = [&](int base) {
      if (const int key = base + (lane >> 1); key < end) {
        const Cache* row = ((lane & 1) ? v_base : k_base) + row_of(key);
#pragma unroll
        for (int b = 0; b < HD * static_cast<int>(sizeof(Cache)); b += 128) {
          asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const char*>(row) + b));
        }
      }
    };
    const int ahead = p.prefetch_chunks * kStride;
    for (int d = kStride; d < ahead; d += kStride) prefetch(begin + warp * kChunkKeys + d);
    for (int base = begin + warp * kChunkKeys; base < end; base += kStride) {
      uint4 kr[2][kPairs];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t off = row_of(min(base + 8 * e + g, last));
#pragma unroll
        for (int j = 0; j < kPairs; ++j) kr[e][j] = load_kv8(k_base + off + 32 * j + 8 * c);
      }
      uint4 vr[4][kHalves];  // keys 2c, 2c + 1, 2c + 8, 2c + 9; dims 64 h + 8 g .. + 7
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t off = row_of(min(base + 2 * c + (i & 1) + 8 * (i >> 1), last));
#pragma unroll
        for (int h = 0; h < kHalves; ++h) vr[i][h] = load_kv8(v_base + off + 64 * h + 8 * g);
      }
      if (ahead > 0) prefetch(base + ahead);
      chunk_math(base, kr, vr);
    }
  }

  // Merge the warps: row sums over the lanes of a row (kKeyRows: the heads' sums over their keys' lanes),
  // then shared memory.
  float* smem = reinterpret_cast<float*>(attn_smem);
  constexpr int kRowStride = HD + 4;
  float* red_ml = smem;                            // [W][16][2]
  float* red_o = smem + kMmaWarps * 16 * 2;        // [W][16][kRowStride]
  if constexpr (kForm == kKeyRows) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int off = 4; off < 32; off <<= 1) l[r] += __shfl_xor_sync(0xffffffffu, l[r], off);
    }
    if (g < 2) {  // lanes g = 0: heads 2c and 2c + 1; g = 1: rows past the group
      const int row = warp * 16 + 8 * g + 2 * c;
      red_ml[row * 2] = g == 0 ? m[0] : -FLT_MAX;
      red_ml[row * 2 + 1] = g == 0 ? l[0] : 0.0f;
      red_ml[(row + 1) * 2] = g == 0 ? m[1] : -FLT_MAX;
      red_ml[(row + 1) * 2 + 1] = g == 0 ? l[1] : 0.0f;
    }
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    if (c == 0) {
      red_ml[(warp * 16 + g) * 2] = m[0];
      red_ml[(warp * 16 + g) * 2 + 1] = l[0];
      red_ml[(warp * 16 + g + 8) * 2] = kCols ? -FLT_MAX : m[1];  // kHeadCols: rows past the group
      red_ml[(warp * 16 + g + 8) * 2 + 1] = kCols ? 0.0f : l[1];
    }
  }
  if constexpr (kCols) {
    // o[h][jj]: dims 64 h + 8 g + 2 jj ([0], [1]) and + 1 ([2], [3]) of rows (heads) 2c and 2c + 1.
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int d0 = 64 * h + 8 * g + 2 * jj;
        float* r0 = red_o + (warp * 16 + 2 * c) * kRowStride;
        float* r1 = r0 + kRowStride;
        *reinterpret_cast<float2*>(r0 + d0) = make_float2(o[h][jj][0], o[h][jj][2]);
        *reinterpret_cast<float2*>(r1 + d0) = make_float2(o[h][jj][1], o[h][jj][3]);
      }
    }
  } else {
    // o[h][j] holds rows g / g + 8, output columns 2c and 2c + 1 of MMA (h, j):
    // dims 64 h + 8 (2c) + j and 64 h + 8 (2c + 1) + j.
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int d0 = 64 * h + 16 * c + j;
        float* r0 = red_o + (warp * 16 + g) * kRowStride;
        float* r1 = red_o + (warp * 16 + g + 8) * kRowStride;
        r0[d0] = o[h][j][0];
        r0[d0 + 8] = o[h][j][1];
        r1[d0] = o[h][j][2];
        r1[d0 + 8] = o[h][j][3];
      }
    }
  }
  __syncthreads();

  const int64_t head0 = static_cast<int64_t>(kvh) * group;
  const int outputs = group * HD;
  if (active == 1) {
    // Each row's warp weights e^(m_w - M) / sum once (thread w * 16 + row), then 8 consecutive dims of a
    // row per thread: two float4 reads per warp and one 16-byte store.
    float* red_w = red_o + kMmaWarps * 16 * kRowStride;  // [W][16]
    if (threadIdx.x < kMmaWarps * 16) {
      const int w = threadIdx.x >> 4, row = threadIdx.x & 15;
      float mx = -FLT_MAX;
#pragma unroll
      for (int v = 0; v < kMmaWarps; ++v) mx = fmaxf(mx, red_ml[(v * 16 + row) * 2]);
      float sum = 0.0f;
#pragma unroll
      for (int v = 0; v < kMmaWarps; ++v) {
        sum += red_ml[(v * 16 + row) * 2 + 1] * exp2f(red_ml[(v * 16 + row) * 2] - mx);
      }
      red_w[w * 16 + row] = row < group ? exp2f(red_ml[(w * 16 + row) * 2] - mx) / sum : 0.0f;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < outputs / 8; i += blockDim.x) {
      const int row = i / (HD / 8), d = (i - row * (HD / 8)) * 8;
      float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int w = 0; w < kMmaWarps; ++w) {
        const float wt = red_w[w * 16 + row];
        const float4 a = *reinterpret_cast<const float4*>(red_o + (w * 16 + row) * kRowStride + d);
        const float4 b = *reinterpret_cast<const float4*>(red_o + (w * 16 + row) * kRowStride + d + 4);
        acc[0] += a.x * wt, acc[1] += a.y * wt, acc[2] += a.z * wt, acc[3] += a.w * wt;
        acc[4] += b.x * wt, acc[5] += b.y * wt, acc[6] += b.z * wt, acc[7] += b.w * wt;
      }
      *reinterpret_cast<uint4*>(p.out + t * p.out_row_stride + (head0 + row) * HD + d) =
          make_uint4(pack_bf16x2(acc[0], acc[1]), pack_bf16x2(acc[2], acc[3]), pack_bf16x2(acc[4], acc[5]),
                     pack_bf16x2(acc[6], acc[7]));
    }
    return;
  }
  for (int i = threadIdx.x; i < outputs; i += blockDim.x) {
    const int row = i / HD, d = i - row * HD;
    float mx = -FLT_MAX;
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w) mx = fmaxf(mx, red_ml[(w * 16 + row) * 2]);
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w) {
      const float wt = exp2f(red_ml[(w * 16 + row) * 2] - mx);
      sum += red_ml[(w * 16 + row) * 2 + 1] * wt;
      acc += red_o[(w * 16 + row) * kRowStride + d] * wt;
    }
    const int64_t at = (x * p.heads.num_heads + head0 + row) * p.num_splits + split;
    p.partial_out[at * HD + d] = acc;
    if (d == 0) {
      p.partial_ml[at * 2] = mx;
      p.partial_ml[at * 2 + 1] = sum;
    }
  }
  if (!last_split_to_arrive(p.split_counters + x * p.heads.num_kv_heads + kvh, active)) return;
  // Splits merged in split order, whichever finished last: each row's split
  // weights once into shared memory (all (row, split) maxima and sums
  // loaded at once), then each thread 8 dims of one row, its loads over
  // the splits independent of each other.
  float* wt_s = smem;                              // [group][kMaxAttentionSplits]
  float* sum_s = smem + 16 * kMaxAttentionSplits;  // [group]
  float* m_s = sum_s + 16;                         // [group][kMaxAttentionSplits]
  for (int i = threadIdx.x; i < group * active; i += blockDim.x) {
    const int row = i / active, sp = i - row * active;
    const int64_t at = (x * p.heads.num_heads + head0 + row) * p.num_splits + sp;
    m_s[row * kMaxAttentionSplits + sp] = __ldcg(p.partial_ml + at * 2);
    wt_s[row * kMaxAttentionSplits + sp] = __ldcg(p.partial_ml + at * 2 + 1);  // the sum, for now
  }
  __syncthreads();
  if (threadIdx.x < group) {
    const int row = threadIdx.x;
    float mx = -FLT_MAX;
    for (int sp = 0; sp < active; ++sp) mx = fmaxf(mx, m_s[row * kMaxAttentionSplits + sp]);
    float sum = 0.0f;
    for (int sp = 0; sp < active; ++sp) {
      const float wt = exp2f(m_s[row * kMaxAttentionSplits + sp] - mx);
      sum += wt_s[row * kMaxAttentionSplits + sp] * wt;
      wt_s[row * kMaxAttentionSplits + sp] = wt;
    }
    sum_s[row] = sum;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < outputs / 8; i += blockDim.x) {
    const int row = i / (HD / 8), d = (i - row * (HD / 8)) * 8;
    const float* wr = wt_s + row * kMaxAttentionSplits;
    const float* src = p.partial_out + ((x * p.heads.num_heads + head0 + row) * p.num_splits) * HD + d;
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 4
    for (int sp = 0; sp < active; ++sp) {
      const float4 a = __ldcg(reinterpret_cast<const float4*>(src + sp * HD));
      const float4 b = __ldcg(reinterpret_cast<const float4*>(src + sp * HD + 4));
      const float w = wr[sp];
      acc[0] += a.x * w, acc[1] += a.y * w, acc[2] += a.z * w, acc[3] += a.w * w;
      acc[4] += b.x * w, acc[5] += b.y * w, acc[6] += b.z * w, acc[7] += b.w * w;
    }
    bf16* out = p.out + t * p.out_row_stride + (head0 + row) * HD + d;
#pragma unroll
    for (int j = 0; j < 8; ++j) store_bf16(out + j, acc[j] / sum_s[row]);
  }
}

// Shared memory of the tensor-core form: the staged chunks, or (larger in the register form) the warps' merge.
template <int HD, typename Cache, bool kStaged>
constexpr size_t mma_smem_bytes() {
  constexpr size_t merge = sizeof(float) * kMmaWarps * 16 * (2 + HD + 4 + 1);  // red_ml, red_o, red_w
  constexpr size_t staged =
      kStaged ? sizeof(Cache) * kMmaWarps * kMmaStages * 2 * kChunkKeys * HD : 0;
  return merge > staged ? merge : staged;
}

// Whether two staged blocks (bf16 pool) fit in a multiprocessor's shared memory (sm_90's 228 KB at
// head_dim 128; not sm_80's 164 or sm_86 / sm_89's 100, where the register form keeps two blocks per SM).
template <int HD>
bool staged_fits() {
  static const bool fits = [] {
    int device = 0, per_sm = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) != cudaSuccess) {
      return false;
    }
    return 2 * (mma_smem_bytes<HD, bf16, true>() + 1024) <= static_cast<size_t>(per_sm);
  }();
  return fits;
}

template <int HD, typename Cache, bool kStaged, int kForm>
cudaError_t launch_mma(const PagedAttentionParams& p, dim3 grid, cudaStream_t stream, bool pdl) {
  constexpr size_t smem = mma_smem_bytes<HD, Cache, kStaged>();
  if (smem + 1024 > 48 * 1024) {  // the default limit counts the static shared memory too
    const cudaError_t e = allow_large_smem<mma_attention_kernel<HD, Cache, kStaged, kForm>>();
    if (e != cudaSuccess) return e;
  }
  return launch_kernel(mma_attention_kernel<HD, Cache, kStaged, kForm>, grid, dim3(32 * kMmaWarps), smem, stream,
                       pdl, p);
}

template <int HD, typename Cache, bool kStaged>
cudaError_t launch_mma(const PagedAttentionParams& p, dim3 grid, cudaStream_t stream, bool pdl) {
  if (!p.heads_as_columns || p.heads.num_heads > kMmaMaxColumnsGroup * p.heads.num_kv_heads) {
    return launch_mma<HD, Cache, kStaged, kHeadRows>(p, grid, stream, pdl);
  }
  return p.scores_transposed ? launch_mma<HD, Cache, kStaged, kKeyRows>(p, grid, stream, pdl)
                             : launch_mma<HD, Cache, kStaged, kHeadCols>(p, grid, stream, pdl);
}

template <int HD>
cudaError_t launch_mma(const PagedAttentionParams& p, dim3 grid, cudaStream_t stream, bool pdl) {
  if (p.planes.fp8()) return launch_mma<HD, fp8e4m3, false>(p, grid, stream, pdl);
  return p.stage_kv && staged_fits<HD>() ? launch_mma<HD, bf16, true>(p, grid, stream, pdl)
                                         : launch_mma<HD, bf16, false>(p, grid, stream, pdl);
}

}  // namespace

cudaError_t paged_attention_mma(const PagedAttentionParams& p, dim3 grid, cudaStream_t stream, bool pdl) {
  if (p.heads.head_dim != 64 && p.heads.head_dim != 128) return cudaErrorInvalidValue;
  return p.heads.head_dim == 64 ? launch_mma<64>(p, grid, stream, pdl) : launch_mma<128>(p, grid, stream, pdl);
}

}  // namespace tern::cuda
