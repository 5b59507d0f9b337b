// attention_batch_fast: the reference's split of units over the pool by K/V
// rows read, a unit being one kv head and a tile of up to kQueryTile
// consecutive tokens of one sequence (a prefill reads each K/V block once per
// tile, not once per token), attended by AVX2+FMA code (compiled for that ISA
// in the region below, entered only after checking the CPU). Scores: a block
// of K rows stays in L1 while every query vector of the tile (tokens x heads
// of the group) passes over it (six vectors at a time, two 8-lane dot
// products per 512-bit register, where the CPU has AVX-512: the same bits);
// softmax: a vectorized exp (degree-7
// polynomial after reduction by ln 2, within a few ulp of expf); P V: for
// each token of the tile in turn, each stopping at its own causal length,
// three 8-float slices of four heads' outputs in registers while a block of
// V rows passes (four 16-float slices where the CPU has AVX-512, in a region
// of its own: the same bits). A bf16 cache's rows are widened to fp32 a block
// at a time, into an L1-resident buffer the tile's vectors then read; an fp8
// cache's rows of a unit's kv head are dequantized into per-thread scratch
// first; the same code runs over either.
#include "backend/cpu/attention_fast.h"

#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "backend/cpu/exp_poly.h"

namespace tern::cpu {
namespace {

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma")

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// e^x for x <= 0 (scores minus their max); below -87 the result is 0.
inline __m256 exp_nonpositive(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.0f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(x, lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(exp_poly::kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(exp_poly::kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(exp_poly::kLn2Lo), r);
  __m256 p = _mm256_set1_ps(exp_poly::kTaylor[0]);
#pragma GCC unroll 8
  for (int i = 1; i < 8; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(exp_poly::kTaylor[i]));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

// Lane i of the result is the sum of a[i]'s lanes, pairwise:
// ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)).
inline __m128 hsum4(const __m256* a) {
  const __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  return _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
}

// Scores of R K rows (kr[0 .. R), key positions from j0) against H query
// vectors (qs, scores into ps[h][j]), R * H = 8 or 12 accumulators: each q
// slice is loaded once for the R rows, and twelve independent multiply-add
// chains (R = 4, H = 3) keep both FMA pipes busy past their latency; the dot
// products are summed across lanes four at a time.
template <int R, int H>
[[gnu::always_inline]] inline void qk_tile(const float* const (&qs)[H], float* const (&ps)[H], const float* const* kr,
                                           int64_t head_dim, int64_t j0, float scale) {
  static_assert(R * H % 4 == 0 && R * H <= 12);
  __m256 acc[R * H];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (int64_t d = 0; d < head_dim; d += 8) {
    __m256 kv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) kv[r] = _mm256_loadu_ps(kr[r] + d);
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) {
      const __m256 qv = _mm256_loadu_ps(qs[h] + d);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[h * R + r] = _mm256_fmadd_ps(qv, kv[r], acc[h * R + r]);
    }
  }
  // Accumulators i .. i + 3 are one vector's scores of 4 consecutive rows (R is 4 or 8).
  for (int i = 0; i < R * H; i += 4) {
    _mm_storeu_ps(ps[i / R] + j0 + i % R, _mm_mul_ps(hsum4(acc + i), _mm_set1_ps(scale)));
  }
}

// One score the plain way, for the K rows the tiles leave over: the same
// multiply-add chain per lane as qk_tile and the lanes summed in hsum4's
// order, so a score has the same bits whichever routine computes it (and so
// whichever other queries share the tile).
inline float qk_one(const float* qv, const float* kj, int64_t head_dim, float scale) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t d = 0; d < head_dim; d += 8) {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(qv + d), _mm256_loadu_ps(kj + d), acc);
  }
  const __m256 pairs = _mm256_hadd_ps(acc, acc);
  const __m256 quads = _mm256_hadd_ps(pairs, pairs);
  const __m128 sum = _mm_add_ss(_mm256_castps256_ps128(quads), _mm256_extractf128_ps(quads, 1));
  return _mm_cvtss_f32(_mm_mul_ss(sum, _mm_set_ss(scale)));
}

// out[g, d .. d + 8 * S) += sum_{j < rows} probs[g * stride + j] vr[j] for
// G heads, starting from zero when `first`: per V row, S slice loads and G
// broadcasts feed G * S multiply-adds (G = 4, S = 3: twelve independent
// chains in the sixteen registers). Each accumulator takes the rows in order,
// however the caller splits them into blocks or slices. The tiles and their
// dispatchers are always inlined: compiled on its own, pv_tile<4, 3> kept its
// accumulators on the stack (g++ 12).
template <int G, int S>
[[gnu::always_inline]] inline void pv_tile(const float* probs, int64_t stride, const float* const* vr, int64_t rows,
                                           int64_t head_dim, int64_t d, bool first, float* out) {
  __m256 acc[G][S];
  for (int g = 0; g < G; ++g) {
    for (int s = 0; s < S; ++s) {
      acc[g][s] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(out + g * head_dim + d + 8 * s);
    }
  }
  for (int64_t j = 0; j < rows; ++j) {
    const float* vj = vr[j] + d;
    __m256 vv[S];
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) vv[s] = _mm256_loadu_ps(vj + 8 * s);
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const __m256 p = _mm256_broadcast_ss(probs + g * stride + j);
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) acc[g][s] = _mm256_fmadd_ps(p, vv[s], acc[g][s]);
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int s = 0; s < S; ++s) _mm256_storeu_ps(out + g * head_dim + d + 8 * s, acc[g][s]);
  }
}

// pv_tile over the widest run of slices that fits: `slices` is 1 to 3.
template <int G>
[[gnu::always_inline]] inline void pv_slices(int64_t slices, const float* probs, int64_t stride, const float* const* vr,
                                             int64_t rows, int64_t head_dim, int64_t d, bool first, float* out) {
  switch (slices) {
    case 3:
      return pv_tile<G, 3>(probs, stride, vr, rows, head_dim, d, first, out);
    case 2:
      return pv_tile<G, 2>(probs, stride, vr, rows, head_dim, d, first, out);
    default:
      return pv_tile<G, 1>(probs, stride, vr, rows, head_dim, d, first, out);
  }
}

// P V of one V block for `heads` (4 or 1) query heads of one token, over all
// head_dim floats: out[g, :] (+)= sum_j probs[g * stride + j] vr[j] (from
// zero when `first`). Every output float takes the rows in order, so the
// bits do not depend on the slice width: the AVX2 and AVX-512 forms agree.
using PvFn = void (*)(const float* probs, int64_t stride, const float* const* vr, int64_t rows, int64_t head_dim,
                      int64_t heads, bool first, float* out);

void pv_avx2(const float* probs, int64_t stride, const float* const* vr, int64_t rows, int64_t head_dim,
             int64_t heads, bool first, float* out) {
  for (int64_t d = 0; d < head_dim;) {
    const int64_t slices = std::min<int64_t>(3, (head_dim - d) / 8);
    heads == 4 ? pv_slices<4>(slices, probs, stride, vr, rows, head_dim, d, first, out)
               : pv_slices<1>(slices, probs, stride, vr, rows, head_dim, d, first, out);
    d += 8 * slices;
  }
}

// probs[0 .. len) <- softmax(probs[0 .. len)) in place.
void softmax_row(float* p, int64_t len) {
  __m256 mv = _mm256_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 8 <= len; j += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(p + j));
  float max_score = hmax(mv);
  for (; j < len; ++j) max_score = std::max(max_score, p[j]);
  const __m256 m = _mm256_set1_ps(max_score);
  __m256 sv = _mm256_setzero_ps();
  for (j = 0; j + 8 <= len; j += 8) {
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(p + j), m));
    _mm256_storeu_ps(p + j, e);
    sv = _mm256_add_ps(sv, e);
  }
  if (j < len) {
    // The tail through the same exp, padded with -inf (e^-inf = 0 here).
    alignas(32) float tail[8];
    for (int i = 0; i < 8; ++i) tail[i] = j + i < len ? p[j + i] - max_score : -INFINITY;
    const __m256 e = exp_nonpositive(_mm256_load_ps(tail));
    _mm256_store_ps(tail, e);
    sv = _mm256_add_ps(sv, e);
    for (int i = 0; j + i < len; ++i) p[j + i] = tail[i];
  }
  const __m256 inv = _mm256_set1_ps(1.0f / hsum(sv));
  for (j = 0; j + 8 <= len; j += 8) _mm256_storeu_ps(p + j, _mm256_mul_ps(_mm256_loadu_ps(p + j), inv));
  for (; j < len; ++j) p[j] *= _mm256_cvtss_f32(inv);
}

// K rows per block of the score pass and V rows per block of the P V pass:
// a block is read from memory once and stays in L1 while every query vector
// of the tile passes over it. kKeyBlock is a multiple of 8 (qk_tile<8, 1>).
constexpr int64_t kKeyBlock = 16;
constexpr int64_t kValueBlock = 64;

// The query vectors of a tile, vector u being token u / group's head
// u % group, and their score rows.
struct TileVectors {
  const float* q;
  int64_t stride, group, head_dim;
  const int64_t* lens;
  float* probs;
  int64_t max_len;

  const float* query(int64_t u) const { return q + u / group * stride + u % group * head_dim; }
  float* scores(int64_t u) const { return probs + u * max_len; }
  int64_t len(int64_t u) const { return lens[u / group]; }
};

// Scores of vectors u .. u + H - 1 against a block's K rows from j0
// (krows[0] is row j0), up to the longest of their lengths: tiles of R rows,
// then one row at a time.
template <int R, int H>
[[gnu::always_inline]] inline void qk_block(const TileVectors& t, int64_t u, const float* const* krows, int64_t j0,
                                            float scale) {
  const float* qs[H];
  float* ps[H];
  int64_t len = 0;
  for (int h = 0; h < H; ++h) {
    qs[h] = t.query(u + h);
    ps[h] = t.scores(u + h);
    len = std::max(len, t.len(u + h));
  }
  const int64_t j1 = std::min(j0 + kKeyBlock, len);
  int64_t j = j0;
  for (; j + R <= j1; j += R) qk_tile<R, H>(qs, ps, krows + (j - j0), t.head_dim, j, scale);
  for (; j < j1; ++j) {
    for (int h = 0; h < H; ++h) ps[h][j] = qk_one(qs[h], krows[j - j0], t.head_dim, scale);
  }
}

// Rows j0..j1-1 of one kv head (kv_offset) of `t` for a block pass: pointers
// into an fp32 table, or, for a bf16 table, each row widened to fp32 (its
// bits shifted up 16: exact) into `wide` (the block's rows, head_dim floats
// each; L1-resident while every vector of the tile passes over them).
void block_rows(const KvRowTable& t, int64_t j0, int64_t j1, int64_t kv_offset, int64_t head_dim, float* wide,
                const float** rows) {
  if (!t.is_bf16()) {
    for (int64_t j = j0; j < j1; ++j) rows[j - j0] = t.row(j) + kv_offset;
    return;
  }
  for (int64_t j = j0; j < j1; ++j) {
    const uint16_t* src = t.row_bf16(j) + kv_offset;
    float* dst = wide + (j - j0) * head_dim;
    for (int64_t d = 0; d < head_dim; d += 8) {
      const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + d)));
      _mm256_storeu_ps(dst + d, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
    rows[j - j0] = dst;
  }
}

// qk_pairs (where the CPU has AVX-512): the scores of six vectors at a
// time, their slices interleaved by pairs in `pairs` (attend_tile_avx2
// fills it), with the bits of qk_block's.
using QkPairsFn = void (*)(const TileVectors& t, int64_t u, const float* const* krows, int64_t j0, float scale,
                           const float* pairs);

// One unit: tokens 0..n-1 of a query tile (q and out rows `stride` floats
// apart, `group` query heads of head_dim floats each from there), token i
// attending to K/V rows 0..lens[i]-1 at kv_offset. head_dim is a multiple of
// 8. probs holds n * group * max(lens) floats. Each output is computed in an
// order that depends only on its own length, head_dim and group: every
// score is one fixed multiply-add chain, each softmax runs over its own row
// and each P V accumulator takes its rows in order, so a token has the same
// bits in a tile as alone. `wide` holds kValueBlock * head_dim floats for a
// bf16 table's widened rows (block_rows); unused for fp32 tables. `pairs`
// holds n * group * head_dim floats for qk_pairs (nullptr: AVX2 alone).
void attend_tile_avx2(const float* q, int64_t stride, int64_t n, const int64_t* lens, const KvRowTable& k,
                      const KvRowTable& v, int64_t kv_offset, int64_t group, int64_t head_dim, float scale,
                      float* probs, float* out, PvFn pv, float* wide, QkPairsFn qk_pairs, float* pairs) {
  const int64_t max_len = *std::max_element(lens, lens + n);
  const TileVectors t{q, stride, group, head_dim, lens, probs, max_len};
  const int64_t vecs = n * group;
  // For qk_pairs: vectors 6s .. 6s + 5 as three pairs, each pair's 8 floats
  // of d then its second vector's, 16 floats per 8 dims.
  const int64_t paired = qk_pairs != nullptr ? vecs / 6 * 6 : 0;
  for (int64_t u = 0; u < paired; u += 2) {
    float* dst = pairs + u * head_dim;
    for (int64_t d = 0; d < head_dim; d += 8) {
      _mm256_storeu_ps(dst + 2 * d, _mm256_loadu_ps(t.query(u) + d));
      _mm256_storeu_ps(dst + 2 * d + 8, _mm256_loadu_ps(t.query(u + 1) + d));
    }
  }
  // Row addresses once per block (KvRowTable::row divides by the block size).
  const float* rows[std::max(kKeyBlock, kValueBlock)];
  for (int64_t j0 = 0; j0 < max_len; j0 += kKeyBlock) {
    block_rows(k, j0, std::min(j0 + kKeyBlock, max_len), kv_offset, head_dim, wide, rows);
    for (int64_t u = 0; u < vecs;) {
      if (u < paired) {
        qk_pairs(t, u, rows, j0, scale, pairs + u * head_dim);
        u += 6;
        continue;
      }
      const int64_t h = std::min<int64_t>(3, vecs - u);
      h == 3   ? qk_block<4, 3>(t, u, rows, j0, scale)
      : h == 2 ? qk_block<4, 2>(t, u, rows, j0, scale)
               : qk_block<8, 1>(t, u, rows, j0, scale);
      u += h;
    }
  }
  for (int64_t u = 0; u < vecs; ++u) softmax_row(t.scores(u), t.len(u));
  for (int64_t j0 = 0; j0 < max_len; j0 += kValueBlock) {
    block_rows(v, j0, std::min(j0 + kValueBlock, max_len), kv_offset, head_dim, wide, rows);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t block_rows = std::min(j0 + kValueBlock, lens[i]) - j0;
      if (block_rows <= 0) continue;
      for (int64_t g0 = 0; g0 < group;) {
        const int64_t heads = group - g0 >= 4 ? 4 : 1;
        pv(t.scores(i * group + g0) + j0, max_len, rows, block_rows, head_dim, heads, j0 == 0,
           out + i * stride + g0 * head_dim);
        g0 += heads;
      }
    }
  }
}

// Rows 0..len-1 of one kv head (kv_offset, head_dim) of an fp8 table, as
// e4m3 * scale in fp32, into `dst` (len * head_dim floats, contiguous);
// head_dim is a multiple of 8. Eight codes at a time, each value built from
// its bits as fp8_e4m3_to_f32 builds its table (normals rebiased, subnormals
// m * 2^-9, S.1111.111 NaN), so the values are the table's, bit for bit.
void dequantize_head(const KvRowTable& t, int64_t len, int64_t kv_offset, int64_t head_dim, float* dst) {
  const __m256i mag_bits = _mm256_set1_epi32(0x7f);  // all set: NaN
  const __m256i min_normal = _mm256_set1_epi32(0x08), rebias = _mm256_set1_epi32(120 << 23);
  const __m256 nan = _mm256_set1_ps(NAN), subnormal_unit = _mm256_set1_ps(1.0f / 512), scale = _mm256_set1_ps(t.scale);
  for (int64_t j = 0; j < len; ++j) {
    const uint8_t* src = t.row_fp8(j) + kv_offset;
    float* out = dst + j * head_dim;
    for (int64_t d = 0; d < head_dim; d += 8) {
      const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + d)));
      const __m256i mag = _mm256_and_si256(b, mag_bits);
      const __m256 normal = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(mag, 20), rebias));
      const __m256 subnormal = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), subnormal_unit);  // mag < 8 here
      __m256 x = _mm256_blendv_ps(normal, subnormal, _mm256_castsi256_ps(_mm256_cmpgt_epi32(min_normal, mag)));
      x = _mm256_blendv_ps(x, nan, _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, mag_bits)));
      x = _mm256_or_ps(x, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_andnot_si256(mag_bits, b), 24)));
      _mm256_storeu_ps(out + d, _mm256_mul_ps(x, scale));
    }
  }
}

#pragma GCC pop_options

// P V on AVX-512: 16-float slices, four of them (64 floats of four heads:
// sixteen accumulators) per pass over a block's rows; a head_dim that is
// not a multiple of 16 ends with the AVX2 form's 8-float slice.
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
// g++ 12's AVX-512 intrinsics fill don't-care lanes from _mm512_undefined_*,
// which it then reports as maybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

template <int G, int S>
[[gnu::always_inline]] inline void pv_tile16(const float* probs, int64_t stride, const float* const* vr, int64_t rows,
                                             int64_t head_dim, int64_t d, bool first, float* out) {
  __m512 acc[G][S];
  for (int g = 0; g < G; ++g) {
    for (int s = 0; s < S; ++s) {
      acc[g][s] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out + g * head_dim + d + 16 * s);
    }
  }
  for (int64_t j = 0; j < rows; ++j) {
    const float* vj = vr[j] + d;
    __m512 vv[S];
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) vv[s] = _mm512_loadu_ps(vj + 16 * s);
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const __m512 p = _mm512_set1_ps(probs[g * stride + j]);
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) acc[g][s] = _mm512_fmadd_ps(p, vv[s], acc[g][s]);
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int s = 0; s < S; ++s) _mm512_storeu_ps(out + g * head_dim + d + 16 * s, acc[g][s]);
  }
}

template <int G>
[[gnu::always_inline]] inline void pv_slices16(int64_t slices, const float* probs, int64_t stride,
                                               const float* const* vr, int64_t rows, int64_t head_dim, int64_t d,
                                               bool first, float* out) {
  switch (slices) {
    case 4:
      return pv_tile16<G, 4>(probs, stride, vr, rows, head_dim, d, first, out);
    case 3:
      return pv_tile16<G, 3>(probs, stride, vr, rows, head_dim, d, first, out);
    case 2:
      return pv_tile16<G, 2>(probs, stride, vr, rows, head_dim, d, first, out);
    default:
      return pv_tile16<G, 1>(probs, stride, vr, rows, head_dim, d, first, out);
  }
}

// Scores of 4 K rows against three pairs of query vectors (pairs: see
// attend_tile_avx2), each accumulator a pair's two 8-lane chains for one
// row (the row's 8 floats of d broadcast to both halves): lane i of each
// half takes q[d + i] k[d + i] over d in order, as qk_tile's, and the halves
// are summed by hsum4 as qk_tile's are, so every score has qk_tile's bits
// with half the multiply-add instructions.
[[gnu::always_inline]] inline void qk_tile_pairs(const float* pairs, float* const (&ps)[6], const float* const* kr,
                                                 int64_t head_dim, int64_t j0, float scale) {
  constexpr int R = 4;
  __m512 acc[3][R];
  for (auto& a : acc) {
    for (auto& r : a) r = _mm512_setzero_ps();
  }
  for (int64_t d = 0; d < head_dim; d += 8) {
    __m512 kv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      kv[r] = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(kr[r] + d))));
    }
#pragma GCC unroll 3
    for (int p = 0; p < 3; ++p) {
      const __m512 qv = _mm512_loadu_ps(pairs + (p * head_dim + d) * 2);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[p][r] = _mm512_fmadd_ps(qv, kv[r], acc[p][r]);
    }
  }
  const __m128 sc = _mm_set1_ps(scale);
  for (int p = 0; p < 3; ++p) {
    __m256 lo[R], hi[R];
    for (int r = 0; r < R; ++r) {
      lo[r] = _mm512_castps512_ps256(acc[p][r]);
      hi[r] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p][r]), 1));
    }
    _mm_storeu_ps(ps[2 * p] + j0, _mm_mul_ps(hsum4(lo), sc));
    _mm_storeu_ps(ps[2 * p + 1] + j0, _mm_mul_ps(hsum4(hi), sc));
  }
}

// qk_block for six vectors (QkPairsFn): tiles of 4 rows, then one row at a time.
void qk_pairs_avx512(const TileVectors& t, int64_t u, const float* const* krows, int64_t j0, float scale,
                     const float* pairs) {
  float* ps[6];
  int64_t len = 0;
  for (int h = 0; h < 6; ++h) {
    ps[h] = t.scores(u + h);
    len = std::max(len, t.len(u + h));
  }
  const int64_t j1 = std::min(j0 + kKeyBlock, len);
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) qk_tile_pairs(pairs, ps, krows + (j - j0), t.head_dim, j, scale);
  for (; j < j1; ++j) {
    for (int h = 0; h < 6; ++h) ps[h][j] = qk_one(t.query(u + h), krows[j - j0], t.head_dim, scale);
  }
}

void pv_avx512(const float* probs, int64_t stride, const float* const* vr, int64_t rows, int64_t head_dim,
               int64_t heads, bool first, float* out) {
  int64_t d = 0;
  while (head_dim - d >= 16) {
    const int64_t slices = std::min<int64_t>(4, (head_dim - d) / 16);
    heads == 4 ? pv_slices16<4>(slices, probs, stride, vr, rows, head_dim, d, first, out)
               : pv_slices16<1>(slices, probs, stride, vr, rows, head_dim, d, first, out);
    d += 16 * slices;
  }
  if (d < head_dim) {
    heads == 4 ? pv_slices<4>(1, probs, stride, vr, rows, head_dim, d, first, out)
               : pv_slices<1>(1, probs, stride, vr, rows, head_dim, d, first, out);
  }
}

#pragma GCC diagnostic pop
#pragma GCC pop_options

bool cpu_has_avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

#endif

std::vector<float>& thread_probs() {
  thread_local std::vector<float> probs;
  return probs;
}

std::vector<float>& thread_kv_rows() {
  thread_local std::vector<float> rows;
  return rows;
}

std::vector<float>& thread_wide_rows() {
  thread_local std::vector<float> rows;
  return rows;
}

std::vector<float>& thread_query_pairs() {
  thread_local std::vector<float> pairs;
  return pairs;
}

// Most bytes of dequantized K and V one unit may take per thread; longer
// contexts read an fp8 cache through the reference.
constexpr int64_t kMaxFp8ScratchBytes = int64_t{64} << 20;

// Tokens of one sequence attended together per pass over their K/V rows (a
// prefill's rows are read once per tile instead of once per token). The
// tiles of a sequence start at its first token, whatever else is in the call.
constexpr int64_t kQueryTile = 4;

}  // namespace

void attention_batch_fast(ThreadPool& pool, const float* q, std::span<const int64_t> positions,
                          std::span<const AttentionSequence> seqs, const AttentionShape& shape, float* out) {
  attention_batch_fast_isa(pool, q, positions, seqs, shape, out, CpuIsa::kAvx512);
}

void attention_batch_fast_isa(ThreadPool& pool, const float* q, std::span<const int64_t> positions,
                              std::span<const AttentionSequence> seqs, const AttentionShape& shape, float* out,
                              CpuIsa max_isa) {
  (void)max_isa;  // used only where the ISA files are compiled
#if defined(__x86_64__) && defined(__GNUC__)
  const bool fast = cpu_has_avx2_fma() && shape.head_dim % 8 == 0;
#else
  const bool fast = false;
#endif
  if (!fast) {
    attention_batch(pool, q, positions, seqs, shape, out);
    return;
  }
#if defined(__x86_64__) && defined(__GNUC__)
  const int64_t head_dim = shape.head_dim;
  const int64_t q_dim = shape.num_heads * head_dim;
  const int64_t group = shape.num_heads / shape.num_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));

  // A unit is one query tile and one kv head, costed by the K/V rows its
  // tokens attend to; the units are cut into a few contiguous runs of about
  // equal cost per thread, which the pool's threads claim.
  const auto [total_cost, max_len] = attention_cost(positions, seqs, shape.num_kv_heads);
  if (total_cost == 0) return;
  const bool fp8 = std::any_of(seqs.begin(), seqs.end(), [](const AttentionSequence& s) { return s.k.is_fp8(); });
  const bool bf16 = std::any_of(seqs.begin(), seqs.end(), [](const AttentionSequence& s) { return s.k.is_bf16(); });
  if (fp8 && 2 * max_len * head_dim * static_cast<int64_t>(sizeof(float)) > kMaxFp8ScratchBytes) {
    attention_batch(pool, q, positions, seqs, shape, out);
    return;
  }
  const int64_t parts = pool.num_threads() * ThreadPool::kChunksPerThread;
  // P V and the scores on AVX-512 where the CPU has it (the same bits as
  // AVX2). The scores keep 8-lane sums, two dot products a register: 16-lane
  // sums measured slower (their lane sums take a larger share of a 128-float
  // dot product) and have other bits.
  const bool avx512 = std::min(max_isa, best_cpu_isa()) >= CpuIsa::kAvx512;
  const PvFn pv = avx512 ? pv_avx512 : pv_avx2;
  const QkPairsFn qk_pairs = avx512 ? qk_pairs_avx512 : nullptr;
  pool.parallel_for(parts, 1, [&](int64_t part_begin, int64_t part_end) {
    std::vector<float>& probs = thread_probs();
    if (probs.size() < static_cast<size_t>(kQueryTile * group * max_len)) {
      probs.resize(static_cast<size_t>(kQueryTile * group * max_len));
    }
    std::vector<float>& kv_rows = thread_kv_rows();
    if (fp8 && kv_rows.size() < static_cast<size_t>(2 * max_len * head_dim)) {
      kv_rows.resize(static_cast<size_t>(2 * max_len * head_dim));
    }
    std::vector<float>& wide_rows = thread_wide_rows();
    if (bf16 && wide_rows.size() < static_cast<size_t>(kValueBlock * head_dim)) {
      wide_rows.resize(static_cast<size_t>(kValueBlock * head_dim));
    }
    std::vector<float>& pairs = thread_query_pairs();
    if (qk_pairs != nullptr && pairs.size() < static_cast<size_t>(kQueryTile * group * head_dim)) {
      pairs.resize(static_cast<size_t>(kQueryTile * group * head_dim));
    }
    int64_t cost_before = 0;
    for (const AttentionSequence& seq : seqs) {
      const int64_t seq_end = seq.first_token + seq.num_tokens;
      for (int64_t r = seq.first_token; r < seq_end; r += kQueryTile) {
        const int64_t n = std::min(kQueryTile, seq_end - r);
        int64_t lens[kQueryTile], cost = 0;
        for (int64_t i = 0; i < n; ++i) {
          lens[i] = positions[static_cast<size_t>(r + i)] + 1;
          cost += lens[i];
        }
        const int64_t tile_len = *std::max_element(lens, lens + n);
        for (int64_t kvh = 0; kvh < shape.num_kv_heads; ++kvh) {
          const int64_t part = cost_before * parts / total_cost;
          cost_before += cost;
          if (part < part_begin || part >= part_end) continue;
          const int64_t offset = kvh * group * head_dim;
          if (seq.k.is_fp8()) {
            float* k_rows = kv_rows.data();
            float* v_rows = k_rows + tile_len * head_dim;
            dequantize_head(seq.k, tile_len, kvh * head_dim, head_dim, k_rows);
            dequantize_head(seq.v, tile_len, kvh * head_dim, head_dim, v_rows);
            const float* k_block[1] = {k_rows};
            const float* v_block[1] = {v_rows};
            const KvRowTable k{k_block, tile_len, head_dim, {}, 1.0f, {}}, v{v_block, tile_len, head_dim, {}, 1.0f, {}};
            attend_tile_avx2(q + r * q_dim + offset, q_dim, n, lens, k, v, 0, group, head_dim, scale, probs.data(),
                             out + r * q_dim + offset, pv, nullptr, qk_pairs, pairs.data());
            continue;
          }
          attend_tile_avx2(q + r * q_dim + offset, q_dim, n, lens, seq.k, seq.v, kvh * head_dim, group, head_dim, scale,
                           probs.data(), out + r * q_dim + offset, pv, wide_rows.data(), qk_pairs, pairs.data());
        }
      }
    }
  });
#endif
}

}  // namespace tern::cpu
