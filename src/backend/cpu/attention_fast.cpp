// attention_batch_fast: the reference's split of (token, kv head) units over
// the pool by K/V rows read, with one unit's `group` query heads attended by
// AVX2+FMA code (compiled for that ISA in the region below, entered only
// after checking the CPU). Scores: each K row is loaded once for all heads of
// the group; softmax: a vectorized exp (degree-7 polynomial after reduction by
// ln 2, within a few ulp of expf); P V: one 8-float slice of every head's
// output in registers while the V rows pass. An fp8 cache's rows of a unit's
// kv head are dequantized into per-thread scratch first, then the same code
// runs over them.
#include "backend/cpu/attention_fast.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/fp8_e4m3.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

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
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n ln2 in two steps (ln2's high part is exact in n * hi for |n| < 2^9).
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  // e^r, |r| <= ln2 / 2: Taylor to r^7 (error below 1e-8 relative).
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

// Lane i of the result is the sum of a[i]'s lanes.
inline __m256 hsum8(const __m256 (&a)[8]) {
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Scores of R K rows (from j0) against H query heads (from g0), R * H = 8:
// each K slice is loaded once for the H heads and each q slice once for the
// R rows, so a multiply-add costs 0.75 loads (R = 4) instead of two; the
// eight dot products are summed across lanes together.
template <int R, int H>
inline void qk_tile(const float* q, const KvRowTable& k, int64_t kv_offset, int64_t head_dim, int64_t len,
                    int64_t j0, int64_t g0, float scale, float* probs) {
  static_assert(R * H == 8);
  const float* kr[R];
  for (int r = 0; r < R; ++r) kr[r] = k.row(j0 + r) + kv_offset;
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (int64_t d = 0; d < head_dim; d += 8) {
    __m256 kv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) kv[r] = _mm256_loadu_ps(kr[r] + d);
#pragma GCC unroll 2
    for (int h = 0; h < H; ++h) {
      const __m256 qv = _mm256_loadu_ps(q + (g0 + h) * head_dim + d);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[h * R + r] = _mm256_fmadd_ps(qv, kv[r], acc[h * R + r]);
    }
  }
  alignas(32) float sums[8];
  _mm256_store_ps(sums, _mm256_mul_ps(hsum8(acc), _mm256_set1_ps(scale)));
  for (int h = 0; h < H; ++h) {
    for (int r = 0; r < R; ++r) probs[(g0 + h) * len + j0 + r] = sums[h * R + r];
  }
}

// out[g, d .. d + 8 * S) = sum_j probs[g, j] v_j for G heads: per V row, S
// slice loads and G broadcasts feed G * S multiply-adds.
template <int G, int S>
inline void pv_tile(const float* probs, int64_t len, const KvRowTable& v, int64_t kv_offset, int64_t head_dim,
                    int64_t d, float* out) {
  __m256 acc[G][S];
  for (int g = 0; g < G; ++g) {
    for (int s = 0; s < S; ++s) acc[g][s] = _mm256_setzero_ps();
  }
  for (int64_t j = 0; j < len; ++j) {
    const float* vj = v.row(j) + kv_offset + d;
    __m256 vv[S];
#pragma GCC unroll 2
    for (int s = 0; s < S; ++s) vv[s] = _mm256_loadu_ps(vj + 8 * s);
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const __m256 p = _mm256_broadcast_ss(probs + g * len + j);
#pragma GCC unroll 2
      for (int s = 0; s < S; ++s) acc[g][s] = _mm256_fmadd_ps(p, vv[s], acc[g][s]);
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int s = 0; s < S; ++s) _mm256_storeu_ps(out + g * head_dim + d + 8 * s, acc[g][s]);
  }
}

// One score the plain way: the K rows and heads the tiles leave over.
inline float qk_one(const float* qg, const float* kj, int64_t head_dim) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= head_dim; d += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qg + d), _mm256_loadu_ps(kj + d), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(qg + d + 8), _mm256_loadu_ps(kj + d + 8), a1);
  }
  if (d < head_dim) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qg + d), _mm256_loadu_ps(kj + d), a0);
  return hsum(_mm256_add_ps(a0, a1));
}

// One unit: `group` query heads (q, out: group * head_dim floats) against
// K/V rows 0..len-1 at kv_offset. head_dim is a multiple of 8. A score's
// summation order depends only on len, head_dim and group, never on the
// other work in the call.
void attend_group_avx2(const float* q, int64_t len, const KvRowTable& k, const KvRowTable& v, int64_t kv_offset,
                       int64_t group, int64_t head_dim, float scale, float* probs, float* out) {
  const int64_t tiled_rows = len / 8 * 8;  // rows in tiles of 4 (pairs of heads) or 8 (one head)
  int64_t g = 0;
  for (; g + 2 <= group; g += 2) {
    for (int64_t j = 0; j < tiled_rows; j += 4) qk_tile<4, 2>(q, k, kv_offset, head_dim, len, j, g, scale, probs);
  }
  if (g < group) {
    for (int64_t j = 0; j < tiled_rows; j += 8) qk_tile<8, 1>(q, k, kv_offset, head_dim, len, j, g, scale, probs);
  }
  for (int64_t j = tiled_rows; j < len; ++j) {
    const float* kj = k.row(j) + kv_offset;
    for (int64_t h = 0; h < group; ++h) probs[h * len + j] = qk_one(q + h * head_dim, kj, head_dim) * scale;
  }
  for (int64_t g = 0; g < group; ++g) {
    float* p = probs + g * len;
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
  for (int64_t g0 = 0; g0 < group;) {
    const int64_t heads = group - g0 >= 4 ? 4 : 1;
    const float* pg = probs + g0 * len;
    float* og = out + g0 * head_dim;
    int64_t d = 0;
    if (heads == 4) {
      for (; d + 16 <= head_dim; d += 16) pv_tile<4, 2>(pg, len, v, kv_offset, head_dim, d, og);
      if (d < head_dim) pv_tile<4, 1>(pg, len, v, kv_offset, head_dim, d, og);
    } else {
      for (; d + 16 <= head_dim; d += 16) pv_tile<1, 2>(pg, len, v, kv_offset, head_dim, d, og);
      if (d < head_dim) pv_tile<1, 1>(pg, len, v, kv_offset, head_dim, d, og);
    }
    g0 += heads;
  }
}

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

// Rows 0..len-1 of one kv head (kv_offset, head_dim) of an fp8 table, as
// e4m3 * scale in fp32, into `dst` (len * head_dim floats, contiguous).
void dequantize_head(const KvRowTable& t, int64_t len, int64_t kv_offset, int64_t head_dim, float* dst) {
  for (int64_t j = 0; j < len; ++j) {
    const uint8_t* src = t.row_fp8(j) + kv_offset;
    float* out = dst + j * head_dim;
    for (int64_t d = 0; d < head_dim; ++d) out[d] = fp8_e4m3_to_f32(src[d]) * t.scale;
  }
}

// Most bytes of dequantized K and V one unit may take per thread; longer
// contexts read an fp8 cache through the reference.
constexpr int64_t kMaxFp8ScratchBytes = int64_t{64} << 20;

}  // namespace

void attention_batch_fast(ThreadPool& pool, const float* q, std::span<const int64_t> positions,
                          std::span<const AttentionSequence> seqs, const AttentionShape& shape, float* out) {
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

  // As the reference: a unit is one token and one kv head, costed by the
  // K/V rows it reads; each thread takes a contiguous run of about equal cost.
  int64_t total_cost = 0, max_len = 0;
  for (const AttentionSequence& seq : seqs) {
    for (int64_t r = seq.first_token; r < seq.first_token + seq.num_tokens; ++r) {
      const int64_t len = positions[static_cast<size_t>(r)] + 1;
      total_cost += len * shape.num_kv_heads;
      max_len = std::max(max_len, len);
    }
  }
  if (total_cost == 0) return;
  const bool fp8 = std::any_of(seqs.begin(), seqs.end(), [](const AttentionSequence& s) { return s.k.is_fp8(); });
  if (fp8 && 2 * max_len * head_dim * static_cast<int64_t>(sizeof(float)) > kMaxFp8ScratchBytes) {
    attention_batch(pool, q, positions, seqs, shape, out);
    return;
  }
  const int64_t parts = pool.num_threads();
  pool.parallel_for(parts, 1, [&](int64_t part_begin, int64_t part_end) {
    std::vector<float>& probs = thread_probs();
    if (probs.size() < static_cast<size_t>(group * max_len)) probs.resize(static_cast<size_t>(group * max_len));
    std::vector<float>& kv_rows = thread_kv_rows();
    if (fp8 && kv_rows.size() < static_cast<size_t>(2 * max_len * head_dim)) {
      kv_rows.resize(static_cast<size_t>(2 * max_len * head_dim));
    }
    int64_t cost_before = 0;
    for (const AttentionSequence& seq : seqs) {
      for (int64_t r = seq.first_token; r < seq.first_token + seq.num_tokens; ++r) {
        const int64_t len = positions[static_cast<size_t>(r)] + 1;
        for (int64_t kvh = 0; kvh < shape.num_kv_heads; ++kvh) {
          const int64_t part = cost_before * parts / total_cost;
          cost_before += len;
          if (part < part_begin || part >= part_end) continue;
          const int64_t offset = kvh * group * head_dim;
          if (seq.k.is_fp8()) {
            float* k_rows = kv_rows.data();
            float* v_rows = k_rows + len * head_dim;
            dequantize_head(seq.k, len, kvh * head_dim, head_dim, k_rows);
            dequantize_head(seq.v, len, kvh * head_dim, head_dim, v_rows);
            const float* k_block[1] = {k_rows};
            const float* v_block[1] = {v_rows};
            const KvRowTable k{k_block, len, head_dim, {}, 1.0f}, v{v_block, len, head_dim, {}, 1.0f};
            attend_group_avx2(q + r * q_dim + offset, len, k, v, 0, group, head_dim, scale, probs.data(),
                              out + r * q_dim + offset);
            continue;
          }
          attend_group_avx2(q + r * q_dim + offset, len, seq.k, seq.v, kvh * head_dim, group, head_dim, scale,
                            probs.data(), out + r * q_dim + offset);
        }
      }
    }
  });
#endif
}

}  // namespace tern::cpu
