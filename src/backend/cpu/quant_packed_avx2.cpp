// AVX2 GEMM over packed quantized weights (quant_pack.h): the kernels of
// quant_packed_kernels.h with vpmaddubsw (int16 partial sums, widened and
// weighted by vpmaddwd), and the activation quantizers every packed set
// uses. The whole file is compiled for AVX2+FMA+F16C; quant_linear.cpp
// enters it only after checking the CPU. It calls no inline function of a
// project header outside its own anonymous namespace, so no non-template
// code is compiled here for two ISAs.
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

#include "backend/cpu/quant_isa.h"
#include "backend/cpu/quant_pack.h"
#include "backend/cpu/quant_packed_kernels.h"

namespace tern::cpu::quant_isa {
namespace {

// vpmaddubsw: adjacent products summed into saturating int16 lanes (the
// kernels keep every sum below 2^15), widened to int32 by vpmaddwd.
struct MaddubsDot {
  static constexpr bool kVnni = false;
  static __m256i add(__m256i s, __m256i u8, __m256i s8) { return _mm256_add_epi16(s, _mm256_maddubs_epi16(u8, s8)); }
  static __m256i finish(__m256i s) { return _mm256_madd_epi16(s, _mm256_set1_epi16(1)); }
  static __m256i scale_u8(const uint8_t* p) { return pair_u8(p, p); }
  static __m256i scale_i8(const uint8_t* p) { return pair_i8(p); }
  static __m256i finish_scaled(__m256i s, __m256i scale) { return _mm256_madd_epi16(s, scale); }
};

// Sum of 32 int8 quants.
inline int32_t sum32(const int8_t* q) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), v);
  const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

void quantize_q8s(const float* x, int64_t n, void* out) {
  auto* y = static_cast<BlockQ8S*>(out);
  const QuantizeFn q8a = avx2_quant_kernels().quantize_q8a;
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    q8a(x + b * kQK8_0, kQK8_0, &y[b].q);
    y[b].sum = sum32(y[b].q.qs);
  }
}

void quantize_q8ks(const float* x, int64_t n, void* out) {
  auto* y = static_cast<BlockQ8KS*>(out);
  const QuantizeFn q8k = avx2_quant_kernels().quantize_q8k;
  for (int64_t b = 0; b < n / kQKK; ++b) {
    q8k(x + b * kQKK, kQKK, &y[b].q);
    for (int j = 0; j < kQKK / 32; ++j) {
      y[b].bsum32[j] = static_cast<int16_t>(y[b].q.bsums[2 * j] + y[b].q.bsums[2 * j + 1]);
    }
  }
}


}  // namespace

const PackedKernels& avx2_packed_kernels() {
  static const PackedKernels kernels{
      .q8_0 = &packed_rows<Q8_0Kernel<MaddubsDot>>,
      .q4_0 = &packed_rows<Q4_0Kernel<MaddubsDot>>,
      .q4_k = &packed_rows<K4Kernel<MaddubsDot, false>>,
      .q5_k = &packed_rows<K4Kernel<MaddubsDot, true>>,
      .q6_k = &packed_rows<Q6KKernel<MaddubsDot>>,
      .quantize_q8s = &quantize_q8s,
      .quantize_q8ks = &quantize_q8ks,
  };
  return kernels;
}

}  // namespace tern::cpu::quant_isa

#pragma GCC pop_options
#endif  // x86-64 GCC/Clang
