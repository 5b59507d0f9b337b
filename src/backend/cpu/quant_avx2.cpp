// Quantized dot products for AVX2 (int8 products with vpmaddubsw: unsigned
// weight quants times signed activation quants, 16-bit pairs widened and
// scaled by vpmaddwd), plugged into quant_tiling.h's loop nest. Each weight
// block is loaded and unpacked once for MR tokens. The whole file is compiled
// for AVX2+FMA+F16C; quant_linear.cpp enters it only after checking the CPU.
// It calls no inline function of a project header (decode_k4_scale has a
// local copy), so no non-template code is compiled here for two ISAs.
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "backend/cpu/avx2_sum.h"
#include "backend/cpu/quant_isa.h"
#include "backend/cpu/quant_tiling.h"

namespace tern::cpu::quant_isa {
namespace {

inline float fp16(uint16_t h) { return _cvtsh_ss(h); }

template <class T>
inline __m256i load(const T* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Sum of products of 32 unsigned (< 128) and 32 signed bytes as 8 int32 lanes,
// each 16-bit pair sum weighted by the int16 lanes of `scale`.
inline __m256i dot_u8_s8(__m256i u, __m256i s, __m256i scale) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale);
}

// The 8 six-bit scales and mins of a Q4_K/Q5_K block (decode_k4_scale's rule).
inline void decode_k4_scales(const uint8_t* q, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = q[j] & 63;
    m[j] = q[j + 4] & 63;
    sc[j + 4] = static_cast<uint8_t>((q[j + 8] & 0xF) | ((q[j] >> 6) << 4));
    m[j + 4] = static_cast<uint8_t>((q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4));
  }
}

// d = max|x| / 127, q = nearest-even(x * 127 / max|x|): the portable rule,
// same fp32 multiply, same bytes.
inline float quantize32(const float* x, int8_t* q) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float max = _mm_cvtss_f32(m);
  const __m256 id = _mm256_set1_ps(max != 0.0f ? 127.0f / max : 0.0f);
  __m256i i32[4];
  for (int i = 0; i < 4; ++i) i32[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
  // Pack 32 int32 to 32 int8; packs work within 128-bit lanes, so permute back.
  const __m256i i16a = _mm256_packs_epi32(i32[0], i32[1]);
  const __m256i i16b = _mm256_packs_epi32(i32[2], i32[3]);
  const __m256i i8 = _mm256_packs_epi16(i16a, i16b);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(i8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  return max;
}

void quantize_q8a(const float* x, int64_t n, void* out) {
  auto* y = static_cast<BlockQ8A*>(out);
  for (int64_t b = 0; b < n / kQK8_0; ++b) y[b].d = quantize32(x + b * kQK8_0, y[b].qs) / 127.0f;
}

void quantize_q8k(const float* x, int64_t n, void* out) {
  auto* y = static_cast<BlockQ8K*>(out);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < kQKK; i += 8) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float max = _mm_cvtss_f32(m);
    const __m256 id = _mm256_set1_ps(max != 0.0f ? 127.0f / max : 0.0f);
    y[b].d = max / 127.0f;
    for (int c = 0; c < kQKK; c += 32) {
      __m256i i32[4];
      for (int i = 0; i < 4; ++i) i32[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + c + 8 * i), id));
      const __m256i i8 = _mm256_packs_epi16(_mm256_packs_epi32(i32[0], i32[1]), _mm256_packs_epi32(i32[2], i32[3]));
      const __m256i q = _mm256_permutevar8x32_epi32(i8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs + c), q);
      // Sums of each 16: widen to int16 and add pairs down to one per 16.
      const __m256i lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q));
      const __m256i hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1));
      const __m256i ones = _mm256_set1_epi16(1);
      const __m256i s_lo = _mm256_madd_epi16(lo, ones), s_hi = _mm256_madd_epi16(hi, ones);  // 8 x int32 each
      alignas(32) int32_t p[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(p), s_lo);
      _mm256_store_si256(reinterpret_cast<__m256i*>(p + 8), s_hi);
      for (int s = 0; s < 2; ++s) {
        int sum = 0;
        for (int i = 0; i < 8; ++i) sum += p[8 * s + i];
        y[b].bsums[c / 16 + s] = static_cast<int16_t>(sum);
      }
    }
  }
}

// Q8_0 and Q4_0 against BlockQ8A: the sign trick (|w| times x with w's sign)
// feeds vpmaddubsw, whose first operand is unsigned.
template <bool kNibbles>
struct Q8Family {
  using Block = std::conditional_t<kNibbles, BlockQ4_0, BlockQ8_0>;
  static __m256i weights(const Block& b) {
    if constexpr (kNibbles) {
      const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
      const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), _mm256_set1_epi8(0x0F));
      return _mm256_sub_epi8(nib, _mm256_set1_epi8(8));
    } else {
      return load(b.qs);
    }
  }
  template <int MR>
  static void dot(const uint8_t* wp, const uint8_t* xp, int64_t x_row_bytes, int64_t blocks, float* out) {
    const auto* w = reinterpret_cast<const Block*>(wp);
    const BlockQ8A* x[MR];
    for (int m = 0; m < MR; ++m) x[m] = reinterpret_cast<const BlockQ8A*>(xp + m * x_row_bytes);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[MR];
    for (int m = 0; m < MR; ++m) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      const __m256i wq = weights(w[b]);
      const __m256i aw = _mm256_sign_epi8(wq, wq);
      const float dw = fp16(w[b].d);
      for (int m = 0; m < MR; ++m) {
        const __m256i sx = _mm256_sign_epi8(load(x[m][b].qs), wq);
        const __m256 p = _mm256_cvtepi32_ps(dot_u8_s8(aw, sx, ones));
        acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(dw * x[m][b].d), p, acc[m]);
      }
    }
    for (int m = 0; m < MR; ++m) out[m] = hsum256(acc[m]);
  }
};

// Q4_K / Q5_K against BlockQ8K: sub-block pairs (the low and high nibbles of
// 32 bytes), each 16-bit pair sum scaled by its 6-bit scale; the min term
// from the activation's sums of 16: m_j pairs with bsums 2j and 2j+1.
template <bool kFifthBit>
struct K4Family {
  using Block = std::conditional_t<kFifthBit, BlockQ5K, BlockQ4K>;
  template <int MR>
  static void dot(const uint8_t* wp, const uint8_t* xp, int64_t x_row_bytes, int64_t blocks, float* out) {
    const auto* w = reinterpret_cast<const Block*>(wp);
    const BlockQ8K* x[MR];
    for (int m = 0; m < MR; ++m) x[m] = reinterpret_cast<const BlockQ8K*>(xp + m * x_row_bytes);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 acc[MR];
    for (int m = 0; m < MR; ++m) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      alignas(16) uint8_t sc[8], mins[8];
      decode_k4_scales(w[b].scales, sc, mins);
      // m_j in int16 lanes 2j and 2j+1, against bsums 2j and 2j+1.
      const __m128i m8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(mins));
      const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
      __m256i sumi[MR];
      for (int m = 0; m < MR; ++m) sumi[m] = _mm256_setzero_si256();
      __m256i qh;
      if constexpr (kFifthBit) qh = load(w[b].qh);
      for (int c = 0; c < 4; ++c) {
        const __m256i q4 = load(w[b].qs + 32 * c);
        __m256i lo = _mm256_and_si256(q4, low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), low4);
        if constexpr (kFifthBit) {
          const __m256i one = _mm256_set1_epi8(1);
          lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(qh, one), 4));
          hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4));
          qh = _mm256_srli_epi16(qh, 2);
        }
        const __m256i s_lo = _mm256_set1_epi16(sc[2 * c]);
        const __m256i s_hi = _mm256_set1_epi16(sc[2 * c + 1]);
        for (int m = 0; m < MR; ++m) {
          const __m256i p_lo = dot_u8_s8(lo, load(x[m][b].qs + 64 * c), s_lo);
          const __m256i p_hi = dot_u8_s8(hi, load(x[m][b].qs + 64 * c + 32), s_hi);
          sumi[m] = _mm256_add_epi32(sumi[m], _mm256_add_epi32(p_lo, p_hi));
        }
      }
      const float d = fp16(w[b].d), dmin = fp16(w[b].dmin);
      for (int m = 0; m < MR; ++m) {
        const __m256i summ = _mm256_madd_epi16(load(x[m][b].bsums), mins16);
        acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[m][b].d), _mm256_cvtepi32_ps(sumi[m]), acc[m]);
        acc[m] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * x[m][b].d), _mm256_cvtepi32_ps(summ), acc[m]);
      }
    }
    for (int m = 0; m < MR; ++m) out[m] = hsum256(acc[m]);
  }
};

// Q6_K against BlockQ8K: six-bit q (0..63) unsigned into vpmaddubsw, the -32
// offset as 32 sum_s scale_s bsums_s subtracted once per block.
struct Q6KFamily {
  template <int MR>
  static void dot(const uint8_t* wp, const uint8_t* xp, int64_t x_row_bytes, int64_t blocks, float* out) {
    const auto* w = reinterpret_cast<const BlockQ6K*>(wp);
    const BlockQ8K* x[MR];
    for (int m = 0; m < MR; ++m) x[m] = reinterpret_cast<const BlockQ8K*>(xp + m * x_row_bytes);
    const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(0x03);
    __m256 acc[MR];
    for (int m = 0; m < MR; ++m) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales)));
      __m256i sumi[MR];
      for (int m = 0; m < MR; ++m) {
        sumi[m] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                   _mm256_slli_epi32(_mm256_madd_epi16(load(x[m][b].bsums), sc16), 5));
      }
      for (int h = 0; h < 2; ++h) {
        const __m256i ql0 = load(w[b].ql + 64 * h), ql1 = load(w[b].ql + 64 * h + 32);
        const __m256i qh = load(w[b].qh + 32 * h);
        for (int g = 0; g < 4; ++g) {
          const __m256i ql = g & 1 ? ql1 : ql0;
          const __m256i lo = _mm256_and_si256(g >= 2 ? _mm256_srli_epi16(ql, 4) : ql, low4);
          const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * g)), low2);
          const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
          const int s = 8 * h + 2 * g;  // the sub-blocks of elements 0-15 and 16-31 of this group
          const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(w[b].scales[s + 1]), _mm_set1_epi16(w[b].scales[s]));
          for (int m = 0; m < MR; ++m) {
            sumi[m] = _mm256_add_epi32(sumi[m], dot_u8_s8(q, load(x[m][b].qs + 128 * h + 32 * g), scale));
          }
        }
      }
      const float d = fp16(w[b].d);
      for (int m = 0; m < MR; ++m) {
        acc[m] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[m][b].d), _mm256_cvtepi32_ps(sumi[m]), acc[m]);
      }
    }
    for (int m = 0; m < MR; ++m) out[m] = hsum256(acc[m]);
  }
};

}  // namespace

const QuantKernels& avx2_quant_kernels() {
  static const QuantKernels kernels{
      .q8_0 = &quant_rows<Q8Family<false>>,
      .q4_0 = &quant_rows<Q8Family<true>>,
      .q4_k = &quant_rows<K4Family<false>>,
      .q5_k = &quant_rows<K4Family<true>>,
      .q6_k = &quant_rows<Q6KFamily>,
      .quantize_q8a = &quantize_q8a,
      .quantize_q8k = &quantize_q8k,
  };
  return kernels;
}

}  // namespace tern::cpu::quant_isa

#pragma GCC pop_options
#endif  // x86-64 GCC/Clang
