// FP8 E4M3 (the "fn" variant of the OCP FP8 spec, NVIDIA's __nv_fp8_e4m3)
// <-> float32: 1 sign, 4 exponent (bias 7) and 3 mantissa bits, no
// infinities, S.1111.111 is NaN, largest finite 448, smallest subnormal 2^-9.
// The storage type of an fp8 KV cache. The encoder rounds to nearest, ties to
// even, and saturates: anything beyond +-448 (infinities included) becomes
// +-448, as cvt.rn.satfinite does on the GPU; NaN stays NaN.
#pragma once

#include <cmath>
#include <cstdint>

namespace tern {

inline constexpr float kFp8E4m3Max = 448.0f;

inline float fp8_e4m3_to_f32(uint8_t b) {
  const float sign = (b & 0x80) != 0 ? -1.0f : 1.0f;
  const int exp = (b >> 3) & 0xf;
  const int mant = b & 0x7;
  if (exp == 0xf && mant == 0x7) return NAN;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -9);
  return sign * std::ldexp(static_cast<float>(8 + mant), exp - 10);
}

inline uint8_t f32_to_fp8_e4m3(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return static_cast<uint8_t>(sign | 0x7f);
  const float a = std::fabs(f);
  if (a >= kFp8E4m3Max) return static_cast<uint8_t>(sign | 0x7e);
  // The spacing of e4m3 values around a: 2^(e-3) in the binade [2^e, 2^(e+1)),
  // 2^-9 for the subnormals below 2^-6. a / spacing is exact (a power-of-two
  // scaling of a float far from the float range's ends), so one rint (the
  // default rounding mode: nearest, ties to even) is the whole rounding.
  int e = std::ilogb(a);
  if (a == 0.0f || e < -6) e = -6;
  const float units = std::nearbyint(std::ldexp(a, 3 - e));  // in [0, 16]: 16 carries into the next binade
  if (units == 0.0f) return sign;
  if (e == -6 && units < 8.0f) return static_cast<uint8_t>(sign | static_cast<uint8_t>(units));  // subnormal
  int exp = e + 7;
  int mant = static_cast<int>(units) - 8;
  if (mant == 8) {
    ++exp;
    mant = 0;
  }
  // a < 448 rounds at most to 448 (exp 15, mant 6), never to the NaN code.
  return static_cast<uint8_t>(sign | (exp << 3) | mant);
}

}  // namespace tern
