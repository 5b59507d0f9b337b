// FP8 E4M3 (the "fn" variant of the OCP FP8 spec, NVIDIA's __nv_fp8_e4m3)
// <-> float32: 1 sign, 4 exponent (bias 7) and 3 mantissa bits, no
// infinities, S.1111.111 is NaN, largest finite 448, smallest subnormal 2^-9.
// The storage type of an fp8 KV cache. The encoder rounds to nearest, ties to
// even, and saturates: anything beyond +-448 (infinities included) becomes
// +-448, as cvt.rn.satfinite does on the GPU; NaN stays NaN.
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace tern {

inline constexpr float kFp8E4m3Max = 448.0f;

namespace detail {
// The value of code b, built from its bits: normals as a float with the
// exponent rebiased (+120), subnormals m * 2^-9, S.1111.111 NaN.
constexpr float fp8_e4m3_value(unsigned b) {
  const unsigned exp = (b >> 3) & 0xfu, mant = b & 0x7u;
  float mag = 0;
  if (exp == 0xf && mant == 0x7) {
    mag = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    mag = static_cast<float>(mant) / 512.0f;
  } else {
    mag = std::bit_cast<float>(static_cast<uint32_t>(((exp + 120u) << 23) | (mant << 20)));
  }
  return (b & 0x80u) != 0 ? -mag : mag;
}
inline constexpr std::array<float, 256> kFp8E4m3Values = [] {
  std::array<float, 256> t{};
  for (unsigned b = 0; b < 256; ++b) t[b] = fp8_e4m3_value(b);
  return t;
}();
}  // namespace detail

// Exact (every e4m3 value is a float): a table lookup.
inline float fp8_e4m3_to_f32(uint8_t b) { return detail::kFp8E4m3Values[b]; }

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
