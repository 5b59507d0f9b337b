// Paged GQA attention for query tiles of prefill chunks (paged_attention_prefill):
// consecutive tokens of one sequence share each chunk of K/V in shared memory.
#include <cfloat>

#include "backend/cuda/device_utils.cuh"

namespace tern::cuda {
namespace {

// Prefill form: a block serves a tile of consecutive tokens of one sequence
// and one kv head. Warp w takes 16 / group of the tile's tokens, their
// group q heads being its 16 MMA rows (row r: token r / group, head
// r % group), so every row does work. The block walks the keys up to its
// last token's position in 64-key chunks, copied into shared memory with
// cp.async one chunk ahead of the one being computed (two stages), so the
// loads of chunk n + 1 run under chunk n's math. Each warp takes a chunk in
// 32-key rounds (S for 32 keys, one softmax rescale, then P V), skipping
// rounds past all of its rows' positions and masking keys past each row's
// own position (causal). A row's running maximum moves only when a round's
// passes it by more than kRescaleSlack (the weights then stay below
// 2^kRescaleSlack), so the output's rescale, 64 products a lane at
// head_dim 128, runs in few rounds instead of nearly all; the final
// division by the row's sum is the same whichever maximum the weights were
// taken against. No splits and no merge: each warp owns its rows from start
// to end. Blocks take the tiles last first, so a sequence's
// longest tiles start first. An FP8 E4M3 pool is read with plain 8-byte
// loads converted (exactly) to bf16 as they are stored to shared memory,
// so everything after the copy is the bf16 kernel.
constexpr int kPrefillRoundKeys = 32;  // keys per online-softmax round (a chunk holds 32 or 64 keys: Keys)
constexpr int kPrefillRowsPerWarp = 16;
constexpr int kPrefillWarps = 4;
constexpr int kPrefillThreads = 32 * kPrefillWarps;
constexpr float kRescaleSlack = 8.0f;  // log2 units: weights up to 256 before a row's maximum moves

// mma_rows_rescale with the slack above: the rows' maxima over the 4 lanes of a row, and a row's
// factor 1 unless its maximum moved.
__device__ __forceinline__ void lazy_rows_rescale(float (&row_max)[2], float (&m)[2], float (&l)[2],
                                                  float (&corr)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_max[r] = quad_max(row_max[r]);
    // From -FLT_MAX (no key yet) any finite maximum moves it; a row with every key masked stays.
    const bool moves = row_max[r] > m[r] + kRescaleSlack;
    corr[r] = moves ? fast_exp2(m[r] - row_max[r]) : 1.0f;
    m[r] = moves ? row_max[r] : m[r];
    l[r] *= corr[r];
  }
}

// V's rows in a stage: 16-byte units XOR-swizzled by the row's low 3 bits, so the 8 rows each
// ldmatrix.trans matrix names (8 consecutive keys at one unit) hit distinct banks.
__device__ __forceinline__ int vt_unit(int row, int unit) { return unit ^ (row & 7); }

template <int HD, int Keys>
__host__ __device__ constexpr size_t prefill_smem_bytes() {
  return sizeof(bf16) * 2 * 2 * Keys * HD;  // K and V, two stages
}

// Registers for three blocks per SM. At head_dim 64 four would fit (128
// registers, no spills, against 140), not measured on a model of that
// head_dim; at 128 four would spill.
template <int HD, int Keys, typename Cache>
__global__ void __launch_bounds__(kPrefillThreads, 3)
    mma_prefill_kernel(PagedAttentionParams p, const int32_t* tiles, int num_tiles) {
  constexpr int kPrefillKeys = Keys;  // keys per shared-memory chunk (one stage)
  constexpr int kPairs = HD / 32;
  constexpr int kHalves = HD / 64;
  constexpr int kUnits = HD / 8;               // 16-byte units per K or V row
  constexpr int kStage = kPrefillKeys * HD;    // bf16 of one stage's K (or V)
  constexpr int kRounds = kPrefillKeys / kPrefillRoundKeys;
  extern __shared__ uint4 prefill_smem[];
  bf16* k_s = reinterpret_cast<bf16*>(prefill_smem);  // [stage][key][HD]
  bf16* v_s = k_s + 2 * kStage;
  const int tile = num_tiles - 1 - static_cast<int>(blockIdx.x);
  // The thread's rotary frequency (rope_q): every pair it rotates below is pair threadIdx.x % (HD / 2).
  static_assert(kPrefillThreads % (HD / 2) == 0, "a thread's rotations share one frequency");
  const float inv_freq = p.rope_q ? p.places.inv_freq[threadIdx.x % (HD / 2)] : 0.0f;
  // The tile's record (kernels.h): one round trip before the first chunk's table entries.
  const int first = tiles[4 * tile], count = tiles[4 * tile + 1];
  const int end = tiles[4 * tile + 2];  // keys the tile's last token sees
  const int32_t* table = p.tables.block_tables + tiles[4 * tile + 3];
  const int kvh = blockIdx.y;
  // The group divides the 16 MMA rows (prefill_tile_tokens), so it is a power of two: the row
  // <-> (token, head) maps below are shifts, not divisions.
  const int group_shift = __ffs(p.heads.num_heads / p.heads.num_kv_heads) - 1;
  const int group_mask = (1 << group_shift) - 1;
  const int per_warp = kPrefillRowsPerWarp >> group_shift;  // tokens per warp
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int kv_dim = p.heads.num_kv_heads * HD;
  const Cache* k_head = k_plane<Cache>(p.planes) + kvh * HD;
  const Cache* v_head = v_plane<Cache>(p.planes) + kvh * HD;
  // A key's slot (int32: the model keeps block * block_size + offset below 2^31): shifts when the
  // block size is a power of two (the default 16), else a division.
  const int bs = p.tables.block_size;
  const int block_shift = (bs & (bs - 1)) == 0 ? __ffs(bs) - 1 : -1;

  // Keys base .. base + 63 into a stage (past the end: the last key, masked below), as one cp.async group.
  // Thread i copies unit i % kUnits of rows i / kUnits + kRowsPerPass * n; the swizzles repeat every 8 rows,
  // so its shared-memory offsets are the same in every pass.
  constexpr int kRowsPerPass = kPrefillThreads / kUnits;
  static_assert(kRowsPerPass % 8 == 0, "a pass must keep each thread's swizzled units");
  const int lrow = static_cast<int>(threadIdx.x) / kUnits, lunit = static_cast<int>(threadIdx.x) % kUnits;
  const int k_dst = lrow * HD + 8 * k_unit(lrow, lunit), v_dst = lrow * HD + 8 * vt_unit(lrow, lunit);
  constexpr int kPasses = kPrefillKeys / kRowsPerPass;
  auto load_chunk = [&](int base, int stage) {
    bf16* ks = k_s + stage * kStage + k_dst;
    bf16* vs = v_s + stage * kStage + v_dst;
    // Every pass's slot first: the block table's loads go out together, not each behind the copies
    // before it (cp.async's asm orders the loads around it).
    const auto key_of = [&](int n) { return min(base + lrow + n * kRowsPerPass, end - 1); };
    int slots[kPasses];
    if (block_shift >= 0) {
#pragma unroll
      for (int n = 0; n < kPasses; ++n) {
        slots[n] = (table[key_of(n) >> block_shift] << block_shift) | (key_of(n) & (bs - 1));
      }
    } else {
#pragma unroll
      for (int n = 0; n < kPasses; ++n) slots[n] = table[key_of(n) / bs] * bs + key_of(n) % bs;
    }
#pragma unroll
    for (int n = 0; n < kPasses; ++n) {
      const int64_t off = static_cast<int64_t>(slots[n]) * kv_dim + 8 * lunit;
      if constexpr (sizeof(Cache) == 1) {
        *reinterpret_cast<uint4*>(ks + n * kRowsPerPass * HD) = load_kv8(k_head + off);
        *reinterpret_cast<uint4*>(vs + n * kRowsPerPass * HD) = load_kv8(v_head + off);
      } else {
        copy_async16(ks + n * kRowsPerPass * HD, k_head + off);
        copy_async16(vs + n * kRowsPerPass * HD, v_head + off);
      }
    }
    commit_async();
  };

  // Rows g and g + 8 of this warp: their token (or -1 past the tile) and position.
  int tok[2], pos[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h, local = warp * per_warp + (r >> group_shift);
    tok[h] = local < count ? first + local : -1;
    pos[h] = tok[h] >= 0 ? end - count + local : -1;  // consecutive positions, the last end - 1
  }
  // The warp's last and first positions (-1 where a row is past the tile: every round then masks).
  int warp_max = max(pos[0], pos[1]), warp_min = min(pos[0], pos[1]);
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    warp_max = max(warp_max, __shfl_xor_sync(0xffffffffu, warp_max, o));
    warp_min = min(warp_min, __shfl_xor_sync(0xffffffffu, warp_min, o));
  }

  uint4 qa[kPairs], qb[kPairs];
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const bf16* q0 = p.q + static_cast<int64_t>(tok[0]) * p.q_row_stride +
                     ((kvh << group_shift) + (g & group_mask)) * HD + 32 * j + 8 * c;
    const bf16* q1 = p.q + static_cast<int64_t>(tok[1]) * p.q_row_stride +
                     ((kvh << group_shift) + ((g + 8) & group_mask)) * HD + 32 * j + 8 * c;
    qa[j] = tok[0] >= 0 ? *reinterpret_cast<const uint4*>(q0) : make_uint4(0, 0, 0, 0);
    qb[j] = tok[1] >= 0 ? *reinterpret_cast<const uint4*>(q1) : make_uint4(0, 0, 0, 0);
  }
  // The first chunk after q's loads are out (its copies are ordered after every load before them), so
  // q's round trip and the block table's overlap.
  load_chunk(0, 0);
  if (p.rope_q) {
    // q as the q|k|v GEMM wrote it: each row rotated here exactly as rope_store_kv would rotate it
    // (kernels.h). The tile's cos/sin (at most 16 tokens: 64 * HD bytes) go into stage 1's K space,
    // which nothing uses before the loop's first pass refills it.
    static_assert(16 * (HD / 2) * sizeof(float2) <= kStage * sizeof(bf16), "the rotations fit in a stage's K");
    float2* rot = reinterpret_cast<float2*>(k_s + kStage);  // [local token][HD / 2]: (cos, sin)
    for (int i = static_cast<int>(threadIdx.x); i < count * (HD / 2); i += kPrefillThreads) {
      const int local = i / (HD / 2);
      float sn, cs;
      sincosf(inv_freq * static_cast<float>(end - count + local), &sn, &cs);
      rot[i] = make_float2(cs, sn);
    }
    __syncthreads();
    const auto rotate = [&](uint4 (&q)[kPairs], int t) {  // rows past the tile (t < 0) stay zero
      if (t < 0) return;
      const float2* r = rot + (t - first) * (HD / 2);
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {  // word w of unit j is pair 16 j + 4 c + w
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          uint32_t* word = &q[j].x + w;
          const float2 cs = r[16 * j + 4 * c + w];
          *word = rope_pair(*word, cs.x, cs.y);
        }
      }
    };
    rotate(qa, tok[0]);
    rotate(qb, tok[1]);
    __syncthreads();  // every rotation is read before the loop refills stage 1
  }
  const float scale = rsqrtf(static_cast<float>(HD)) * 1.44269504088896340736f;

  float m[2] = {-FLT_MAX, -FLT_MAX}, l[2] = {0.0f, 0.0f};
  float o[kHalves][8][4];
#pragma unroll
  for (int h = 0; h < kHalves; ++h) {
#pragma unroll
    for (int j = 0; j < 8; ++j) o[h][j][0] = o[h][j][1] = o[h][j][2] = o[h][j][3] = 0.0f;
  }

  // Each lane's offsets into a stage, the same in every round: K row 8 e + g's unit 4 j + c sits at
  // unit (4 j + c) ^ ((g & 1) << 2) (k_unit); V's ldmatrix row (lane & 7) + 8 ((lane >> 3) & 1) at
  // unit (2 tp + (lane >> 4)) ^ (lane & 7) (vt_unit), whose low 3 bits take 4 values over tp.
  int k_off[kPairs];
#pragma unroll
  for (int j = 0; j < kPairs; ++j) k_off[j] = g * HD + 8 * k_unit(g, 4 * j + c);
  const int v_row = (lane & 7) + 8 * ((lane >> 3) & 1);
  int v_off[4];
#pragma unroll
  for (int u = 0; u < 4; ++u) v_off[u] = v_row * HD + 8 * vt_unit(v_row, 2 * u + (lane >> 4));

  int stage = 0;
  for (int base = 0; base < end; base += kPrefillKeys, stage ^= 1) {
    if (base + kPrefillKeys < end) {
      load_chunk(base + kPrefillKeys, stage ^ 1);  // its stage was freed by the barrier ending the last pass
      wait_async<1>();
    } else {
      wait_async<0>();
    }
    __syncthreads();  // every thread's copies of this chunk have landed
    const bf16* ks = k_s + stage * kStage;
    const bf16* vs = v_s + stage * kStage;
#pragma unroll 1
    for (int round = 0; round < kRounds; ++round) {
      const int r0 = round * kPrefillRoundKeys, k0 = base + r0;
      if (k0 > warp_max) break;  // every row of this warp is before these keys
      // s[e]: keys k0 + 8 e + 2c, + 1 of rows g (0, 1) and g + 8 (2, 3); the four 8-key groups' MMA chains interleaved.
      constexpr int kGroups = kPrefillRoundKeys / 8;
      float s[kGroups][4];
#pragma unroll
      for (int e = 0; e < kGroups; ++e) s[e][0] = s[e][1] = s[e][2] = s[e][3] = 0.0f;
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {
#pragma unroll
        for (int e = 0; e < kGroups; ++e) {
          const uint4 kr = *reinterpret_cast<const uint4*>(ks + (r0 + 8 * e) * HD + k_off[j]);
          mma_bf16(s[e], qa[j].x, qb[j].x, qa[j].y, qb[j].y, kr.x, kr.y);
          mma_bf16(s[e], qa[j].z, qb[j].z, qa[j].w, qb[j].w, kr.z, kr.w);
        }
      }
      // Scores stay unscaled (the scale goes into exp2's argument); only a round that reaches past
      // some row's position masks (causal).
      float row_max[2] = {-INFINITY, -INFINITY};
      if (k0 + kPrefillRoundKeys - 1 > warp_min) {
#pragma unroll
        for (int e = 0; e < kGroups; ++e) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int key = k0 + 8 * e + 2 * c + (i & 1);
            if (key > pos[i >> 1]) s[e][i] = -INFINITY;
          }
        }
      }
#pragma unroll
      for (int e = 0; e < kGroups; ++e) {
#pragma unroll
        for (int i = 0; i < 4; ++i) row_max[i >> 1] = fmaxf(row_max[i >> 1], s[e][i]);
      }
      row_max[0] *= scale;
      row_max[1] *= scale;
      float corr[2];
      lazy_rows_rescale(row_max, m, l, corr);
      uint32_t pa[kGroups / 2][4];  // P of each 16 keys as the A fragment: rows g / g + 8, keys 2c (+1), 8 + 2c (+1)
#pragma unroll
      for (int e = 0; e < kGroups; ++e) {
        float pr[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          pr[i] = fast_exp2(fmaf(s[e][i], scale, -m[i >> 1]));
          l[i >> 1] += pr[i];
        }
        pa[e >> 1][2 * (e & 1)] = pack_bf16x2(pr[0], pr[1]);
        pa[e >> 1][2 * (e & 1) + 1] = pack_bf16x2(pr[2], pr[3]);
      }
      mma_rows_scale(o, corr);
      // P V: ldmatrix.x4.trans gives the B fragments of two 8-dim tiles (2 tp, 2 tp + 1) for the half's 16
      // keys; lane l names row l % 8 of matrix l / 8 (keys 0-7 or 8-15, tile 2 tp or 2 tp + 1). Tile t = 8 h + j
      // accumulates in o[h][j]: dims 8 t + 2c, + 1 of rows g and g + 8.
#pragma unroll
      for (int half = 0; half < kGroups / 2; ++half) {
        const bf16* vh = vs + (r0 + 16 * half) * HD;
#pragma unroll
        for (int tp = 0; tp < HD / 16; ++tp) {
          uint32_t b[4];  // unit 2 tp + (lane >> 4) of the lane's row: 8 units past tp % 4's for tp >= 4
          ldmatrix_x4_trans(b, vh + v_off[tp & 3] + 64 * (tp >> 2));
          mma_bf16(o[tp >> 2][2 * (tp & 3)], pa[half][0], pa[half][1], pa[half][2], pa[half][3], b[0], b[1]);
          mma_bf16(o[tp >> 2][2 * (tp & 3) + 1], pa[half][0], pa[half][1], pa[half][2], pa[half][3], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with this stage before the next pass refills it
  }

  // Row sums over the 4 lanes of a row.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  // The rows go out through shared memory (the stages, free since the loop's last barrier): each lane's
  // pairs (dims 8 t + 2c, + 1 of row g + 8 r) as 4-byte stores into rows of HD + 8 bf16, which keeps a
  // store's 32 lanes on distinct banks, then the warp's 16 rows leave as 16-byte units (rows are
  // HD-aligned: out_row_stride is a multiple of HD).
  constexpr int kOutStride = HD + 8;
  static_assert(kPrefillWarps * kPrefillRowsPerWarp * kOutStride * sizeof(bf16) <= prefill_smem_bytes<HD, Keys>(),
                "the rows fit in the stages");
  bf16* rows = k_s + warp * kPrefillRowsPerWarp * kOutStride;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float inv = 1.0f / l[r];  // rows past the tile (l = 0) are never copied out
    bf16* row = rows + (g + 8 * r) * kOutStride + 2 * c;
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        *reinterpret_cast<uint32_t*>(row + 64 * h + 8 * j) = pack_bf16x2(o[h][j][2 * r] * inv, o[h][j][2 * r + 1] * inv);
      }
    }
  }
  __syncwarp();
  constexpr int kRowUnits = HD / 8;
#pragma unroll
  for (int i = lane; i < kPrefillRowsPerWarp * kRowUnits; i += 32) {
    const int row = i / kRowUnits, unit = i % kRowUnits;
    const int local = warp * per_warp + (row >> group_shift);
    if (local >= count) continue;
    const int head = (kvh << group_shift) + (row & group_mask);
    *reinterpret_cast<uint4*>(p.out + static_cast<int64_t>(first + local) * p.out_row_stride +
                              static_cast<int64_t>(head) * HD + 8 * unit) =
        *reinterpret_cast<const uint4*>(rows + row * kOutStride + 8 * unit);
  }
}

template <int HD, int Keys, typename Cache>
cudaError_t launch_prefill(const PagedAttentionParams& p, const int32_t* tiles, int64_t num_tiles,
                           cudaStream_t stream) {
  constexpr size_t smem = prefill_smem_bytes<HD, Keys>();
  if (smem + 1024 > 48 * 1024) {
    const cudaError_t e = allow_large_smem<mma_prefill_kernel<HD, Keys, Cache>>();
    if (e != cudaSuccess) return e;
  }
  const dim3 grid(static_cast<unsigned int>(num_tiles), static_cast<unsigned int>(p.heads.num_kv_heads));
  mma_prefill_kernel<HD, Keys, Cache><<<grid, kPrefillThreads, smem, stream>>>(p, tiles, static_cast<int>(num_tiles));
  return cudaGetLastError();
}

template <int HD, int Keys>
cudaError_t launch_prefill(const PagedAttentionParams& p, const int32_t* tiles, int64_t num_tiles,
                           cudaStream_t stream) {
  return p.planes.fp8() ? launch_prefill<HD, Keys, fp8e4m3>(p, tiles, num_tiles, stream)
                        : launch_prefill<HD, Keys, bf16>(p, tiles, num_tiles, stream);
}

}  // namespace

int prefill_tile_tokens(int num_heads, int num_kv_heads, int head_dim) {
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0 || (head_dim != 64 && head_dim != 128)) return 0;
  const int group = num_heads / num_kv_heads;
  if (group > kPrefillRowsPerWarp || kPrefillRowsPerWarp % group != 0) return 0;
  return kPrefillWarps * (kPrefillRowsPerWarp / group);
}

bool prefill_tiles_take_rope(int num_heads, int num_kv_heads, int head_dim) {
  const int tile = prefill_tile_tokens(num_heads, num_kv_heads, head_dim);
  return tile > 0 && tile <= 16;  // the tile's rotations fit in a 32-key stage's K
}

int prefill_chunk_keys(int head_dim, int smem_per_sm) {
  // Three blocks per multiprocessor (the kernel's register budget) with 64-key stages where they fit.
  const auto fits = [&](int keys) {
    return 3 * (static_cast<int64_t>(sizeof(bf16)) * 2 * 2 * keys * head_dim + 1024) <= smem_per_sm;
  };
  return fits(64) ? 64 : 32;
}

cudaError_t paged_attention_prefill(const PagedAttentionParams& p, const int32_t* tiles, int64_t num_tiles,
                                    cudaStream_t stream, int chunk_keys) {
  if (num_tiles <= 0) return cudaSuccess;
  if (prefill_tile_tokens(p.heads.num_heads, p.heads.num_kv_heads, p.heads.head_dim) == 0 || num_tiles > 0x7fffffff / 4 ||
      (chunk_keys != 32 && chunk_keys != 64)) {
    return cudaErrorInvalidValue;
  }
  if (p.rope_q && (p.places.inv_freq == nullptr ||
                   !prefill_tiles_take_rope(p.heads.num_heads, p.heads.num_kv_heads, p.heads.head_dim))) {
    return cudaErrorInvalidValue;
  }
  if (p.heads.head_dim == 64) {
    return chunk_keys == 64 ? launch_prefill<64, 64>(p, tiles, num_tiles, stream)
                            : launch_prefill<64, 32>(p, tiles, num_tiles, stream);
  }
  return chunk_keys == 64 ? launch_prefill<128, 64>(p, tiles, num_tiles, stream)
                          : launch_prefill<128, 32>(p, tiles, num_tiles, stream);
}

}  // namespace tern::cuda
