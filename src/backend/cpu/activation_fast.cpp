#include "backend/cpu/activation_fast.h"

#include "backend/cpu/linear_kernels.h"
#include "backend/cpu/reference_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "backend/cpu/exp_poly.h"

namespace tern::cpu {
namespace {

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx512f")
// g++ 12's AVX-512 intrinsics fill don't-care lanes from _mm512_undefined_*,
// which it then reports as maybe-uninitialized (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// e^x for every float x: below -87.3 the result is 0, above 88.7 infinity.
inline __m512 exp_any(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-88.0f)), _mm512_set1_ps(89.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(exp_poly::kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(exp_poly::kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(exp_poly::kLn2Lo), r);
  __m512 p = _mm512_set1_ps(exp_poly::kTaylor[0]);
#pragma GCC unroll 8
  for (int i = 1; i < 8; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(exp_poly::kTaylor[i]));
  // p * 2^n; scalef handles n past the normal exponent range (0 below, inf above).
  return _mm512_scalef_ps(p, n);
}

inline __m512 silu_mul16(__m512 g, __m512 u) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 sigmoid = _mm512_div_ps(one, _mm512_add_ps(one, exp_any(_mm512_sub_ps(_mm512_setzero_ps(), g))));
  return _mm512_mul_ps(_mm512_mul_ps(g, sigmoid), u);
}

void silu_mul_avx512(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(out + i, silu_mul16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(out + i, m, silu_mul16(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
  }
}

#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

}  // namespace

void silu_mul_fast(const float* gate, const float* up, int64_t n, float* out) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (best_cpu_isa() >= CpuIsa::kAvx512) {
    silu_mul_avx512(gate, up, n, out);
    return;
  }
#endif
  silu_mul(gate, up, n, out);
}

}  // namespace tern::cpu
