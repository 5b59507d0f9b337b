// The horizontal sum the AVX2 kernels (linear_avx2.cpp, quant_avx2.cpp) end
// their dot products with. Include it only after a file's
// `#pragma GCC target("avx2,...")`: it has internal linkage, so no copy built
// for AVX2 is shared with code built for another instruction set.
#pragma once

#include <immintrin.h>

namespace tern::cpu {
namespace {

inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace
}  // namespace tern::cpu
