// Compatibility with llama.cpp's own `gguf` Python package: tests/data/gguf/
// fixture.gguf was written by gguf.GGUFWriter (tools/make_gguf_fixture.py).
// tern must read every value it holds, dequantize its Q8_0 and Q4_0 tensors
// back to the source values, and, given the same content, write the same
// bytes (so gguf-py and llama.cpp read what tern writes).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

#include "base/bf16.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"

namespace tern {
namespace {

const std::string kFixture = std::string(TERN_TEST_DATA_DIR) + "/gguf/fixture.gguf";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

uint16_t u16_at(std::span<const uint8_t> b, size_t i) { return static_cast<uint16_t>(b[i] | (b[i + 1] << 8)); }

float f32_at(std::span<const uint8_t> b, size_t i) {
  float f;
  std::memcpy(&f, b.data() + i, 4);  // the test hosts are little-endian, like the file
  return f;
}

template <typename T>
std::vector<T> to_vector(std::span<const T> s) {
  return {s.begin(), s.end()};
}

class GgufFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = GgufFile::open(kFixture);
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    file_ = std::make_unique<GgufFile>(std::move(f).value());
  }

  const GgufTensor& tensor(std::string_view name) const {
    const GgufTensor* t = file_->find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    static const GgufTensor kEmpty;
    return t != nullptr ? *t : kEmpty;
  }

  std::unique_ptr<GgufFile> file_;
};

TEST_F(GgufFixture, ReadsTheModelAndTokenizerKeys) {
  const GgufFile& f = *file_;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  ASSERT_EQ(f.metadata().size(), 39u);
  EXPECT_EQ(f.metadata()[0].key, "general.architecture");
  EXPECT_EQ(*f.get_string("general.architecture"), "ernie4_5");
  EXPECT_EQ(*f.get_string("general.name"), "tern gguf fixture");
  EXPECT_EQ(*f.get_u32("ernie4_5.block_count"), 2u);
  EXPECT_EQ(*f.get_u32("ernie4_5.context_length"), 131072u);
  EXPECT_EQ(*f.get_u32("ernie4_5.embedding_length"), 8u);
  EXPECT_EQ(*f.get_u32("ernie4_5.attention.head_count"), 2u);
  EXPECT_EQ(*f.get_f32("ernie4_5.attention.layer_norm_rms_epsilon"), 1e-5f);
  EXPECT_EQ(*f.get_f32("ernie4_5.rope.freq_base"), 500000.0f);
  EXPECT_EQ(*f.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(to_vector(*f.get_string_array("tokenizer.ggml.tokens")),
            (std::vector<std::string>{"<unk>", "<s>", "</s>", "\xe2\x96\x81hello", "\xe4\xb8\x96\xe7\x95\x8c", ""}));
  EXPECT_EQ(to_vector(*f.get_f32_array("tokenizer.ggml.scores")),
            (std::vector<float>{0.0f, -1.5f, -2.25f, -3.0f, -4.5f, -1000.0f}));
  EXPECT_EQ(to_vector(*f.get_i32_array("tokenizer.ggml.token_type")), (std::vector<int32_t>{2, 3, 3, 1, 1, 6}));
  EXPECT_EQ(*f.get_u32("tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(*f.get_string("tokenizer.chat_template"), "{% for m in messages %}{{ m['content'] }}\n{% endfor %}");
}

TEST_F(GgufFixture, ReadsEveryScalarAndArrayType) {
  const GgufFile& f = *file_;
  EXPECT_EQ(*f.get_u8("test.u8"), 200);
  EXPECT_EQ(*f.get_i8("test.i8"), -100);
  EXPECT_EQ(*f.get_u16("test.u16"), 60000);
  EXPECT_EQ(*f.get_i16("test.i16"), -30000);
  EXPECT_EQ(*f.get_u32("test.u32"), 4000000000u);
  EXPECT_EQ(*f.get_i32("test.i32"), -2000000000);
  EXPECT_EQ(*f.get_f32("test.f32"), 0.15625f);
  EXPECT_EQ(*f.get_bool("test.bool"), true);
  EXPECT_EQ(*f.get_string("test.string"), "h\xc3\xa9llo, \xe4\xb8\x96\xe7\x95\x8c");
  EXPECT_EQ(*f.get_u64("test.u64"), (uint64_t{1} << 63) + 5);
  EXPECT_EQ(*f.get_i64("test.i64"), -(int64_t{1} << 62) - 7);
  EXPECT_EQ(*f.get_f64("test.f64"), 3.141592653589793);

  auto array = [&](const char* key) -> const GgufValue& { return *f.find(key); };
  EXPECT_EQ(*array("test.array.u8").get_if<std::vector<uint8_t>>(), (std::vector<uint8_t>{0, 1, 255}));
  EXPECT_EQ(*array("test.array.i8").get_if<std::vector<int8_t>>(), (std::vector<int8_t>{-128, 0, 127}));
  EXPECT_EQ(*array("test.array.u16").get_if<std::vector<uint16_t>>(), (std::vector<uint16_t>{0, 65535}));
  EXPECT_EQ(*array("test.array.i16").get_if<std::vector<int16_t>>(), (std::vector<int16_t>{-32768, 32767}));
  EXPECT_EQ(to_vector(*f.get_u32_array("test.array.u32")), (std::vector<uint32_t>{7, 4294967295u}));
  EXPECT_EQ(to_vector(*f.get_i32_array("test.array.i32")),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()}));
  EXPECT_EQ(to_vector(*f.get_f32_array("test.array.f32")), (std::vector<float>{1.0f, -0.5f, 1e30f}));
  EXPECT_EQ(*array("test.array.bool").get_if<std::vector<bool>>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(to_vector(*f.get_string_array("test.array.string")),
            (std::vector<std::string>{"a", "", "\xc3\xbc\xc3\xb1\xc3\xae"}));
  EXPECT_EQ(*array("test.array.u64").get_if<std::vector<uint64_t>>(),
            (std::vector<uint64_t>{0, std::numeric_limits<uint64_t>::max()}));
  EXPECT_EQ(*array("test.array.i64").get_if<std::vector<int64_t>>(),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}));
  EXPECT_EQ(*array("test.array.f64").get_if<std::vector<double>>(), (std::vector<double>{0.1, -2.5e-300}));
}

TEST_F(GgufFixture, PlainTensorsHoldTheirSourceValuesInNeOrder) {
  ASSERT_EQ(file_->tensors().size(), 10u);
  EXPECT_EQ(file_->tensors()[0].name, "token_embd.weight");

  const GgufTensor& embd = tensor("token_embd.weight");  // numpy (3, 8)
  EXPECT_EQ(embd.type, GgmlType::kF32);
  EXPECT_EQ(embd.dims, (std::vector<int64_t>{8, 3}));
  for (size_t i = 0; i < 24; ++i) EXPECT_EQ(f32_at(embd.data, 4 * i), 0.25f * i - 2.0f) << i;

  const GgufTensor& norm = tensor("output_norm.weight");
  EXPECT_EQ(norm.type, GgmlType::kF16);
  EXPECT_EQ(norm.dims, (std::vector<int64_t>{8}));
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(f16_to_f32(u16_at(norm.data, 2 * i)), 0.5f * i - 1.0f) << i;

  const GgufTensor& q = tensor("blk.0.attn_q.weight");
  EXPECT_EQ(q.type, GgmlType::kBF16);
  EXPECT_EQ(q.dims, (std::vector<int64_t>{16, 2}));
  for (size_t i = 0; i < 32; ++i) EXPECT_EQ(bf16_to_f32(u16_at(q.data, 2 * i)), 0.125f * i - 2.0f) << i;

  EXPECT_EQ(tensor("blk.0.attn_k.weight").dims, (std::vector<int64_t>{4, 3, 2}));
  const GgufTensor& v = tensor("blk.0.attn_v.weight");
  EXPECT_EQ(v.dims, (std::vector<int64_t>{32, 1, 2, 1}));
  EXPECT_EQ(f16_to_f32(u16_at(v.data, 2 * 63)), -0.5f * 63 + 3.0f);

  const GgufTensor& idx = tensor("blk.0.layer_index");
  EXPECT_EQ(idx.type, GgmlType::kI32);
  ASSERT_EQ(idx.data.size(), 16u);
  const int32_t expected[] = {5, -6, 7, -8};
  for (size_t i = 0; i < 4; ++i) {
    int32_t x;
    std::memcpy(&x, idx.data.data() + 4 * i, 4);
    EXPECT_EQ(x, expected[i]);
  }
}

// Q8_0 block: f16 scale d, 32 int8 q; x = d * q.
TEST_F(GgufFixture, Q8_0TensorDequantizesToTheSourceValues) {
  const GgufTensor& t = tensor("blk.0.ffn_up.weight");
  EXPECT_EQ(t.type, GgmlType::kQ8_0);
  EXPECT_EQ(t.dims, (std::vector<int64_t>{64, 2}));
  ASSERT_EQ(t.data.size(), 4u * 34);
  for (size_t i = 0; i < 128; ++i) {
    const size_t block = (i / 32) * 34;
    const float d = f16_to_f32(u16_at(t.data, block));
    const float x = d * static_cast<int8_t>(t.data[block + 2 + i % 32]);
    const float source = std::sin(static_cast<float>(i) * 0.37f) * 3.0f;
    // Half a step, plus the scale's own rounding to f16 times the largest q.
    EXPECT_NEAR(x, source, d * 0.6f) << i;
  }
}

// Q4_0 block: f16 scale d, 16 bytes; element j is the low nibble of byte j,
// element j + 16 the high nibble; x = d * (nibble - 8).
TEST_F(GgufFixture, Q4_0TensorDequantizesToTheSourceValues) {
  const GgufTensor& t = tensor("blk.0.ffn_down.weight");
  EXPECT_EQ(t.type, GgmlType::kQ4_0);
  EXPECT_EQ(t.dims, (std::vector<int64_t>{64, 1}));
  ASSERT_EQ(t.data.size(), 2u * 18);
  for (size_t i = 0; i < 64; ++i) {
    const size_t block = (i / 32) * 18;
    const float d = f16_to_f32(u16_at(t.data, block));
    const size_t j = i % 32;
    const uint8_t byte = t.data[block + 2 + j % 16];
    const int nibble = j < 16 ? (byte & 15) : (byte >> 4);
    const float source = std::cos(static_cast<float>(i) * 0.21f) * 2.0f;
    EXPECT_NEAR(d * static_cast<float>(nibble - 8), source, std::fabs(d) + 1e-4f) << i;
  }
}

TEST_F(GgufFixture, KQuantTensorsHaveTheirBlockSizes) {
  const GgufTensor& q4k = tensor("blk.0.ffn_gate.weight");
  EXPECT_EQ(q4k.type, GgmlType::kQ4_K);
  EXPECT_EQ(q4k.dims, (std::vector<int64_t>{256, 1}));
  ASSERT_EQ(q4k.data.size(), 144u);
  const GgufTensor& q6k = tensor("blk.1.attn_q.weight");
  EXPECT_EQ(q6k.type, GgmlType::kQ6_K);
  EXPECT_EQ(q6k.dims, (std::vector<int64_t>{256, 2}));
  ASSERT_EQ(q6k.data.size(), 420u);
  // The script fills them with (7 * j + seed) mod 256.
  for (size_t j = 0; j < q4k.data.size(); ++j) EXPECT_EQ(q4k.data[j], static_cast<uint8_t>(7 * j + 11));
  for (size_t j = 0; j < q6k.data.size(); ++j) EXPECT_EQ(q6k.data[j], static_cast<uint8_t>(7 * j + 29));
}

// The other direction: tern's writer, given what gguf-py wrote, writes the
// same bytes, padding and offsets included.
TEST_F(GgufFixture, GgufWriterReproducesTheFileByteForByte) {
  GgufWriter w;
  for (const GgufKeyValue& kv : file_->metadata()) ASSERT_TRUE(w.add(kv.key, kv.value)) << kv.key;
  for (const GgufTensor& t : file_->tensors()) ASSERT_TRUE(w.add_tensor(t.name, t.type, t.dims, t.data)) << t.name;
  EXPECT_EQ(w.alignment(), 64u);
  const std::string expected = read_all(kFixture);
  ASSERT_EQ(expected.size(), 3840u);
  EXPECT_TRUE(w.serialize() == expected) << "tern's GGUF bytes differ from gguf-py's";
}

}  // namespace
}  // namespace tern
