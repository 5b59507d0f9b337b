// The AVX2 GEMM kernels over packed quantized weights (quant_pack.h),
// written once over a dot-product policy D and included by each ISA file
// after its `#pragma GCC target`: quant_packed_avx2.cpp (vpmaddubsw, int16
// partial sums widened by vpmaddwd) and quant_packed_vnni.cpp (AVX512-VNNI's
// vpdpbusd on the same 256-bit registers, int32 sums directly). Everything
// here has internal linkage, so each including file compiles its own copy
// for its instruction set.
//
// A tile is 8 rows x M tokens (M <= 4) per call, one fp32 accumulator
// register per token whose 8 lanes are the 8 rows. Per weight block, each
// 32-byte load of 8 rows' quants (unpacked once for the M tokens) meets one
// 4-byte group of a token's 8-bit activations broadcast to every lane
// (unsigned weight quants times signed activations), so every lane
// accumulates its own row's dot product; integer sums stay exact within a
// block and become fp32 once per block, scaled by d_w (8 rows, fp16 to fp32)
// times d_x. The integer sums are exact in both policies, so both give the
// same bits, and each token's arithmetic is the same whatever M or the
// thread split: results are bit-identical across batching, thread counts and
// the two instruction sets.
//
// D provides: kVnni; add(sum, u8, s8): the products of each 4-byte group of
// unsigned u8 and signed s8 added into the lane's partial sum; finish(sum):
// the partial sum as int32 lanes; scale_u8(p) / scale_i8(p): 8 rows' byte
// scales at p in the form finish_scaled(sum, scale) multiplies by.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/quant_isa.h"
#include "backend/cpu/quant_pack.h"

namespace tern::cpu::quant_isa {
namespace {

// Bytes of activation rows kept in L2 while every row group passes over them.
constexpr int64_t kXChunkBytes = 160 * 1024;

inline __m256i load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// The 4 bytes at p in every 32-bit lane.
inline __m256i bcast(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Logical right shift of 16-bit lanes by a count known only at run time.
inline __m256i srl16(__m256i v, int n) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(n)); }
inline __m256i sll16(__m256i v, int n) { return _mm256_sll_epi16(v, _mm_cvtsi32_si128(n)); }

// Pins v's value at this point: GCC otherwise reassociates an unrolled chain
// of integer adds so that every product is computed first, and spills them.
inline void keep_order(__m256i& v) { asm("" : "+x"(v)); }

// The 8 rows' fp16 values at p as fp32 lanes.
inline __m256 fp16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Lane r = int16 pair (lo[r], hi[r]) of unsigned bytes, for vpmaddwd.
inline __m256i pair_u8(const uint8_t* lo, const uint8_t* hi) {
  const __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(lo)));
  const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(hi)));
  return _mm256_or_si256(a, _mm256_slli_epi32(b, 16));
}

// Lane r = int16 pair (v[r], v[r]) of signed bytes.
inline __m256i pair_i8(const uint8_t* v) {
  const __m128i w = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v)));
  return _mm256_set_m128i(_mm_unpackhi_epi16(w, w), _mm_unpacklo_epi16(w, w));
}

// Q4_0: 4-bit weights (0..15) against the activations, the -8 offset as
// 8 * sum(x) per block in int32. Eight vpmaddubsw products per lane stay
// within int16 (15 * 127 * 2 * 8).
template <class D>
struct Q4_0Kernel {
  using X = BlockQ8S;
  template <int M>
  static void run(const uint8_t* w, int64_t blocks, const uint8_t* x, int64_t x_row_bytes, __m256* acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int m = 0; m < M; ++m) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b, w += kPackedQ4_0Bytes) {
      const X* xs[M];
      for (int m = 0; m < M; ++m) xs[m] = reinterpret_cast<const X*>(x + m * x_row_bytes) + b;
      __m256i s[M];
      for (int m = 0; m < M; ++m) s[m] = _mm256_setzero_si256();
      #pragma GCC unroll 16
      for (int u = 0; u < 4; ++u) {
        const __m256i q = load(w + 16 + 32 * u);
        const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        for (int m = 0; m < M; ++m) {
          const X& xb = *xs[m];
          s[m] = D::add(s[m], lo, bcast(xb.q.qs + 4 * u));
          s[m] = D::add(s[m], hi, bcast(xb.q.qs + 16 + 4 * u));
          keep_order(s[m]);
        }
      }
      const __m256 dw = fp16x8(w);
      for (int m = 0; m < M; ++m) {
        const X& xb = *xs[m];
        const __m256i dot = _mm256_sub_epi32(D::finish(s[m]), _mm256_set1_epi32(8 * xb.sum));
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(xb.q.d)), acc[m]);
      }
    }
  }
};

// Q8_0: signed weights, so |w| into vpmaddubsw with x carrying w's sign.
template <class D>
struct Q8_0Kernel {
  using X = BlockQ8S;
  // vpmaddubsw's int16 holds one product pair of |w| <= 127 and x.
  static constexpr int kPerSum = D::kVnni ? 8 : 1;
  template <int M>
  static void run(const uint8_t* w, int64_t blocks, const uint8_t* x, int64_t x_row_bytes, __m256* acc) {
    for (int m = 0; m < M; ++m) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b, w += kPackedQ8_0Bytes) {
      const X* xs[M];
      for (int m = 0; m < M; ++m) xs[m] = reinterpret_cast<const X*>(x + m * x_row_bytes) + b;
      __m256i s[M];
      for (int m = 0; m < M; ++m) s[m] = _mm256_setzero_si256();
      #pragma GCC unroll 16
      for (int u0 = 0; u0 < 8; u0 += kPerSum) {
        __m256i p[M];
        for (int m = 0; m < M; ++m) p[m] = _mm256_setzero_si256();
        #pragma GCC unroll 16
        for (int u = u0; u < u0 + kPerSum; ++u) {
          const __m256i q = load(w + 16 + 32 * u);
          const __m256i aq = _mm256_abs_epi8(q);
          for (int m = 0; m < M; ++m) {
            const X& xb = *xs[m];
            p[m] = D::add(p[m], aq, _mm256_sign_epi8(bcast(xb.q.qs + 4 * u), q));
            keep_order(p[m]);
          }
        }
        for (int m = 0; m < M; ++m) s[m] = _mm256_add_epi32(s[m], D::finish(p[m]));
      }
      const __m256 dw = fp16x8(w);
      for (int m = 0; m < M; ++m) {
        const X& xb = *xs[m];
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[m]), _mm256_mul_ps(dw, _mm256_set1_ps(xb.q.d)), acc[m]);
      }
    }
  }
};

// Q4_K / Q5_K: per super-block, the min term (6-bit mins against the
// activation's sums of 32) first, then per sub-block j the unsigned quants'
// products summed in int16 and weighted by the 6-bit scale in vpmaddwd.
template <class D, bool kFifthBit>
struct K4Kernel {
  using X = BlockQ8KS;
  static constexpr int64_t kBytes = kFifthBit ? kPackedQ5KBytes : kPackedQ4KBytes;
  // Products per int16 sum of vpmaddubsw: 4-bit quants allow 8 (15 * 127 * 2 * 8), 5-bit 4.
  static constexpr int kGroupsPerSum = kFifthBit && !D::kVnni ? 4 : 8;

  template <int M>
  static void run(const uint8_t* w, int64_t blocks, const uint8_t* x, int64_t x_row_bytes, __m256* acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    for (int m = 0; m < M; ++m) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b, w += kBytes) {
      const X* xs[M];
      for (int m = 0; m < M; ++m) xs[m] = reinterpret_cast<const X*>(x + m * x_row_bytes) + b;
      const __m256 d = fp16x8(w), dmin = fp16x8(w + 16);
      const uint8_t* sc = w + 32;
      const uint8_t* mins = w + 96;
      const uint8_t* qs = w + 160;
      const uint8_t* qh = w + kPackedQ4KBytes;
      {
        __m256i summ[M];
        for (int m = 0; m < M; ++m) summ[m] = _mm256_setzero_si256();
        #pragma GCC unroll 16
        for (int t = 0; t < 4; ++t) {
          const __m256i mp = pair_u8(mins + 16 * t, mins + 16 * t + 8);
          for (int m = 0; m < M; ++m) {
            const X& xb = *xs[m];
            summ[m] = _mm256_add_epi32(summ[m], _mm256_madd_epi16(mp, bcast(xb.bsum32 + 2 * t)));
          }
        }
        for (int m = 0; m < M; ++m) {
          const X& xb = *xs[m];
          acc[m] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(summ[m]), _mm256_mul_ps(dmin, _mm256_set1_ps(xb.q.d)), acc[m]);
        }
      }
      __m256i sumi[M];
      for (int m = 0; m < M; ++m) sumi[m] = _mm256_setzero_si256();
      #pragma GCC unroll 2
      for (int j = 0; j < 8; ++j) {
        const __m256i scale = D::scale_u8(sc + 8 * j);
        const int c = j / 2, shift = 4 * (j % 2);
        #pragma GCC unroll 16
        for (int g0 = 0; g0 < 8; g0 += kGroupsPerSum) {
          __m256i s[M];
          for (int m = 0; m < M; ++m) s[m] = _mm256_setzero_si256();
          #pragma GCC unroll 16
          for (int g = g0; g < g0 + kGroupsPerSum; ++g) {
            __m256i q = _mm256_and_si256(srl16(load(qs + 32 * (8 * c + g)), shift), m4);
            if constexpr (kFifthBit) {
              const __m256i bit = _mm256_and_si256(srl16(load(qh + 32 * g), j), one);
              q = _mm256_or_si256(q, _mm256_slli_epi16(bit, 4));
            }
            for (int m = 0; m < M; ++m) {
              const X& xb = *xs[m];
              s[m] = D::add(s[m], q, bcast(xb.q.qs + 32 * j + 4 * g));
              keep_order(s[m]);
            }
          }
          for (int m = 0; m < M; ++m) sumi[m] = _mm256_add_epi32(sumi[m], D::finish_scaled(s[m], scale));
        }
      }
      for (int m = 0; m < M; ++m) {
        const X& xb = *xs[m];
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[m]), _mm256_mul_ps(d, _mm256_set1_ps(xb.q.d)), acc[m]);
      }
    }
  }
};

// Q6_K: six-bit quants (0..63), two groups per int16 sum of vpmaddubsw
// (63 * 127 * 2 * 2), weighted by the int8 sub-block scale; the -32 offset
// as 32 sum_s scale_s bsums_s, subtracted once per super-block.
template <class D>
struct Q6KKernel {
  using X = BlockQ8KS;
  static constexpr int kPerSum = D::kVnni ? 4 : 2;
  template <int M>
  static void run(const uint8_t* w, int64_t blocks, const uint8_t* x, int64_t x_row_bytes, __m256* acc) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
    for (int m = 0; m < M; ++m) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b, w += kPackedQ6KBytes) {
      const X* xs[M];
      for (int m = 0; m < M; ++m) xs[m] = reinterpret_cast<const X*>(x + m * x_row_bytes) + b;
      const uint8_t* sc = w + 16;
      const uint8_t* ql = w + 144;
      const uint8_t* qh = w + 144 + 8 * 128;
      __m256i sumi[M];
      for (int m = 0; m < M; ++m) sumi[m] = _mm256_setzero_si256();
      #pragma GCC unroll 16
      for (int t = 0; t < 8; ++t) {
        // Lane r: int16 pair (scale of sub-block 2t, of 2t+1) of row r.
        const __m128i lo = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 16 * t));
        const __m128i hi = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 16 * t + 8));
        const __m256i sp = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(lo, hi));
        for (int m = 0; m < M; ++m) {
          const X& xb = *xs[m];
          sumi[m] = _mm256_add_epi32(sumi[m], _mm256_madd_epi16(sp, bcast(xb.q.bsums + 2 * t)));
        }
      }
      for (int m = 0; m < M; ++m) sumi[m] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sumi[m], 5));
      #pragma GCC unroll 16
      for (int sb = 0; sb < 16; ++sb) {
        const int h = sb / 8, gq = (sb % 8) / 2, half = sb % 2;
        const __m256i scale = D::scale_i8(sc + 8 * sb);
        #pragma GCC unroll 16
        for (int i0 = 4 * half; i0 < 4 * half + 4; i0 += kPerSum) {
          __m256i s[M];
          for (int m = 0; m < M; ++m) s[m] = _mm256_setzero_si256();
          #pragma GCC unroll 16
          for (int i = i0; i < i0 + kPerSum; ++i) {
            const __m256i l = load(ql + 32 * (16 * h + 8 * (gq & 1) + i));
            const __m256i lo4 = _mm256_and_si256(srl16(l, 4 * (gq >> 1)), m4);
            // Bits 2gq, 2gq+1 of each qh byte moved to bits 4, 5 in one shift.
            const __m256i hv = load(qh + 32 * (8 * h + i));
            const __m256i hi2 = _mm256_and_si256(gq == 3 ? _mm256_srli_epi16(hv, 2) : sll16(hv, 4 - 2 * gq), m2);
            const __m256i q = _mm256_or_si256(lo4, hi2);
            for (int m = 0; m < M; ++m) {
              const X& xb = *xs[m];
              s[m] = D::add(s[m], q, bcast(xb.q.qs + 128 * h + 32 * gq + 4 * i));
            }
          }
          for (int m = 0; m < M; ++m) sumi[m] = _mm256_add_epi32(sumi[m], D::finish_scaled(s[m], scale));
        }
      }
      const __m256 d = fp16x8(w);
      for (int m = 0; m < M; ++m) {
        const X& xb = *xs[m];
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[m]), _mm256_mul_ps(d, _mm256_set1_ps(xb.q.d)), acc[m]);
      }
    }
  }
};

// One tile: row group g against tokens t0 .. t0+M-1.
template <class K, int M>
void tile(const PackedTask& t, const uint8_t* w, int64_t g, int64_t t0) {
  __m256 acc[M];
  K::template run<M>(w, t.w->blocks, t.x + t0 * t.x_row_bytes, t.x_row_bytes, acc);
  const int64_t rows = t.w->rows, r0 = g * kPackRows;
  for (int m = 0; m < M; ++m) {
    float* y = t.y + (t0 + m) * rows + r0;
    if (r0 + kPackRows <= rows) {
      _mm256_storeu_ps(y, acc[m]);
    } else {
      alignas(32) float tmp[kPackRows];
      _mm256_store_ps(tmp, acc[m]);
      for (int64_t r = 0; r < rows - r0; ++r) y[r] = tmp[r];
    }
  }
}

// Tokens from t_begin on in chunks whose activations stay in L2; within a
// chunk each row group (in L1 after its first tile) meets every tile of 4 tokens.
template <class K>
void packed_rows_from(const PackedTask& t, int64_t t_begin, int64_t g_begin, int64_t g_end) {
  const PackedWeight& pw = *t.w;
  int64_t chunk = kXChunkBytes / (t.x_row_bytes > 0 ? t.x_row_bytes : 1);
  chunk = chunk < 4 ? 4 : chunk - chunk % 4;
  for (int64_t c0 = t_begin; c0 < t.num_tokens; c0 += chunk) {
    const int64_t c1 = c0 + chunk < t.num_tokens ? c0 + chunk : t.num_tokens;
    for (int64_t g = g_begin; g < g_end; ++g) {
      const uint8_t* w = pw.data.data() + g * pw.blocks * pw.block_bytes;
      int64_t t0 = c0;
      for (; t0 + 4 <= c1; t0 += 4) tile<K, 4>(t, w, g, t0);
      switch (c1 - t0) {
        case 3:
          tile<K, 3>(t, w, g, t0);
          break;
        case 2:
          tile<K, 2>(t, w, g, t0);
          break;
        case 1:
          tile<K, 1>(t, w, g, t0);
          break;
        default:
          break;
      }
    }
  }
}

template <class K>
void packed_rows(const PackedTask& t, int64_t g_begin, int64_t g_end) {
  packed_rows_from<K>(t, 0, g_begin, g_end);
}

}  // namespace
}  // namespace tern::cpu::quant_isa
