// silu_mul for the optimized kernel sets: the reference's contract
// (reference_kernels.h: out = gate * sigmoid(gate) * up, element by element)
// with a vectorized e^x on AVX-512 (a degree-7 polynomial after reduction by
// ln 2, within a few ulp of expf) instead of one libm call per element: a
// prefill's 512 x 3072 products per layer were 10% of its time. Every element
// goes through the same vector code, the tail in a masked pass, so an
// element's bits do not depend on where it sits in the call: a token gets the
// same result in a prefill as alone. Falls back to the reference where the CPU
// lacks AVX-512.
#pragma once

#include <cstdint>

namespace tern::cpu {

void silu_mul_fast(const float* gate, const float* up, int64_t n, float* out);

}  // namespace tern::cpu
