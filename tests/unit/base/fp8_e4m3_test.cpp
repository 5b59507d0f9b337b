// FP8 E4M3 against an exact reference of the format: the decoder against
// the bit layout spelled out by hand, and the encoder against a brute-force
// search of the 253 finite codes for the nearest value (ties to the even
// code, saturation at +-448), on every midpoint, its neighbours and random
// floats of every magnitude.
#include "base/fp8_e4m3.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace tern {
namespace {

// The value of a code, from the layout: (-1)^s 2^(e-7) (1 + m/8), or
// (-1)^s 2^-6 (m/8) for e = 0; S.1111.111 is NaN.
double reference_value(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s != 0 ? -mag : mag;
}

// Nearest finite code to x by exhaustive search, ties to the even code (its
// mantissa's low bit), beyond the largest magnitude the largest; the sign of
// x kept for zero.
uint8_t reference_encode(float x) {
  const int sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(x));
  int best = 0;
  double best_err = INFINITY;
  for (int code = 0; code < 0x7f; ++code) {  // the non-negative finite codes
    const double err = std::fabs(reference_value(code) - a);
    if (err < best_err || (err == best_err && (code & 1) == 0)) {
      best = code;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(sign | best);
}

std::string bits(uint8_t b) { return std::to_string(b >> 7) + "." + std::to_string((b >> 3) & 15) + "." + std::to_string(b & 7); }

TEST(Fp8E4m3, DecodesEveryCode) {
  for (int code = 0; code < 256; ++code) {
    const double want = reference_value(code);
    const float got = fp8_e4m3_to_f32(static_cast<uint8_t>(code));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << code;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << code;
      EXPECT_EQ(std::signbit(got), code >= 128) << code;
    }
  }
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
}

TEST(Fp8E4m3, EveryFiniteCodeRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;
    EXPECT_EQ(f32_to_fp8_e4m3(fp8_e4m3_to_f32(static_cast<uint8_t>(code))), code) << bits(static_cast<uint8_t>(code));
  }
}

TEST(Fp8E4m3, MidpointsTieToEvenAndNeighboursRoundToNearest) {
  std::vector<float> xs;
  for (int code = 0; code < 0x7e; ++code) {
    const float lo = fp8_e4m3_to_f32(static_cast<uint8_t>(code));
    const float hi = fp8_e4m3_to_f32(static_cast<uint8_t>(code + 1));
    const float mid = (lo + hi) / 2;  // exact: both have 4 significant bits
    xs.insert(xs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f)});
  }
  // Around and past the top: the tie 464 between 448 and the missing 480
  // saturates, as does everything above (infinity included).
  xs.insert(xs.end(), {447.0f, 448.0f, 455.0f, 464.0f, 465.0f, 1e6f, 3e38f, INFINITY});
  // Subnormals and below: half the smallest subnormal is a tie to 0.
  xs.insert(xs.end(), {std::ldexp(1.0f, -10), std::nextafter(std::ldexp(1.0f, -10), 1.0f), std::ldexp(1.0f, -20),
                       1e-30f, std::numeric_limits<float>::denorm_min(), 0.0f});
  for (float x : xs) {
    for (float v : {x, -x}) {
      EXPECT_EQ(bits(f32_to_fp8_e4m3(v)), bits(reference_encode(v))) << v;
    }
  }
  // A few by hand: 1 + 1/16 is a tie between 1 (mantissa 0) and 1.125 (1).
  EXPECT_EQ(f32_to_fp8_e4m3(1.0625f), 0x38);
  EXPECT_EQ(f32_to_fp8_e4m3(1.1875f), 0x3a);  // tie between 1.125 (odd) and 1.25 (even)
  EXPECT_EQ(f32_to_fp8_e4m3(-1e9f), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(3.0f, -10)), 0x02);  // 1.5 x 2^-9: tie between subnormals 1 and 2
}

TEST(Fp8E4m3, NanStaysNanAndZeroKeepsItsSign) {
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(f32_to_fp8_e4m3(NAN))));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(f32_to_fp8_e4m3(-NAN))));
  EXPECT_EQ(f32_to_fp8_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_fp8_e4m3(-0.0f), 0x80);
}

TEST(Fp8E4m3, RandomFloatsOfEveryMagnitude) {
  std::mt19937 rng(20);
  std::uniform_real_distribution<float> exponent(-14.0f, 10.0f);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  for (int i = 0; i < 20000; ++i) {
    float x = std::ldexp(mantissa(rng), static_cast<int>(std::floor(exponent(rng))));
    if (i % 2 != 0) x = -x;
    ASSERT_EQ(bits(f32_to_fp8_e4m3(x)), bits(reference_encode(x))) << x;
  }
}

// Floats of every bit pattern, strided (about a million of the 2^32; the
// encoder was also compared with the reference on all of them once).
TEST(Fp8E4m3, FloatsAcrossTheWholeBitRange) {
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4093) {
    const auto x = std::bit_cast<float>(static_cast<uint32_t>(b));
    if (std::isnan(x)) {
      ASSERT_EQ(f32_to_fp8_e4m3(x) & 0x7f, 0x7f) << b;
      continue;
    }
    ASSERT_EQ(bits(f32_to_fp8_e4m3(x)), bits(reference_encode(x))) << x;
  }
}

}  // namespace
}  // namespace tern
