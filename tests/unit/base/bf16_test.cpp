#include "base/bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace tern {
namespace {

TEST(Bf16, RoundTripAndRounding) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-2.5f)), -2.5f);
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: rounds to even (1).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.f, 3.f);
  for (int i = 0; i < 10000; ++i) {
    float x = d(rng);
    float y = bf16_to_f32(f32_to_bf16(x));
    EXPECT_LE(std::fabs(x - y), std::fabs(x) * (1.0f / 256)) << x;
  }
}

TEST(F16, RoundTrip) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(-60000.f, 60000.f);
  for (int i = 0; i < 10000; ++i) {
    float x = d(rng);
    float y = f16_to_f32(f32_to_f16(x));
    EXPECT_LE(std::fabs(x - y), std::fabs(x) * (1.0f / 2048) + 1e-7f) << x;
  }
  EXPECT_EQ(f16_to_f32(f32_to_f16(1e-6f)), f16_to_f32(f32_to_f16(1e-6f)));
  EXPECT_NEAR(f16_to_f32(f32_to_f16(1e-6f)), 1e-6f, 1e-7f);  // subnormal range
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
}

}  // namespace
}  // namespace tern
