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

}  // namespace

const PackedKernels& vnni_packed_kernels() {
  static const PackedKernels kernels{
      .q8_0 = &packed_rows<Q8_0Kernel<VnniDot>>,
      .q4_0 = &packed_rows<Q4_0Kernel<VnniDot>>,
      .q4_k = &packed_rows<K4Kernel<VnniDot, false>>,
      .q5_k = &packed_rows<K4Kernel<VnniDot, true>>,
      .q6_k = &packed_rows<Q6KKernel<VnniDot>>,
      .quantize_q8s = avx2_packed_kernels().quantize_q8s,
      .quantize_q8ks = avx2_packed_kernels().quantize_q8ks,
  };
  return kernels;
}

}  // namespace tern::cpu::quant_isa

#pragma GCC pop_options
#endif  // x86-64 GCC/Clang
