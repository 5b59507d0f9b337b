// Q5_0 and Q5_1: blocks decode as ggml lays them out, quantizing rounds to
// within half a step, and a GGUF checkpoint reads such tensors as F32.
#include "formats/gguf_q5.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/bf16.h"
#include "formats/checkpoint.h"
#include "formats/gguf_writer.h"
#include "support/temp_dir.h"

namespace tern {
namespace {

std::vector<float> random_row(int64_t n, uint32_t seed, float offset) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(offset, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = dist(rng);
  return x;
}

TEST(GgufQ5, HandBuiltBlocksDecodeAsGgmlLaysThemOut) {
  // Q5_0: d = 0.5; value j has low nibble j % 16 and fifth bit j / 16 (qh bits
  // 16..31 set), so value j is (j - 16) * d.
  std::vector<uint8_t> q50(22);
  const uint16_t d = f32_to_f16(0.5f);
  std::memcpy(q50.data(), &d, 2);
  const uint32_t qh = 0xFFFF0000u;
  std::memcpy(q50.data() + 2, &qh, 4);
  for (int j = 0; j < 16; ++j) q50[6 + j] = static_cast<uint8_t>(j | (j << 4));
  std::vector<float> out(32);
  dequantize_q5_row(GgmlType::kQ5_0, q50.data(), 32, out.data());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], (j - 16) * 0.5f) << j;

  // Q5_1: d = 0.25, m = -1; the same codes give j * d + m.
  std::vector<uint8_t> q51(24);
  const uint16_t d1 = f32_to_f16(0.25f), m1 = f32_to_f16(-1.0f);
  std::memcpy(q51.data(), &d1, 2);
  std::memcpy(q51.data() + 2, &m1, 2);
  std::memcpy(q51.data() + 4, &qh, 4);
  for (int j = 0; j < 16; ++j) q51[8 + j] = static_cast<uint8_t>(j | (j << 4));
  dequantize_q5_row(GgmlType::kQ5_1, q51.data(), 32, out.data());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], j * 0.25f - 1.0f) << j;
}

TEST(GgufQ5, QuantizedValuesAreWithinHalfAStepAndRequantizeToTheSameBytes) {
  for (GgmlType type : {GgmlType::kQ5_0, GgmlType::kQ5_1}) {
    const int64_t n = 256, block_bytes = ggml_type_info(type).block_bytes;
    const std::vector<float> x = random_row(n, 7, type == GgmlType::kQ5_1 ? 2.0f : 0.0f);
    std::vector<uint8_t> q(static_cast<size_t>(n / 32 * block_bytes));
    quantize_q5_row(type, x.data(), n, q.data());
    std::vector<float> y(static_cast<size_t>(n));
    dequantize_q5_row(type, q.data(), n, y.data());
    for (int64_t b = 0; b < n / 32; ++b) {
      uint16_t hd;
      std::memcpy(&hd, q.data() + b * block_bytes, 2);
      const float step = std::fabs(f16_to_f32(hd));
      ASSERT_GT(step, 0.0f);
      for (int64_t j = 32 * b; j < 32 * b + 32; ++j) {
        // Q5_0 maps the block's largest magnitude to -16 steps, so a value of
        // the other sign near it clamps at +15: up to one step off.
        const bool clamped = type == GgmlType::kQ5_0 && std::fabs(y[j]) == 15 * step;
        EXPECT_LE(std::fabs(y[j] - x[j]), (clamped ? 1.0f : 0.5f) * step * 1.01f + 1e-3f)
            << ggml_type_name(type) << " " << j;
      }
    }
    // Decoded values are on the grid: quantizing them again gives the same blocks.
    std::vector<uint8_t> again(q.size());
    quantize_q5_row(type, y.data(), n, again.data());
    EXPECT_EQ(again, q) << ggml_type_name(type);
  }
}

TEST(GgufQ5, ACheckpointReadsQ5TensorsAsF32) {
  testing::TempDir dir;
  const std::vector<float> x = random_row(64 * 2, 3, 0.0f);
  for (GgmlType type : {GgmlType::kQ5_0, GgmlType::kQ5_1}) {
    std::vector<uint8_t> q(static_cast<size_t>(4 * ggml_type_info(type).block_bytes));
    quantize_q5_row(type, x.data(), 128, q.data());
    GgufWriter w;
    ASSERT_TRUE(w.add_tensor("blk.0.ffn_up.weight", type, {64, 2}, q).is_ok());
    const std::string path = dir.file(std::string(ggml_type_name(type)) + ".gguf");
    ASSERT_TRUE(w.write_file(path).is_ok());
    auto ckpt = Checkpoint::open_gguf(path);
    ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
    auto t = ckpt->require("blk.0.ffn_up.weight", {2, 64});
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    EXPECT_EQ((*t)->dtype, DType::kF32);
    ASSERT_EQ((*t)->data.size(), 128u * 4);
    std::vector<float> want(128), got(128);
    dequantize_q5_row(type, q.data(), 128, want.data());
    std::memcpy(got.data(), (*t)->data.data(), 128 * 4);
    EXPECT_EQ(got, want) << ggml_type_name(type);
  }
}

}  // namespace
}  // namespace tern
