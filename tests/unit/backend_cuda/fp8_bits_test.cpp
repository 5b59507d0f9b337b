// The integer e4m3 -> fp16 conversion the FP8 kernels use before sm_89
// (backend/cuda/fp8_bits.h): every code, in either byte of a pair, times 256
// is exactly the value fp8_e4m3_to_f32 gives.
#include "backend/cuda/fp8_bits.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "backend/cpu/fp8_quant.h"
#include "base/fp8_e4m3.h"

namespace tern::cuda {
namespace {

// An fp16 number's value, from its bits.
float half_value(uint32_t h) {
  const int e = static_cast<int>((h >> 10) & 0x1f), m = static_cast<int>(h & 0x3ff);
  const float a = e == 0 ? std::ldexp(static_cast<float>(m), -24) : std::ldexp(1.0f + m / 1024.0f, e - 15);
  return (h & 0x8000u) != 0 ? -a : a;
}

TEST(Fp8Bits, EveryCodeInEitherHalfIsExact) {
  for (uint32_t c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN codes, never made by the quantizer
    const float want = fp8_e4m3_to_f32(static_cast<uint8_t>(c));
    for (uint32_t other : {0x00u, 0x38u, 0xfeu, 0x81u}) {
      const uint32_t low = e4m3x2_to_f16x2_bits(c | (other << 8));
      const uint32_t high = e4m3x2_to_f16x2_bits(other | (c << 8));
      EXPECT_EQ(half_value(low & 0xffffu) * kE4m3HalfScale, want) << "code " << c << " low";
      EXPECT_EQ(half_value(high >> 16) * kE4m3HalfScale, want) << "code " << c << " high";
      EXPECT_EQ(half_value(low >> 16) * kE4m3HalfScale, fp8_e4m3_to_f32(static_cast<uint8_t>(other)));
    }
  }
}

}  // namespace
}  // namespace tern::cuda
