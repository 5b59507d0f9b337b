// AVX512-VNNI GEMM over packed quantized weights (quant_pack.h): the
// kernels of quant_packed_kernels.h with vpdpbusd on 256-bit registers,
// which adds each 4-byte group's four u8 x s8 products straight into an
// int32 lane: one instruction where AVX2 takes vpmaddubsw, an int16 add and
// (per few groups) vpmaddwd, and no int16 limit on how many groups one sum
// takes. The integer sums are the AVX2 kernels' exactly, so the results are
// the same bits. The activations are quantized by the AVX2 set's functions.
// The whole file is compiled for AVX-512 F/VL/BW + VNNI; quant_linear.cpp
// enters it only after checking the CPU.
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")
// g++ 12's AVX-512 intrinsics fill don't-care lanes from _mm512_undefined_*,
// which it then reports as maybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "backend/cpu/quant_isa.h"
#include "backend/cpu/quant_pack.h"
#include "backend/cpu/quant_packed_kernels.h"

namespace tern::cpu::quant_isa {
namespace {

struct VnniDot {
  static constexpr bool kVnni = true;
  static __m256i add(__m256i s, __m256i u8, __m256i s8) { return _mm256_dpbusd_epi32(s, u8, s8); }
  static __m256i finish(__m256i s) { return s; }
  static __m256i scale_u8(const uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static __m256i scale_i8(const uint8_t* p) {
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static __m256i finish_scaled(__m256i s, __m256i scale) { return _mm256_mullo_epi32(s, scale); }
};

// Two row groups at once for every packed type: group g's 32 bytes in the low
// half of a 512-bit register and group g + 1's (`gs` bytes further) in the
// high half, so one vpdpbusd serves 16 rows. Every lane does the arithmetic
// of the 256-bit kernels above, so the bits are theirs.
inline __m512i load2(const uint8_t* p, int64_t gs) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + gs));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
inline __m512i bcast16(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
// The 16 rows' fp16 values at p (group g) and p + gs (group g + 1) as fp32.
inline __m512 fp16x16(const uint8_t* p, int64_t gs) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + gs));
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}
// 8 bytes of each group as int32 lanes (unsigned).
inline __m512i u8x16(const uint8_t* p, int64_t gs) {
  const __m128i lo = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i hi = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + gs));
  return _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(lo, hi));
}
inline void keep_order16(__m512i& v) { asm("" : "+v"(v)); }

// Q8_0: signed weights, so |w| into vpdpbusd with x carrying w's sign (x
// negated where w < 0; where w is 0 the product is 0 either way, as with
// vpsignb's zero): the integer sums of the 256-bit kernel.
struct Q8_0x16 {
  using X = BlockQ8S;
  template <int M>
  static void run(const uint8_t* w, int64_t gs, int64_t blocks, const uint8_t* x, int64_t x_row_bytes, __m512* acc) {
    const __m512i zero = _mm512_setzero_si512();
    for (int m = 0; m < M; ++m) acc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b, w += kPackedQ8_0Bytes) {
      const X* xs[M];
      for (int m = 0; m < M; ++m) xs[m] = reinterpret_cast<const X*>(x + m * x_row_bytes) + b;
      __m512i s[M];
      for (int m = 0; m < M; ++m) s[m] = _mm512_setzero_si512();
      #pragma GCC unroll 16
      for (int u = 0; u < 8; ++u) {
        const __m512i q = load2(w + 16 + 32 * u, gs);
        const __m512i aq = _mm512_abs_epi8(q);
        const __mmask64 negative = _mm512_movepi8_mask(q);
        for (int m = 0; m < M; ++m) {
          const X& xb = *xs[m];
          const __m512i xv = bcast16(xb.q.qs + 4 * u);
          s[m] = _mm512_dpbusd_epi32(s[m], aq, _mm512_mask_sub_epi8(xv, negative, zero, xv));
          keep_order16(s[m]);
        }
      }
      const __m512 dw = fp16x16(w, gs);
      for (int m = 0; m < M; ++m) {
        const X& xb = *xs[m];
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[m]), _mm512_mul_ps(dw, _mm512_set1_ps(xb.q.d)), acc[m]);
      }
    }
  }
};

struct Q4_0x16 {
  using X = BlockQ8S;
  template <int M>
  static void run(const uint8_t* w, int64_t gs, int64_t blocks, const uint8_t* x, int64_t x_row_bytes, __m512* acc) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int m = 0; m < M; ++m) acc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b, w += kPackedQ4_0Bytes) {
      const X* xs[M];
      for (int m = 0; m < M; ++m) xs[m] = reinterpret_cast<const X*>(x + m * x_row_bytes) + b;
      __m512i s[M];
      for (int m = 0; m < M; ++m) s[m] = _mm512_setzero_si512();
      #pragma GCC unroll 16
      for (int u = 0; u < 4; ++u) {
        const __m512i q = load2(w + 16 + 32 * u, gs);
        const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        for (int m = 0; m < M; ++m) {
          const X& xb = *xs[m];
          s[m] = _mm512_dpbusd_epi32(s[m], lo, bcast16(xb.q.qs + 4 * u));
          s[m] = _mm512_dpbusd_epi32(s[m], hi, bcast16(xb.q.qs + 16 + 4 * u));
          keep_order16(s[m]);
        }
      }
      const __m512 dw = fp16x16(w, gs);
      for (int m = 0; m < M; ++m) {
        const X& xb = *xs[m];
        const __m512i dot = _mm512_sub_epi32(s[m], _mm512_set1_epi32(8 * xb.sum));
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, _mm512_set1_ps(xb.q.d)), acc[m]);
      }
    }
  }
};

// Q4_K, and Q5_K with kFifthBit (bit j of a qh byte: sub-block j's fifth bit).
template <bool kFifthBit>
struct K4x16 {
  using X = BlockQ8KS;
  static constexpr int64_t kBytes = kFifthBit ? kPackedQ5KBytes : kPackedQ4KBytes;
  template <int M>
  static void run(const uint8_t* w, int64_t gs, int64_t blocks, const uint8_t* x, int64_t x_row_bytes, __m512* acc) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
    for (int m = 0; m < M; ++m) acc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b, w += kBytes) {
      const X* xs[M];
      for (int m = 0; m < M; ++m) xs[m] = reinterpret_cast<const X*>(x + m * x_row_bytes) + b;
      const __m512 d = fp16x16(w, gs), dmin = fp16x16(w + 16, gs);
      const uint8_t* sc = w + 32;
      const uint8_t* mins = w + 96;
      const uint8_t* qs = w + 160;
      const uint8_t* qh = w + kPackedQ4KBytes;
      {
        __m512i summ[M];
        for (int m = 0; m < M; ++m) summ[m] = _mm512_setzero_si512();
        #pragma GCC unroll 16
        for (int t = 0; t < 4; ++t) {
          // Lane r: int16 pair (min of sub-block 2t, of 2t + 1) of row r, as pair_u8.
          const __m512i mp = _mm512_or_si512(u8x16(mins + 16 * t, gs),
                                             _mm512_slli_epi32(u8x16(mins + 16 * t + 8, gs), 16));
          for (int m = 0; m < M; ++m) {
            const X& xb = *xs[m];
            summ[m] = _mm512_add_epi32(summ[m], _mm512_madd_epi16(mp, bcast16(xb.bsum32 + 2 * t)));
          }
        }
        for (int m = 0; m < M; ++m) {
          const X& xb = *xs[m];
          acc[m] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(summ[m]), _mm512_mul_ps(dmin, _mm512_set1_ps(xb.q.d)), acc[m]);
        }
      }
      __m512i sumi[M];
      for (int m = 0; m < M; ++m) sumi[m] = _mm512_setzero_si512();
      #pragma GCC unroll 2
      for (int j = 0; j < 8; ++j) {
        const __m512i scale = u8x16(sc + 8 * j, gs);
        const int c = j / 2, shift = 4 * (j % 2);
        __m512i s[M];
        for (int m = 0; m < M; ++m) s[m] = _mm512_setzero_si512();
        #pragma GCC unroll 16
        for (int g = 0; g < 8; ++g) {
          __m512i q =
              _mm512_and_si512(_mm512_srl_epi16(load2(qs + 32 * (8 * c + g), gs), _mm_cvtsi32_si128(shift)), m4);
          if constexpr (kFifthBit) {
            const __m512i bit = _mm512_and_si512(_mm512_srl_epi16(load2(qh + 32 * g, gs), _mm_cvtsi32_si128(j)), one);
            q = _mm512_or_si512(q, _mm512_slli_epi16(bit, 4));
          }
          for (int m = 0; m < M; ++m) {
            const X& xb = *xs[m];
            s[m] = _mm512_dpbusd_epi32(s[m], q, bcast16(xb.q.qs + 32 * j + 4 * g));
            keep_order16(s[m]);
          }
        }
        for (int m = 0; m < M; ++m) sumi[m] = _mm512_add_epi32(sumi[m], _mm512_mullo_epi32(s[m], scale));
      }
      for (int m = 0; m < M; ++m) {
        const X& xb = *xs[m];
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[m]), _mm512_mul_ps(d, _mm512_set1_ps(xb.q.d)), acc[m]);
      }
    }
  }
};

// 8 bytes of each group as int32 lanes (signed).
inline __m512i i8x16(const uint8_t* p, int64_t gs) {
  const __m128i lo = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i hi = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + gs));
  return _mm512_cvtepi8_epi32(_mm_unpacklo_epi64(lo, hi));
}

struct Q6Kx16 {
  using X = BlockQ8KS;
  template <int M>
  static void run(const uint8_t* w, int64_t gs, int64_t blocks, const uint8_t* x, int64_t x_row_bytes, __m512* acc) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x30);
    for (int m = 0; m < M; ++m) acc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b, w += kPackedQ6KBytes) {
      const X* xs[M];
      for (int m = 0; m < M; ++m) xs[m] = reinterpret_cast<const X*>(x + m * x_row_bytes) + b;
      const uint8_t* sc = w + 16;
      const uint8_t* ql = w + 144;
      const uint8_t* qh = w + 144 + 8 * 128;
      __m512i sumi[M];
      for (int m = 0; m < M; ++m) sumi[m] = _mm512_setzero_si512();
      #pragma GCC unroll 16
      for (int t = 0; t < 8; ++t) {
        // Lane r: int16 pair (scale of sub-block 2t, of 2t+1) of row r, for both groups.
        auto pairs = [&](const uint8_t* p) {
          return _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)),
                                   _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)));
        };
        const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(pairs(sc + 16 * t)), pairs(sc + 16 * t + gs), 1);
        const __m512i sp = _mm512_cvtepi8_epi16(both);
        for (int m = 0; m < M; ++m) {
          const X& xb = *xs[m];
          sumi[m] = _mm512_add_epi32(sumi[m], _mm512_madd_epi16(sp, bcast16(xb.q.bsums + 2 * t)));
        }
      }
      for (int m = 0; m < M; ++m) sumi[m] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sumi[m], 5));
      #pragma GCC unroll 16
      for (int sb = 0; sb < 16; ++sb) {
        const int h = sb / 8, gq = (sb % 8) / 2, half = sb % 2;
        const __m512i scale = i8x16(sc + 8 * sb, gs);
        __m512i s[M];
        for (int m = 0; m < M; ++m) s[m] = _mm512_setzero_si512();
        #pragma GCC unroll 16
        for (int i = 4 * half; i < 4 * half + 4; ++i) {
          const __m512i l = load2(ql + 32 * (16 * h + 8 * (gq & 1) + i), gs);
          const __m512i lo4 = _mm512_and_si512(_mm512_srl_epi16(l, _mm_cvtsi32_si128(4 * (gq >> 1))), m4);
          // Bits 2gq, 2gq+1 of each qh byte moved to bits 4, 5 in one shift.
          const __m512i hv = load2(qh + 32 * (8 * h + i), gs);
          const __m512i hi2 = _mm512_and_si512(
              gq == 3 ? _mm512_srli_epi16(hv, 2) : _mm512_sll_epi16(hv, _mm_cvtsi32_si128(4 - 2 * gq)), m2);
          const __m512i q = _mm512_or_si512(lo4, hi2);
          for (int m = 0; m < M; ++m) {
            const X& xb = *xs[m];
            s[m] = _mm512_dpbusd_epi32(s[m], q, bcast16(xb.q.qs + 128 * h + 32 * gq + 4 * i));
            keep_order16(s[m]);
          }
        }
        for (int m = 0; m < M; ++m) sumi[m] = _mm512_add_epi32(sumi[m], _mm512_mullo_epi32(s[m], scale));
      }
      const __m512 d = fp16x16(w, gs);
      for (int m = 0; m < M; ++m) {
        const X& xb = *xs[m];
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[m]), _mm512_mul_ps(d, _mm512_set1_ps(xb.q.d)), acc[m]);
      }
    }
  }
};

// One tile of row groups g and g + 1 against tokens t0 .. t0+M-1.
template <class K, int M>
void tile2(const PackedTask& t, const uint8_t* w, int64_t gs, int64_t g, int64_t t0) {
  __m512 acc[M];
  K::template run<M>(w, gs, t.w->blocks, t.x + t0 * t.x_row_bytes, t.x_row_bytes, acc);
  const int64_t rows = t.w->rows, r0 = g * kPackRows;
  for (int m = 0; m < M; ++m) {
    float* y = t.y + (t0 + m) * rows + r0;
    if (r0 + 2 * kPackRows <= rows) {
      _mm512_storeu_ps(y, acc[m]);
    } else {
      alignas(64) float tmp[2 * kPackRows];
      _mm512_store_ps(tmp, acc[m]);
      for (int64_t r = 0; r < rows - r0; ++r) y[r] = tmp[r];
    }
  }
}

// Tokens from which the pairs pay: measured on Zen 5 (tern_cpu_linear_bench,
// one thread), the 512-bit tiles are 2x the 256-bit ones at 512 tokens,
// 1.4-1.7x at 16, and slower at one token (0.35 against 0.12 ms for Q4_K
// gate|up), where the 256-bit kernel reads at the memory's rate. In the
// whole model's decode steps (tern bench offline, 2 threads, A/B) the pairs
// lose at 8 tokens (Q4_K_M file: 21.7-22.7 against 20.1-20.9 ms per step;
// Q8_0 22.6-27.0 against 21.1-22.0) and win from 9 (Q4_K_M 22.9-23.5 against
// 24.2-24.7; at 10 every type, e.g. Q8_0 24.6-25.0 against 30.1-30.3). Both
// give the same bits, so the choice is speed only.
constexpr int64_t kMinTokensForPairs = 9;

// packed_rows with pairs of row groups through K2 (16 rows per register)
// and a last odd group through K1 (the 256-bit kernel of the same type);
// fewer than kMinTokensForPairs tokens go through K1 alone.
template <class K2, class K1>
void packed_rows_pairs(const PackedTask& t, int64_t g_begin, int64_t g_end) {
  if (t.num_tokens < kMinTokensForPairs) {
    packed_rows<K1>(t, g_begin, g_end);
    return;
  }
  const PackedWeight& pw = *t.w;
  const int64_t gs = pw.blocks * pw.block_bytes;
  int64_t chunk = kXChunkBytes / (t.x_row_bytes > 0 ? t.x_row_bytes : 1);
  chunk = chunk < 4 ? 4 : chunk - chunk % 4;
  for (int64_t c0 = 0; c0 < t.num_tokens; c0 += chunk) {
    const int64_t c1 = c0 + chunk < t.num_tokens ? c0 + chunk : t.num_tokens;
    int64_t g = g_begin;
    for (; g + 2 <= g_end; g += 2) {
      const uint8_t* w = pw.data.data() + g * gs;
      int64_t t0 = c0;
      for (; t0 + 4 <= c1; t0 += 4) tile2<K2, 4>(t, w, gs, g, t0);
      switch (c1 - t0) {
        case 3:
          tile2<K2, 3>(t, w, gs, g, t0);
          break;
        case 2:
          tile2<K2, 2>(t, w, gs, g, t0);
          break;
        case 1:
          tile2<K2, 1>(t, w, gs, g, t0);
          break;
        default:
          break;
      }
    }
    if (g < g_end) {
      PackedTask rest = t;
      rest.num_tokens = c1;
      packed_rows_from<K1>(rest, c0, g, g + 1);
    }
  }
}

}  // namespace

const PackedKernels& vnni_packed_kernels() {
  static const PackedKernels kernels{
      .q8_0 = &packed_rows_pairs<Q8_0x16, Q8_0Kernel<VnniDot>>,
      .q4_0 = &packed_rows_pairs<Q4_0x16, Q4_0Kernel<VnniDot>>,
      .q4_k = &packed_rows_pairs<K4x16<false>, K4Kernel<VnniDot, false>>,
      .q5_k = &packed_rows_pairs<K4x16<true>, K4Kernel<VnniDot, true>>,
      .q6_k = &packed_rows_pairs<Q6Kx16, Q6KKernel<VnniDot>>,
      .quantize_q8s = avx2_packed_kernels().quantize_q8s,
      .quantize_q8ks = avx2_packed_kernels().quantize_q8ks,
  };
  return kernels;
}

}  // namespace tern::cpu::quant_isa

#pragma GCC pop_options
#endif  // x86-64 GCC/Clang
