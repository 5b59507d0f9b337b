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
  const auto u = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;  // |f|'s bits
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7f);  // NaN
  if (a >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7e);  // 448 and beyond, infinity included
  if (a < 0x3c800000u) {
    // Below 2^-6, the subnormal codes: |f| in units of 2^-9 (an exact
    // power-of-two scaling), rounded by rint (nearest, ties to even); 8
    // units is 2^-6, whose code is 8 too.
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(std::nearbyint(std::bit_cast<float>(a) * 512.0f)));
  }
  // A normal: the float's 23 mantissa bits rounded to 3 (nearest, ties to
  // even), a carry moving into the exponent; the exponent rebiased from 127
  // to 7. Below 448 this rounds at most to 448, never to the NaN code.
  const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
  return static_cast<uint8_t>(sign | static_cast<uint8_t>((r >> 20) - (120u << 3)));
}

}  // namespace tern
