// silu_mul_fast against the reference silu_mul: gates over the whole range
// where SiLU changes (|g| < 30, plus the ends where e^-g under- or
// overflows, infinities and NaN), every length up to 40 (the masked tail)
// and a model-sized row. The vector exp is a few ulp from expf, and the
// sigmoid, the two products and the division add a rounding each, so each
// output is within 1e-6 relative of the reference (or equal, for infinities
// and NaN). An element's bits do not depend on its place in the call.
#include "backend/cpu/activation_fast.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/reference_kernels.h"

namespace tern::cpu {
namespace {

void expect_close_to_reference(const std::vector<float>& gate, const std::vector<float>& up) {
  const auto n = static_cast<int64_t>(gate.size());
  std::vector<float> want(gate.size()), got(gate.size(), -7.0f);
  silu_mul(gate.data(), up.data(), n, want.data());
  silu_mul_fast(gate.data(), up.data(), n, got.data());
  for (size_t i = 0; i < gate.size(); ++i) {
    if (std::isnan(want[i]) || std::isinf(want[i])) {
      EXPECT_EQ(std::isnan(got[i]), std::isnan(want[i])) << "gate " << gate[i] << " up " << up[i];
      if (std::isinf(want[i])) {
        EXPECT_EQ(got[i], want[i]) << "gate " << gate[i] << " up " << up[i];
      }
      continue;
    }
    EXPECT_NEAR(got[i], want[i], 1e-6 * std::fabs(want[i]) + 1e-37f)
        << "gate " << gate[i] << " up " << up[i] << " n " << n << " i " << i;
  }
}

TEST(SiluMulFast, MatchesReferenceOverTheRange) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> wide(-30.0f, 30.0f), narrow(-4.0f, 4.0f);
  std::vector<float> gate, up;
  for (int i = 0; i < 4096; ++i) {
    gate.push_back(i % 2 ? wide(rng) : narrow(rng));
    up.push_back(narrow(rng));
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float g : {0.0f, -0.0f, 1e-30f, -1e-30f, 87.0f, -87.0f, 88.5f, -88.5f, 89.5f, -89.5f, 100.0f, -100.0f, 1e30f,
                  -1e30f, inf, -inf, std::nanf("")}) {
    gate.push_back(g);
    up.push_back(1.5f);
  }
  expect_close_to_reference(gate, up);
}

TEST(SiluMulFast, EveryTailLengthAndAModelRow) {
  std::mt19937 rng(4);
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (int n : {1, 2, 7, 15, 16, 17, 31, 33, 40, 3072}) {
    std::vector<float> gate(static_cast<size_t>(n)), up(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      gate[static_cast<size_t>(i)] = d(rng);
      up[static_cast<size_t>(i)] = d(rng);
    }
    expect_close_to_reference(gate, up);
  }
}

TEST(SiluMulFast, AnElementHasTheSameBitsWhereverItSits) {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 5.0f);
  const int n = 53;
  std::vector<float> gate(n), up(n), whole(n), alone(n);
  for (int i = 0; i < n; ++i) {
    gate[static_cast<size_t>(i)] = d(rng);
    up[static_cast<size_t>(i)] = d(rng);
  }
  silu_mul_fast(gate.data(), up.data(), n, whole.data());
  for (int i = 0; i < n; ++i) silu_mul_fast(gate.data() + i, up.data() + i, 1, alone.data() + i);
  EXPECT_EQ(0, std::memcmp(whole.data(), alone.data(), sizeof(float) * n));
}

}  // namespace
}  // namespace tern::cpu
