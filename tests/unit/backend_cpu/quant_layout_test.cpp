// The quantized block layouts against llama.cpp's `gguf` Python package:
// tests/data/quant/<TYPE>.bin (tools/make_quant_fixture.py) holds an input,
// gguf's blocks and gguf's dequantization of them. Every dequantizer must
// reproduce gguf's floats bit for bit (the K-quant fixtures are random bytes,
// so every bit of every field is read), and the Q8_0/Q4_0 quantizers must
// give gguf's bytes exactly.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backend/cpu/quant_reference.h"
#include "quant_test_util.h"

namespace tern::cpu {
namespace {

using quant_test::name;

struct Fixture {
  std::vector<float> x;
  std::vector<uint8_t> blocks;
  std::vector<float> dequantized;
};

Fixture load_fixture(const std::string& type) {
  const std::string path = std::string(TERN_TEST_DATA_DIR) + "/quant/" + type + ".bin";
  std::ifstream in(path, std::ios::binary);
  Fixture f;
  char magic[4] = {};
  uint32_t n = 0, nbytes = 0;
  in.read(magic, 4);
  in.read(reinterpret_cast<char*>(&n), 4);
  in.read(reinterpret_cast<char*>(&nbytes), 4);
  if (!in || std::memcmp(magic, "TQF1", 4) != 0) {
    ADD_FAILURE() << "cannot read " << path;
    return f;
  }
  f.x.resize(n);
  f.blocks.resize(nbytes);
  f.dequantized.resize(n);
  in.read(reinterpret_cast<char*>(f.x.data()), n * 4);
  in.read(reinterpret_cast<char*>(f.blocks.data()), nbytes);
  in.read(reinterpret_cast<char*>(f.dequantized.data()), n * 4);
  if (!in) ADD_FAILURE() << path << " is truncated";
  return f;
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

class QuantLayout : public ::testing::TestWithParam<DType> {};

TEST_P(QuantLayout, DequantizeMatchesGgufBitForBit) {
  const DType dtype = GetParam();
  const Fixture f = load_fixture(name(dtype));
  ASSERT_FALSE(f.x.empty());
  const auto n = static_cast<int64_t>(f.x.size());
  ASSERT_EQ(row_bytes(dtype, n), static_cast<int64_t>(f.blocks.size()));
  std::vector<float> y(f.x.size(), -1.0f);
  dequantize_row(dtype, f.blocks.data(), n, y.data());
  int mismatches = 0;
  for (size_t i = 0; i < y.size() && mismatches < 10; ++i) {
    if (bits(y[i]) != bits(f.dequantized[i])) {
      ++mismatches;
      ADD_FAILURE() << name(dtype) << " element " << i << " (block " << i / dtype_block_size(dtype) << "): tern "
                    << y[i] << ", gguf " << f.dequantized[i];
    }
  }
}

TEST(QuantLayoutBytes, Q8_0AndQ4_0QuantizeToGgufBytes) {
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0}) {
    const Fixture f = load_fixture(name(dtype));
    ASSERT_FALSE(f.x.empty());
    std::vector<uint8_t> ours(f.blocks.size(), 0xAA);
    quantize_row(dtype, f.x.data(), static_cast<int64_t>(f.x.size()), ours.data());
    const auto block_bytes = static_cast<size_t>(dtype_block_bytes(dtype));
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_EQ(ours[i], f.blocks[i]) << name(dtype) << " byte " << i % block_bytes << " of block " << i / block_bytes;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantLayout,
                         ::testing::Values(DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K),
                         [](const auto& info) { return name(info.param); });

}  // namespace
}  // namespace tern::cpu
