// The FP8 e4m3 quantizer every backend shares (--quantization fp8): per-row
// scales, zero rows, and errors for non-finite or already quantized weights.
// The e4m3 conversion itself (rounding, saturation, subnormals) is
// base/fp8_e4m3.h's, tested in tests/unit/base/fp8_e4m3_test.cpp.
#include "backend/cpu/fp8_quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "base/bf16.h"
#include "base/fp8_e4m3.h"

namespace tern::cpu {
namespace {

TEST(Fp8Quant, RowScaleMapsTheLargestMagnitudeTo448) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-0.05f, 0.05f);
  for (int64_t n : {1, 7, 64, 1000}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = d(rng);
    x[static_cast<size_t>(n / 2)] = -0.08f;  // the largest magnitude, negative
    std::vector<uint8_t> q(x.size());
    float scale = 0;
    ASSERT_TRUE(quantize_fp8_row(x.data(), n, q.data(), &scale).is_ok());
    EXPECT_EQ(scale, 0.08f / 448.0f);
    EXPECT_EQ(q[static_cast<size_t>(n / 2)], 0xfe);
    std::vector<float> back(x.size());
    dequantize_fp8_row(q.data(), scale, n, back.data());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(q[i], f32_to_fp8_e4m3(x[i] / scale)) << i;
      EXPECT_EQ(back[i], fp8_e4m3_to_f32(q[i]) * scale) << i;
      // Half a step: 2^-4 of the value for normals, 2^-10 x scale for subnormals.
      EXPECT_LE(std::fabs(back[i] - x[i]), std::fabs(x[i]) / 16 + std::ldexp(scale, -10) * 1.0001f) << i;
    }
  }
}

TEST(Fp8Quant, ZeroRowGetsScaleZero) {
  std::vector<float> x(33, 0.0f);
  x[3] = -0.0f;
  std::vector<uint8_t> q(x.size(), 0xaa);
  float scale = 1;
  ASSERT_TRUE(quantize_fp8_row(x.data(), 33, q.data(), &scale).is_ok());
  EXPECT_EQ(scale, 0.0f);
  for (uint8_t c : q) EXPECT_EQ(c, 0);
}

TEST(Fp8Quant, NonFiniteValuesAreErrors) {
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    std::vector<float> x = {1.0f, bad, 2.0f};
    std::vector<uint8_t> q(3);
    float scale = 0;
    EXPECT_FALSE(quantize_fp8_row(x.data(), 3, q.data(), &scale).is_ok());
  }
}

TEST(Fp8Quant, MatrixRowsAreIndependentAndQuantizedDtypesRefused) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  const int64_t rows = 5, cols = 24;
  std::vector<uint16_t> words(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) words[static_cast<size_t>(r * cols + c)] = f32_to_bf16(d(rng) * (r + 1));
  }
  for (int64_t c = 0; c < cols; ++c) words[static_cast<size_t>(2 * cols + c)] = 0;  // a zero row
  WeightMatrix w{DType::kBF16, words.data(), rows, cols};
  auto m = quantize_fp8_matrix(w, "test.weight");
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->rows, rows);
  EXPECT_EQ(m->scales[2], 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) row[static_cast<size_t>(c)] = bf16_to_f32(words[static_cast<size_t>(r * cols + c)]);
    std::vector<uint8_t> q(static_cast<size_t>(cols));
    float scale = 0;
    ASSERT_TRUE(quantize_fp8_row(row.data(), cols, q.data(), &scale).is_ok());
    EXPECT_EQ(m->scales[static_cast<size_t>(r)], scale);
    for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(m->values[static_cast<size_t>(r * cols + c)], q[static_cast<size_t>(c)]);
  }
  std::vector<uint8_t> block(34 * 2);
  WeightMatrix q8{DType::kQ8_0, block.data(), 2, 32};
  auto refused = quantize_fp8_matrix(q8, "blk.0.attn_q.weight");
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("blk.0.attn_q.weight"), std::string::npos);
  words[7] = 0x7fc0;  // a NaN weight
  auto nan = quantize_fp8_matrix(w, "test.weight");
  ASSERT_FALSE(nan.is_ok());
  EXPECT_NE(nan.status().message().find("row 0"), std::string::npos);
}

// A matrix large enough to be cut over threads gets every row's own codes
// and scale, and of two bad rows in different ranges the lower is named.
TEST(Fp8Quant, LargeMatrixMatchesRowByRowAndNamesTheFirstBadRow) {
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  const int64_t rows = 4099, cols = 40;
  std::vector<uint16_t> words(static_cast<size_t>(rows * cols));
  for (uint16_t& v : words) v = f32_to_bf16(d(rng));
  WeightMatrix w{DType::kBF16, words.data(), rows, cols};
  auto m = quantize_fp8_matrix(w, "big.weight");
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  std::vector<float> row(static_cast<size_t>(cols));
  std::vector<uint8_t> q(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) row[static_cast<size_t>(c)] = bf16_to_f32(words[static_cast<size_t>(r * cols + c)]);
    float scale = 0;
    ASSERT_TRUE(quantize_fp8_row(row.data(), cols, q.data(), &scale).is_ok());
    ASSERT_EQ(m->scales[static_cast<size_t>(r)], scale) << r;
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(m->values[static_cast<size_t>(r * cols + c)], q[static_cast<size_t>(c)]) << r;
  }
  words[static_cast<size_t>(4000 * cols + 3)] = 0x7f80;  // +inf
  words[static_cast<size_t>(1500 * cols + 9)] = 0x7fc0;  // NaN
  auto bad = quantize_fp8_matrix(w, "big.weight");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("big.weight row 1500:"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace tern::cpu
