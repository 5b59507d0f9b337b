// The GPU's int4 form (int4_planar.h) against weight_row_to_f32: exact on
// random Q4_0 matrices and on Q8_0 ones holding an int4 checkpoint's
// q4 - zero (as formats/int4_weights.cpp makes them); Q8_0 blocks that 4
// bits with a zero point cannot hold are refused.
#include "backend/cpu/int4_planar.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/quant_blocks.h"
#include "base/bf16.h"
#include "quant_test_util.h"

namespace tern::cpu {
namespace {

void expect_exact(const WeightMatrix& w, const Int4Matrix& m) {
  ASSERT_EQ(m.rows, w.rows);
  ASSERT_EQ(m.cols, w.cols);
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    weight_row_to_f32(w, r, row.data());
    for (int64_t c = 0; c < w.cols; ++c) {
      // Bit for bit: the same fp32 product on both sides.
      const float got = m.value(r, c), want = row[static_cast<size_t>(c)];
      ASSERT_EQ(std::memcmp(&got, &want, sizeof(float)), 0)
          << "row " << r << " col " << c << ": " << got << " vs " << want;
    }
  }
}

// An asymmetric int4 matrix as the loader keeps it: per block a zero in
// [0, 15] and codes q4 - zero with q4 in [0, 15].
std::vector<BlockQ8_0> int4_origin_q8_0(std::mt19937& rng, int64_t rows, int64_t cols) {
  std::vector<BlockQ8_0> blocks(static_cast<size_t>(rows * cols / kQK8_0));
  std::uniform_int_distribution<int> nibble(0, 15);
  std::uniform_real_distribution<float> scale(1e-4f, 2e-2f);
  for (BlockQ8_0& b : blocks) {
    const int zero = nibble(rng);
    b.d = f32_to_f16(scale(rng));
    for (int8_t& q : b.qs) q = static_cast<int8_t>(nibble(rng) - zero);
  }
  return blocks;
}

TEST(Int4Planar, Q4_0IsExact) {
  std::mt19937 rng(1);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 32}, {7, 64}, {33, 96}, {64, 1024}}) {
    const quant_test::QuantMatrix q = quant_test::make_quant(rng, DType::kQ4_0, rows, cols);
    auto m = to_int4_matrix(q.view(), "w");
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    EXPECT_TRUE(int4_representable(q.view()));
    for (uint8_t z : m.value().zeros) ASSERT_EQ(z, 8);
    expect_exact(q.view(), m.value());
  }
}

TEST(Int4Planar, Int4OriginQ8_0IsExact) {
  std::mt19937 rng(2);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 32}, {5, 128}, {31, 256}}) {
    const std::vector<BlockQ8_0> blocks = int4_origin_q8_0(rng, rows, cols);
    const WeightMatrix w{DType::kQ8_0, blocks.data(), rows, cols};
    EXPECT_TRUE(int4_representable(w));
    auto m = to_int4_matrix(w, "w");
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    expect_exact(w, m.value());
  }
}

TEST(Int4Planar, RefusesQ8_0BlocksPast4Bits) {
  std::mt19937 rng(3);
  std::vector<BlockQ8_0> blocks = int4_origin_q8_0(rng, 4, 64);
  // 16 steps: -8 .. 8.
  BlockQ8_0& b = blocks[5];
  for (int i = 0; i < kQK8_0; ++i) b.qs[i] = static_cast<int8_t>(i % 2 == 0 ? -8 : 0);
  b.qs[7] = 8;
  const WeightMatrix w{DType::kQ8_0, blocks.data(), 4, 64};
  EXPECT_FALSE(int4_representable(w));
  auto m = to_int4_matrix(w, "a down projection");
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(m.status().message().find("row 2 block 1"), std::string::npos) << m.status().to_string();
  // 15 steps fit, also when all codes are negative (a zero above 15).
  for (int i = 0; i < kQK8_0; ++i) b.qs[i] = static_cast<int8_t>(-20 + i % 16);
  EXPECT_TRUE(int4_representable(w));
  auto n = to_int4_matrix(w, "w");
  ASSERT_TRUE(n.is_ok());
  expect_exact(w, n.value());
  // Codes above 15 with none below zero: no zero >= 0 brings them into 4 bits.
  for (int i = 0; i < kQK8_0; ++i) b.qs[i] = static_cast<int8_t>(16 + i % 4);
  EXPECT_FALSE(int4_representable(w));
  EXPECT_FALSE(to_int4_matrix(w, "w").is_ok());
  // A generic Q8_0 matrix (codes up to +-127) is refused.
  const quant_test::QuantMatrix q8 = quant_test::make_quant(rng, DType::kQ8_0, 3, 64);
  EXPECT_FALSE(int4_representable(q8.view()));
  EXPECT_FALSE(to_int4_matrix(q8.view(), "w").is_ok());
}

TEST(Int4Planar, RefusesOtherDtypes) {
  std::mt19937 rng(4);
  const quant_test::QuantMatrix q = quant_test::make_quant(rng, DType::kQ4_K, 2, 256);
  EXPECT_FALSE(int4_representable(q.view()));
  EXPECT_FALSE(to_int4_matrix(q.view(), "w").is_ok());
  std::vector<float> f(64);
  const WeightMatrix fw{DType::kF32, f.data(), 2, 32};
  EXPECT_FALSE(int4_representable(fw));
  EXPECT_EQ(to_int4_matrix(fw, "w").status().code(), ErrorCode::kUnsupported);
}

}  // namespace
}  // namespace tern::cpu
