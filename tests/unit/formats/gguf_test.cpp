// GGUF reader and writer tests: round trips through GgufWriter for every
// metadata type and many tensor types, then one test per way a file can be
// broken (hand-assembled bytes), each checking the error code and that the
// message names the file, the offset and the key or tensor at fault.
#include "formats/gguf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <limits>

#include "formats/gguf_writer.h"

namespace tern {
namespace {

using ::testing::HasSubstr;

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

Result<GgufFile> parse_text(const std::string& bytes) { return GgufFile::parse(as_bytes(bytes), "t.gguf"); }

// Parses bytes that must fail and returns the error.
Status parse_fails(const std::string& bytes) {
  auto r = parse_text(bytes);
  EXPECT_FALSE(r.is_ok()) << "parsed a broken file";
  if (r.is_ok()) return internal_error("parsed");
  EXPECT_THAT(r.status().message(), HasSubstr("t.gguf: "));
  return r.status();
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + 7 * i);
  return v;
}

// Little-endian byte assembly for hand-made files.
class Bytes {
 public:
  Bytes& u8(uint8_t v) { return le(v, 1); }
  Bytes& u32(uint32_t v) { return le(v, 4); }
  Bytes& u64(uint64_t v) { return le(v, 8); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    out_.append(s);
    return *this;
  }
  Bytes& raw(std::string_view s) {
    out_.append(s);
    return *this;
  }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    out_.append("GGUF");
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  // A tensor info: name, dims (ne order), ggml type id, offset.
  Bytes& tensor(std::string_view name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
  // Zero padding to `alignment`, then `n` data bytes.
  Bytes& data(uint64_t n, uint64_t alignment = 32) {
    out_.append((alignment - out_.size() % alignment) % alignment, '\0');
    out_.append(n, '\x5a');
    return *this;
  }
  size_t size() const { return out_.size(); }
  const std::string& str() const { return out_; }

 private:
  Bytes& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  std::string out_;
};

constexpr uint32_t kF32 = 0;
constexpr uint32_t kQ8_0 = 8;

// A file with one F32 tensor "w" of `dims` at `offset`, `data_bytes` of data.
std::string one_tensor(std::vector<uint64_t> dims, uint64_t offset, uint64_t data_bytes, uint32_t type = kF32) {
  return Bytes().header(1, 0).tensor("w", std::move(dims), type, offset).data(data_bytes).str();
}

// A file with no tensors and one key of type `type` whose value bytes are `value`.
std::string one_key(std::string_view key, uint32_t type, const std::string& value) {
  return Bytes().header(0, 1).str(key).u32(type).raw(value).str();
}

// A writer holding every metadata type, empty arrays included, and tensors.
struct Sample {
  std::vector<uint8_t> f32 = pattern(4 * 6, 1);
  std::vector<uint8_t> q8 = pattern(34 * 2, 2);
  std::vector<uint8_t> q4k = pattern(144 * 3, 3);
  GgufWriter writer;

  Sample() {
    EXPECT_TRUE(writer.add("general.architecture", "ernie4_5"));
    EXPECT_TRUE(writer.add("ernie4_5.block_count", uint32_t{18}));
    EXPECT_TRUE(writer.add("tokenizer.ggml.tokens", std::vector<std::string>{"<unk>", "", "\xe4\xb8\x96"}));
    EXPECT_TRUE(writer.add("t.bools", std::vector<bool>{true, false}));
    EXPECT_TRUE(writer.add("t.f64", 2.5));
    EXPECT_TRUE(writer.add_tensor("a", GgmlType::kF32, {3, 2}, f32));
    EXPECT_TRUE(writer.add_tensor("b", GgmlType::kQ8_0, {32, 2}, q8));
    EXPECT_TRUE(writer.add_tensor("c", GgmlType::kQ4_K, {256, 3}, q4k));
  }
};

TEST(GgufRoundTrip, EveryMetadataTypeKeepsItsTypeValueAndOrder) {
  GgufWriter w;
  ASSERT_TRUE(w.add("k.u8", uint8_t{250}));
  ASSERT_TRUE(w.add("k.i8", int8_t{-7}));
  ASSERT_TRUE(w.add("k.u16", uint16_t{65535}));
  ASSERT_TRUE(w.add("k.i16", int16_t{-32768}));
  ASSERT_TRUE(w.add("k.u32", uint32_t{4294967295u}));
  ASSERT_TRUE(w.add("k.i32", int32_t{-123456789}));
  ASSERT_TRUE(w.add("k.f32", -0.375f));
  ASSERT_TRUE(w.add("k.bool", true));
  ASSERT_TRUE(w.add("k.string", std::string("\xe4\xb8\x96\xe7\x95\x8c with a \0 inside", 21)));
  ASSERT_TRUE(w.add("k.u64", uint64_t{18446744073709551615ull}));
  ASSERT_TRUE(w.add("k.i64", int64_t{std::numeric_limits<int64_t>::min()}));
  ASSERT_TRUE(w.add("k.f64", 1e-300));
  ASSERT_TRUE(w.add("a.u8", std::vector<uint8_t>{1, 2, 3}));
  ASSERT_TRUE(w.add("a.i8", std::vector<int8_t>{-1, 0, 1}));
  ASSERT_TRUE(w.add("a.u16", std::vector<uint16_t>{}));
  ASSERT_TRUE(w.add("a.i16", std::vector<int16_t>{-300, 300}));
  ASSERT_TRUE(w.add("a.u32", std::vector<uint32_t>{0, 7}));
  ASSERT_TRUE(w.add("a.i32", std::vector<int32_t>{2, 3, 3, 1}));
  ASSERT_TRUE(w.add("a.f32", std::vector<float>{0.0f, -1.5f, 1e30f}));
  ASSERT_TRUE(w.add("a.bool", std::vector<bool>{true, false, true}));
  ASSERT_TRUE(w.add("a.string", std::vector<std::string>{"a", "", "\xc3\xbc"}));
  ASSERT_TRUE(w.add("a.u64", std::vector<uint64_t>{1ull << 63}));
  ASSERT_TRUE(w.add("a.i64", std::vector<int64_t>{-5, 5}));
  ASSERT_TRUE(w.add("a.f64", std::vector<double>{0.1, 0.2}));
  ASSERT_TRUE(w.add("a.empty_strings", std::vector<std::string>{}));
  const std::string bytes = w.serialize();

  auto f = parse_text(bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_TRUE(f->tensors().empty());
  ASSERT_EQ(f->metadata().size(), 25u);
  EXPECT_EQ(f->metadata()[0].key, "k.u8");
  EXPECT_EQ(f->metadata()[24].key, "a.empty_strings");

  EXPECT_EQ(*f->get_u8("k.u8"), 250);
  EXPECT_EQ(*f->get_i8("k.i8"), -7);
  EXPECT_EQ(*f->get_u16("k.u16"), 65535);
  EXPECT_EQ(*f->get_i16("k.i16"), -32768);
  EXPECT_EQ(*f->get_u32("k.u32"), 4294967295u);
  EXPECT_EQ(*f->get_i32("k.i32"), -123456789);
  EXPECT_EQ(*f->get_f32("k.f32"), -0.375f);
  EXPECT_EQ(*f->get_bool("k.bool"), true);
  EXPECT_EQ(*f->get_string("k.string"), std::string_view("\xe4\xb8\x96\xe7\x95\x8c with a \0 inside", 21));
  EXPECT_EQ(*f->get_u64("k.u64"), 18446744073709551615ull);
  EXPECT_EQ(*f->get_i64("k.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*f->get_f64("k.f64"), 1e-300);

  auto i32 = f->get_i32_array("a.i32");
  ASSERT_TRUE(i32.is_ok());
  EXPECT_EQ(std::vector<int32_t>(i32->begin(), i32->end()), (std::vector<int32_t>{2, 3, 3, 1}));
  auto f32 = f->get_f32_array("a.f32");
  ASSERT_TRUE(f32.is_ok());
  EXPECT_EQ(std::vector<float>(f32->begin(), f32->end()), (std::vector<float>{0.0f, -1.5f, 1e30f}));
  auto strings = f->get_string_array("a.string");
  ASSERT_TRUE(strings.is_ok());
  EXPECT_EQ(std::vector<std::string>(strings->begin(), strings->end()),
            (std::vector<std::string>{"a", "", "\xc3\xbc"}));
  EXPECT_TRUE(f->get_string_array("a.empty_strings")->empty());
  EXPECT_EQ(f->find("a.u16")->type_string(), "array of u16");
  EXPECT_EQ(*f->find("a.bool")->get_if<std::vector<bool>>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(*f->find("a.u64")->get_if<std::vector<uint64_t>>(), std::vector<uint64_t>{1ull << 63});
  EXPECT_EQ(*f->find("a.f64")->get_if<std::vector<double>>(), (std::vector<double>{0.1, 0.2}));

  // Parsed values equal the written ones, so rewriting gives the same bytes.
  GgufWriter again;
  for (const GgufKeyValue& kv : f->metadata()) ASSERT_TRUE(again.add(kv.key, kv.value));
  EXPECT_EQ(again.serialize(), bytes);
}

TEST(GgufRoundTrip, TensorsOfEveryCommonTypeKeepNameTypeDimsAndBytes) {
  struct Case {
    GgmlType type;
    std::vector<int64_t> dims;
    size_t bytes;
  };
  const std::vector<Case> cases = {
      {GgmlType::kF32, {5, 3}, 60},       {GgmlType::kF16, {7}, 14},         {GgmlType::kBF16, {2, 2, 2, 2}, 32},
      {GgmlType::kQ8_0, {64, 3}, 34 * 6}, {GgmlType::kQ4_0, {32}, 18},       {GgmlType::kQ4_1, {32, 2}, 40},
      {GgmlType::kQ5_0, {96}, 66},        {GgmlType::kQ5_1, {32, 1, 2}, 48}, {GgmlType::kQ2_K, {256, 2}, 168},
      {GgmlType::kQ3_K, {256}, 110},      {GgmlType::kQ4_K, {512}, 288},     {GgmlType::kQ5_K, {256, 1}, 176},
      {GgmlType::kQ6_K, {256, 3}, 630},   {GgmlType::kQ8_K, {256}, 292},     {GgmlType::kI32, {3}, 12},
      {GgmlType::kF32, {0, 4}, 0},        {GgmlType::kF64, {}, 8},
  };
  std::vector<std::vector<uint8_t>> data;
  GgufWriter w;
  for (size_t i = 0; i < cases.size(); ++i) {
    data.push_back(pattern(cases[i].bytes, static_cast<uint8_t>(i)));
    ASSERT_TRUE(w.add_tensor("t" + std::to_string(i), cases[i].type, cases[i].dims, data.back()))
        << ggml_type_name(cases[i].type);
  }
  const std::string bytes = w.serialize();
  auto f = parse_text(bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  ASSERT_EQ(f->tensors().size(), cases.size());
  EXPECT_EQ(f->data_offset() % 32, 0u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const GgufTensor& t = f->tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, "t" + std::to_string(i));
    EXPECT_EQ(f->find_tensor(t.name), &t);
    EXPECT_EQ(t.type, cases[i].type);
    EXPECT_EQ(t.dims, cases[i].dims);
    EXPECT_EQ(t.offset % 32, 0u);
    EXPECT_TRUE(std::equal(t.data.begin(), t.data.end(), data[i].begin(), data[i].end()));
    if (!t.data.empty()) {
      EXPECT_EQ(static_cast<uint64_t>(t.data.data() - as_bytes(bytes).data()), f->data_offset() + t.offset);
    }
  }
  EXPECT_EQ(f->find_tensor("missing"), nullptr);
}

TEST(GgufRoundTrip, GeneralAlignmentSetsTheOffsetsTheReaderExpects) {
  auto d = pattern(4 * 3, 9);
  GgufWriter w;
  ASSERT_TRUE(w.add(std::string(kGgufAlignmentKey), uint32_t{128}));
  ASSERT_TRUE(w.add_tensor("x", GgmlType::kF32, {3}, d));
  ASSERT_TRUE(w.add_tensor("y", GgmlType::kF32, {3}, d));
  const std::string bytes = w.serialize();
  auto f = parse_text(bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->alignment(), 128u);
  EXPECT_EQ(f->data_offset() % 128, 0u);
  EXPECT_EQ(f->tensors()[1].offset, 128u);
  EXPECT_EQ(bytes.size(), f->data_offset() + 256);  // every tensor padded, the last too
}

TEST(GgufRoundTrip, WriteFileThenOpenMapsTheSameTensors) {
  Sample s;
  const auto path = std::filesystem::temp_directory_path() / ("tern_gguf_" + std::to_string(getpid()) + ".gguf");
  ASSERT_TRUE(s.writer.write_file(path.string()));
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
  auto f = GgufFile::open(path.string());
  std::filesystem::remove(path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->name(), path.string());
  ASSERT_EQ(f->tensors().size(), 3u);
  const GgufTensor* c = f->find_tensor("c");
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(std::equal(c->data.begin(), c->data.end(), s.q4k.begin(), s.q4k.end()));
  EXPECT_EQ(*f->get_u32("ernie4_5.block_count"), 18u);
}

TEST(GgufRoundTrip, WriteFileIntoAMissingFolderIsAnIoErrorNamingWhy) {
  Sample s;
  Status st = s.writer.write_file("/nonexistent-tern-dir/m.gguf");
  EXPECT_EQ(st.code(), ErrorCode::kIo);
  EXPECT_THAT(st.message(), HasSubstr("cannot create /nonexistent-tern-dir/m.gguf.tmp: No such file or directory"));
}

TEST(GgufRoundTrip, WriterRefusesWhatTheReaderWouldRefuse) {
  auto d = pattern(34, 1);
  GgufWriter w;
  ASSERT_TRUE(w.add("k", uint8_t{1}));
  EXPECT_EQ(w.add("k", uint8_t{2}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(w.add("", uint8_t{2}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(w.add(std::string(65536, 'k'), uint8_t{2}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(w.add(std::string(kGgufAlignmentKey), uint32_t{48}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(w.add(std::string(kGgufAlignmentKey), uint64_t{64}).code(), ErrorCode::kInvalidArgument);
  ASSERT_TRUE(w.add_tensor("q", GgmlType::kQ8_0, {32}, d));
  EXPECT_EQ(w.add_tensor("q", GgmlType::kQ8_0, {32}, d).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor(std::string(64, 'n'), GgmlType::kQ8_0, {32}, d).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("r", GgmlType::kQ8_0, {33}, d).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("r", GgmlType::kQ8_0, {64}, d).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("r", GgmlType::kQ8_0, {32, -1}, d).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(w.add_tensor("r", GgmlType::kF32, {1, 1, 1, 1, 1}, {}).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(parse_text(w.serialize()).is_ok());
}

TEST(GgmlTypes, BlockLayoutsMatchGgml) {
  const std::vector<std::tuple<GgmlType, uint32_t, uint32_t>> expected = {
      {GgmlType::kF32, 1, 4},      {GgmlType::kF16, 1, 2},      {GgmlType::kBF16, 1, 2},
      {GgmlType::kQ4_0, 32, 18},   {GgmlType::kQ4_1, 32, 20},   {GgmlType::kQ5_0, 32, 22},
      {GgmlType::kQ5_1, 32, 24},   {GgmlType::kQ8_0, 32, 34},   {GgmlType::kQ2_K, 256, 84},
      {GgmlType::kQ3_K, 256, 110}, {GgmlType::kQ4_K, 256, 144}, {GgmlType::kQ5_K, 256, 176},
      {GgmlType::kQ6_K, 256, 210}, {GgmlType::kQ8_K, 256, 292}, {GgmlType::kIQ4_XS, 256, 136},
  };
  for (const auto& [type, block, bytes] : expected) {
    const GgmlTypeInfo& info = ggml_type_info(type);
    EXPECT_EQ(info.block_size, block) << info.name;
    EXPECT_EQ(info.block_bytes, bytes) << info.name;
  }
  EXPECT_EQ(ggml_type_info(4u), nullptr);  // Q4_2, removed from ggml
  EXPECT_EQ(ggml_type_info(1000u), nullptr);
  const int64_t q4k[] = {512, 3};
  EXPECT_EQ(ggml_tensor_bytes(GgmlType::kQ4_K, q4k), 2u * 144 * 3);
  const int64_t ragged[] = {300};
  EXPECT_FALSE(ggml_tensor_bytes(GgmlType::kQ4_K, ragged).has_value());
  EXPECT_EQ(ggml_type_to_dtype(GgmlType::kBF16), DType::kBF16);
  EXPECT_FALSE(ggml_type_to_dtype(GgmlType::kQ4_1).has_value());  // a quantized type tern does not compute with
}

TEST(GgufAccessors, MissingKeyAndWrongTypeNameTheKeyAndBothTypes) {
  Sample s;
  auto f = parse_text(s.writer.serialize());
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  auto missing = f->get_u32("ernie4_5.context_length");
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("t.gguf: key 'ernie4_5.context_length' is missing"));
  auto wrong = f->get_i32("ernie4_5.block_count");
  EXPECT_EQ(wrong.status().code(), ErrorCode::kParse);
  EXPECT_THAT(wrong.status().message(), HasSubstr("key 'ernie4_5.block_count' is u32, expected i32"));
  EXPECT_THAT(f->get_f32_array("tokenizer.ggml.tokens").status().message(),
              HasSubstr("is array of string, expected array of f32"));
  EXPECT_THAT(f->get_string("t.f64").status().message(), HasSubstr("is f64, expected string"));
  EXPECT_EQ(*f->get_uint("ernie4_5.block_count"), 18u);
  EXPECT_EQ(f->get_uint("t.f64").status().code(), ErrorCode::kParse);
}

TEST(GgufAccessors, GetUintTakesAnyNonNegativeInteger) {
  GgufWriter w;
  ASSERT_TRUE(w.add("a", int32_t{7}));
  ASSERT_TRUE(w.add("b", uint64_t{1} << 40));
  ASSERT_TRUE(w.add("c", int16_t{-1}));
  auto f = parse_text(w.serialize());
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(*f->get_uint("a"), 7u);
  EXPECT_EQ(*f->get_uint("b"), uint64_t{1} << 40);
  EXPECT_THAT(f->get_uint("c").status().message(), HasSubstr("key 'c' is -1, expected >= 0"));
}

// Every prefix of a valid file is either an error or, once all tensor bytes
// are in (only the last tensor's padding missing), the same file.
TEST(GgufMalformed, TruncationAtEveryOffsetFailsCleanly) {
  Sample s;
  const std::string full = s.writer.serialize();
  auto whole = parse_text(full);
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
  const GgufTensor& last = whole->tensors().back();
  const size_t needed = whole->data_offset() + last.offset + last.data.size();
  for (size_t len = 0; len < full.size(); ++len) {
    // A buffer of exactly `len` bytes, so a sanitizer build catches a read past it.
    std::vector<uint8_t> prefix(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));
    auto r = GgufFile::parse(prefix, "t.gguf");
    if (len >= needed) {
      EXPECT_TRUE(r.is_ok()) << "length " << len << ": " << r.status().to_string();
      continue;
    }
    ASSERT_FALSE(r.is_ok()) << "length " << len;
    EXPECT_TRUE(r.status().code() == ErrorCode::kParse || r.status().code() == ErrorCode::kOutOfRange)
        << r.status().to_string();
    EXPECT_THAT(r.status().message(), HasSubstr("t.gguf: offset "));
  }
}

// Each byte in turn set to 0xff or 0x00: an error or a file whose tensors
// lie inside the input, never a crash.
TEST(GgufMalformed, EveryByteCorruptedGivesAnErrorOrAValidFile) {
  Sample s;
  const std::string full = s.writer.serialize();
  for (char c : {'\xff', '\0', '\x80'}) {
    for (size_t i = 0; i < full.size(); ++i) {
      std::string bad = full;
      bad[i] = c;
      auto r = parse_text(bad);
      if (!r.is_ok()) continue;
      for (const GgufTensor& t : r->tensors()) {
        EXPECT_TRUE(t.data.empty() || (t.data.data() >= as_bytes(bad).data() &&
                                       t.data.data() + t.data.size() <= as_bytes(bad).data() + bad.size()));
      }
    }
  }
}

TEST(GgufMalformed, BadMagicIsNotGguf) {
  Status st = parse_fails("GGUG" + Bytes().u32(3).u64(0).u64(0).str());
  EXPECT_EQ(st.code(), ErrorCode::kParse);
  EXPECT_THAT(st.message(), HasSubstr("offset 0: bad magic 'GGUG', expected 'GGUF'"));
  EXPECT_THAT(parse_fails("GG").message(), HasSubstr("file is 2 bytes, too short for the magic"));
  EXPECT_EQ(parse_fails("").code(), ErrorCode::kParse);
}

TEST(GgufMalformed, VersionOneAndFourAreUnsupported) {
  Status v1 = parse_fails(Bytes().header(0, 0, 1).str());
  EXPECT_EQ(v1.code(), ErrorCode::kUnsupported);
  EXPECT_THAT(v1.message(), HasSubstr("offset 4: GGUF version 1"));
  EXPECT_THAT(v1.message(), HasSubstr("tern reads versions 2 and 3"));
  Status v4 = parse_fails(Bytes().header(0, 0, 4).str());
  EXPECT_EQ(v4.code(), ErrorCode::kUnsupported);
  EXPECT_THAT(v4.message(), HasSubstr("GGUF version 4 is not supported"));
  EXPECT_EQ(parse_fails(Bytes().header(0, 0, 0).str()).code(), ErrorCode::kUnsupported);
}

TEST(GgufMalformed, BigEndianFilesAreRefusedAsSuch) {
  Status st = parse_fails(Bytes().header(0, 0, 0x03000000).str());
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_THAT(st.message(), HasSubstr("version 3 written big-endian"));
}

TEST(GgufMalformed, VersionTwoIsRead) {
  auto r = parse_text(Bytes().header(1, 1, 2).str("k").u32(4).u32(9).tensor("w", {2}, kF32, 0).data(8).str());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->version(), 2u);
  EXPECT_EQ(*r->get_u32("k"), 9u);
}

TEST(GgufMalformed, HugeCountsFailBeforeAllocating) {
  Status tensors = parse_fails(Bytes().header(uint64_t{1} << 63, 0).str());
  EXPECT_EQ(tensors.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(tensors.message(), HasSubstr("offset 8: tensor count 9223372036854775808 is past the limit"));
  Status kv = parse_fails(Bytes().header(0, ~uint64_t{0}).str());
  EXPECT_EQ(kv.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(kv.message(), HasSubstr("offset 16: key/value count 18446744073709551615"));
  // Under the limits but more than the bytes left could ever hold.
  Status left = parse_fails(Bytes().header(1000, 1000).raw(std::string(100, 'x')).str());
  EXPECT_EQ(left.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(left.message(), HasSubstr("1000 tensors and 1000 keys need at least"));
}

TEST(GgufMalformed, StringLengthNear2To64IsRefused) {
  Status key = parse_fails(Bytes().header(0, 1).u64(~uint64_t{0}).raw("abcdefgh").str());
  EXPECT_EQ(key.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(key.message(), HasSubstr("offset 24: key length 18446744073709551615 is past the limit"));
  Status value = parse_fails(one_key("general.name", 8, Bytes().u64(~uint64_t{0} - 7).raw("abcdefgh").str()));
  EXPECT_EQ(value.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(value.message(), HasSubstr("key 'general.name': string value length 18446744073709551608"));
  // Under the limit, past the end.
  Status past = parse_fails(one_key("general.name", 8, Bytes().u64(1000).raw("abcdefgh").str()));
  EXPECT_EQ(past.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(past.message(), HasSubstr("offset 48: key 'general.name': string value length 1000 is past the end"));
}

TEST(GgufMalformed, ArrayLengthTimesElementSizeOverflowIsRefused) {
  // 2^61 + 1 u64 elements: times 8 wraps to 8 bytes without a checked multiply.
  Status wrap = parse_fails(one_key("a", 9, Bytes().u32(10).u64((uint64_t{1} << 61) + 1).u64(0).str()));
  EXPECT_EQ(wrap.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(wrap.message(), HasSubstr("key 'a': array length 2305843009213693953 is past the limit"));
  // Under the element limit, past the bytes left.
  Status past = parse_fails(one_key("a", 9, Bytes().u32(4).u64(1000).u64(0).str()));
  EXPECT_EQ(past.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(past.message(), HasSubstr("array of 1000 u32 needs at least 4000 bytes but the file has 8 left"));
  // Strings take at least their 8-byte length each.
  Status strings = parse_fails(one_key("a", 9, Bytes().u32(8).u64(3).u64(0).u64(0).str()));
  EXPECT_THAT(strings.message(), HasSubstr("array of 3 string needs at least 24 bytes"));
  // An element string past the end.
  Status element = parse_fails(one_key("a", 9, Bytes().u32(8).u64(1).u64(99).str()));
  EXPECT_THAT(element.message(), HasSubstr("key 'a': array string length 99 is past the end"));
}

TEST(GgufMalformed, NestedArraysAndUnknownValueTypesAreRefused) {
  Status nested = parse_fails(one_key("a", 9, Bytes().u32(9).u64(1).u32(4).u64(0).str()));
  EXPECT_EQ(nested.code(), ErrorCode::kUnsupported);
  EXPECT_THAT(nested.message(), HasSubstr("key 'a': arrays of arrays are not supported"));
  Status unknown = parse_fails(one_key("a", 13, "xxxx"));
  EXPECT_EQ(unknown.code(), ErrorCode::kParse);
  EXPECT_THAT(unknown.message(), HasSubstr("offset 33: key 'a': value type id 13 is unknown"));
  Status element = parse_fails(one_key("a", 9, Bytes().u32(99).u64(0).str()));
  EXPECT_THAT(element.message(), HasSubstr("array element type id 99 is unknown"));
}

TEST(GgufMalformed, BoolOtherThanZeroOrOneIsRefused) {
  Status st = parse_fails(one_key("b", 7, "\x02"));
  EXPECT_EQ(st.code(), ErrorCode::kParse);
  EXPECT_THAT(st.message(), HasSubstr("key 'b': bool value is 2, not 0 or 1"));
  Status arr = parse_fails(one_key("b", 9, Bytes().u32(7).u64(2).u8(1).u8(0xff).str()));
  EXPECT_THAT(arr.message(), HasSubstr("array bool is 255, not 0 or 1"));
}

TEST(GgufMalformed, DuplicateKeysAndTensorNamesAreRefused) {
  Status key = parse_fails(Bytes().header(0, 2).str("k").u32(0).u8(1).str("k").u32(0).u8(2).str());
  EXPECT_EQ(key.code(), ErrorCode::kParse);
  EXPECT_THAT(key.message(), HasSubstr("offset 38: key 'k' appears twice"));
  Status tensor = parse_fails(Bytes().header(2, 0).tensor("w", {1}, kF32, 0).tensor("w", {1}, kF32, 32).data(64).str());
  EXPECT_EQ(tensor.code(), ErrorCode::kParse);
  EXPECT_THAT(tensor.message(), HasSubstr("tensor 'w' appears twice"));
  EXPECT_THAT(parse_fails(Bytes().header(0, 1).str("").u32(0).u8(1).u8(0).str()).message(), HasSubstr("key is empty"));
}

TEST(GgufMalformed, BadAlignmentValuesAreRefused) {
  auto with_alignment = [](uint32_t type, const std::string& value) {
    return Bytes().header(1, 1).str("general.alignment").u32(type).raw(value).tensor("w", {1}, kF32, 0).data(4).str();
  };
  Status zero = parse_fails(with_alignment(4, Bytes().u32(0).str()));
  EXPECT_EQ(zero.code(), ErrorCode::kParse);
  EXPECT_THAT(zero.message(), HasSubstr("key 'general.alignment': alignment 0 is not a power of two"));
  EXPECT_THAT(parse_fails(with_alignment(4, Bytes().u32(48).str())).message(), HasSubstr("48 is not a power of two"));
  EXPECT_THAT(parse_fails(with_alignment(10, Bytes().u64(32).str())).message(), HasSubstr("is u64, expected u32"));
  EXPECT_EQ(parse_fails(with_alignment(4, Bytes().u32(1u << 31).str())).code(), ErrorCode::kOutOfRange);
  // A power of two other than 32 is honoured: offset 8 is aligned to 8.
  auto eight = parse_text(Bytes()
                              .header(2, 1)
                              .str("general.alignment")
                              .u32(4)
                              .u32(8)
                              .tensor("a", {2}, kF32, 0)
                              .tensor("b", {2}, kF32, 8)
                              .data(16, 8)
                              .str());
  ASSERT_TRUE(eight.is_ok()) << eight.status().to_string();
  EXPECT_EQ(eight->alignment(), 8u);
  EXPECT_EQ(eight->data_offset() % 8, 0u);
}

TEST(GgufMalformed, UnknownGgmlTypeIsNamed) {
  Status st = parse_fails(one_tensor({4}, 0, 16, 1000));
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_THAT(st.message(), HasSubstr("tensor 'w': ggml type id 1000 is unknown"));
  EXPECT_THAT(parse_fails(one_tensor({4}, 0, 16, 4)).message(), HasSubstr("ggml type id 4 is unknown"));
}

TEST(GgufMalformed, DimsWhoseProductOverflowsAreRefused) {
  Status elements = parse_fails(one_tensor({uint64_t{1} << 32, uint64_t{1} << 32, 1}, 0, 0));
  EXPECT_EQ(elements.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(elements.message(), HasSubstr("tensor 'w': dims [4294967296, 4294967296, 1] of F32 have more than 2^63"));
  // 2^62 elements fit, their 2^64 bytes do not.
  Status bytes = parse_fails(one_tensor({uint64_t{1} << 61, 2}, 0, 0));
  EXPECT_EQ(bytes.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(bytes.message(), HasSubstr("need more than 2^64 bytes"));
  Status dim = parse_fails(one_tensor({uint64_t{1} << 63}, 0, 0));
  EXPECT_EQ(dim.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(dim.message(), HasSubstr("ne[0] = 9223372036854775808 is past 2^63"));
  Status rank = parse_fails(one_tensor({1, 1, 1, 1, 1}, 0, 4));
  EXPECT_EQ(rank.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(rank.message(), HasSubstr("5 dimensions, at most 4"));
}

TEST(GgufMalformed, Ne0NotAWholeNumberOfBlocksIsRefused) {
  Status st = parse_fails(one_tensor({33, 2}, 0, 34 * 2, kQ8_0));
  EXPECT_EQ(st.code(), ErrorCode::kParse);
  EXPECT_THAT(st.message(), HasSubstr("tensor 'w': ne[0] = 33 is not a multiple of Q8_0's block of 32"));
}

TEST(GgufMalformed, MisalignedOffsetIsRefused) {
  Status st = parse_fails(one_tensor({1}, 4, 8));
  EXPECT_EQ(st.code(), ErrorCode::kParse);
  EXPECT_THAT(st.message(), HasSubstr("tensor 'w': data offset 4 is not a multiple of the alignment 32"));
}

TEST(GgufMalformed, TensorPastTheEndIsRefused) {
  Status st = parse_fails(one_tensor({4}, 0, 15));
  EXPECT_EQ(st.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(st.message(), HasSubstr("offset 24: tensor 'w': data [0, 16) of the data section is past its end"));
  EXPECT_THAT(st.message(), HasSubstr("holds 15 bytes"));
  // offset + size wraps past 2^64.
  Status wrap = parse_fails(one_tensor({16}, ~uint64_t{31}, 64));
  EXPECT_EQ(wrap.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(wrap.message(), HasSubstr("2^64+"));
  // An empty tensor may sit at the very end, not past it.
  EXPECT_TRUE(parse_text(one_tensor({0}, 32, 32)).is_ok());
  EXPECT_EQ(parse_fails(one_tensor({0}, 64, 32)).code(), ErrorCode::kOutOfRange);
}

TEST(GgufMalformed, OverlappingTensorsAreRefused) {
  Status st = parse_fails(Bytes().header(2, 0).tensor("a", {16}, kF32, 0).tensor("b", {4}, kF32, 32).data(64).str());
  EXPECT_EQ(st.code(), ErrorCode::kParse);
  EXPECT_THAT(st.message(), HasSubstr("tensor 'b': data [32, 48) overlaps tensor 'a' at [0, 64)"));
  // Empty tensors own no bytes and overlap nothing.
  EXPECT_TRUE(
      parse_text(Bytes().header(2, 0).tensor("a", {16}, kF32, 0).tensor("b", {0}, kF32, 0).data(64).str()).is_ok());
}

TEST(GgufMalformed, TensorNameLimitsAreEnforced) {
  EXPECT_THAT(parse_fails(Bytes().header(1, 0).tensor("", {1}, kF32, 0).data(4).str()).message(),
              HasSubstr("offset 24: tensor name is empty"));
  Status longer = parse_fails(Bytes().header(1, 0).tensor(std::string(64, 'n'), {1}, kF32, 0).data(4).str());
  EXPECT_EQ(longer.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(longer.message(), HasSubstr("tensor name length 64 is past the limit of 63"));
}

TEST(GgufMalformed, FileWithoutTensorsNeedsNoPadding) {
  auto r = parse_text(one_key("k", 4, Bytes().u32(5).str()));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(*r->get_u32("k"), 5u);
  EXPECT_TRUE(r->tensors().empty());
}

}  // namespace
}  // namespace tern
