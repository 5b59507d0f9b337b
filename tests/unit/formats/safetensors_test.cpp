// Safetensors parser tests: a round trip through serialize_safetensors, and
// one test per way a file can be broken, each checking the error code and
// that the message names the file, the tensor and the problem.
#include "formats/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace tern {
namespace {

using ::testing::HasSubstr;

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// A file from a literal header and a data region of `data_size` bytes.
std::string make_file(const std::string& header, size_t data_size = 0, uint64_t header_len_override = 0) {
  const uint64_t len = header_len_override != 0 ? header_len_override : header.size();
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  out += header;
  out.append(data_size, '\x5a');
  return out;
}

Result<SafetensorsFile> parse_text(const std::string& bytes) {
  return SafetensorsFile::parse(as_bytes(bytes), "t.safetensors");
}

// Parses a one-tensor header and returns the error.
Status parse_entry(const std::string& entry, size_t data_size) {
  auto r = parse_text(make_file("{\"w\":" + entry + "}", data_size));
  EXPECT_FALSE(r.is_ok()) << entry;
  return r.status();
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + 7 * i);
  return v;
}

TEST(Safetensors, RoundTripKeepsDtypesShapesBytesAndMetadata) {
  auto bf16 = pattern(2 * 3 * 2, 1);
  auto f16 = pattern(4 * 2, 2);
  auto f32 = pattern(2 * 2 * 4, 3);
  auto scalar = pattern(4, 4);
  std::vector<TensorToWrite> tensors = {
      {"model.norm.weight", DType::kBF16, {2, 3}, bf16},
      {"b.half", DType::kF16, {4}, f16},
      {"a.float", DType::kF32, {2, 2}, f32},
      {"scalar", DType::kF32, {}, scalar},
      {"empty", DType::kBF16, {0, 5}, {}},
  };
  auto bytes = serialize_safetensors(tensors, {{"format", "pt"}, {"note", "你好"}});
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().to_string();

  // HF pads the header so the data region starts 8-byte aligned.
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes->data(), 8);
  EXPECT_EQ(header_len % 8, 0u);
  EXPECT_EQ(bytes->size(), 8 + header_len + bf16.size() + f16.size() + f32.size() + scalar.size());

  auto file = SafetensorsFile::parse(as_bytes(*bytes), "rt.safetensors");
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  EXPECT_EQ(file->name(), "rt.safetensors");
  ASSERT_EQ(file->tensors().size(), 5u);
  // Sorted by name whatever the file order.
  EXPECT_EQ(file->tensors()[0].name, "a.float");
  EXPECT_EQ(file->tensors()[4].name, "scalar");
  EXPECT_EQ(file->metadata().at("format"), "pt");
  EXPECT_EQ(file->metadata().at("note"), "你好");

  for (const auto& w : tensors) {
    const TensorView* t = file->find(w.name);
    ASSERT_NE(t, nullptr) << w.name;
    EXPECT_EQ(t->dtype, w.dtype);
    EXPECT_EQ(t->shape, w.shape);
    ASSERT_EQ(t->data.size(), w.data.size());
    EXPECT_TRUE(std::equal(t->data.begin(), t->data.end(), w.data.begin())) << w.name;
  }
  EXPECT_EQ(file->find("model.norm.weight")->num_elements(), 6u);
  EXPECT_EQ(file->find("model.norm.weight")->shape_string(), "[2, 3]");
  EXPECT_EQ(file->find("scalar")->num_elements(), 1u);
  EXPECT_EQ(file->find("scalar")->shape_string(), "[]");
  EXPECT_EQ(file->find("empty")->num_elements(), 0u);
  EXPECT_EQ(file->find("missing"), nullptr);
  EXPECT_EQ(file->find(""), nullptr);
}

TEST(Safetensors, OpenMapsAFileAndOutlivesMoves) {
  auto data = pattern(8, 9);
  auto bytes = serialize_safetensors({{"x", DType::kF32, {2}, data}});
  ASSERT_TRUE(bytes.is_ok());
  std::string path = std::filesystem::temp_directory_path() / ("tern_st_" + std::to_string(getpid()) + ".safetensors");
  { std::ofstream(path, std::ios::binary) << *bytes; }
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  SafetensorsFile moved = std::move(file).value();
  std::filesystem::remove(path);  // the map keeps the bytes readable
  ASSERT_NE(moved.find("x"), nullptr);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), moved.find("x")->data.begin()));
  EXPECT_EQ(moved.name(), path);
}

TEST(Safetensors, OpenOfMissingFileIsIoError) {
  auto r = SafetensorsFile::open("/nonexistent/dir/model.safetensors");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kIo);
  EXPECT_THAT(r.status().message(), HasSubstr("/nonexistent/dir/model.safetensors"));
}

TEST(Safetensors, EmptyFile) {
  auto r = parse_text("");
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("t.safetensors: file is 0 bytes"));
}

TEST(Safetensors, HeaderLengthPastEndOfFile) {
  auto r = parse_text(make_file("{}", 0, 99));
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_EQ(r.status().message(), "t.safetensors: header length 99 past end of file (size 10)");
}

TEST(Safetensors, HeaderLengthPastLimit) {
  auto r = parse_text(make_file("{}", 0, 200'000'000));
  EXPECT_EQ(r.status().code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(r.status().message(), HasSubstr("header length 200000000 is past the limit"));
}

TEST(Safetensors, TruncatedFile) {
  auto data = pattern(64, 1);
  auto bytes = serialize_safetensors({{"w", DType::kF32, {16}, data}});
  ASSERT_TRUE(bytes.is_ok());
  // Cut inside the data region: the tensor now ends past it.
  auto r = parse_text(bytes->substr(0, bytes->size() - 1));
  EXPECT_EQ(r.status().code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(r.status().message(),
              HasSubstr("t.safetensors: tensor 'w': data_offsets [0, 64] end past the data region (63 bytes)"));
  // Cut inside the header.
  r = parse_text(bytes->substr(0, 20));
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("past end of file (size 20)"));
  // Cut inside the length itself.
  r = parse_text(bytes->substr(0, 5));
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("too short"));
}

TEST(Safetensors, HeaderNotJson) {
  auto r = parse_text(make_file("{\"w\": {\"dtype\": "));
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("t.safetensors: header is not valid JSON"));
  EXPECT_THAT(r.status().message(), HasSubstr("column"));  // says where
  // Trailing bytes after the object are not the space padding HF writes;
  // NUL padding in particular would make nlohmann stop early and ignore them.
  r = parse_text(make_file(std::string("{}\0{\"x\"", 7)));
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("header has a NUL byte at offset 10"));
  r = parse_text(make_file("{}  x"));
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("not valid JSON"));
}

TEST(Safetensors, HeaderNotAnObject) {
  auto r = parse_text(make_file("[1, 2]"));
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("header is array [1,2], expected a JSON object"));
}

TEST(Safetensors, DeeplyNestedHeaderDoesNotOverflowTheStack) {
  const int depth = 200000;
  auto r = parse_text(make_file(std::string(depth, '[') + std::string(depth, ']')));
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("expected a JSON object"));
}

TEST(Safetensors, UnknownDtype) {
  Status s = parse_entry(R"({"dtype":"Q4_K","shape":[1],"data_offsets":[0,1]})", 1);
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_THAT(s.message(), HasSubstr("t.safetensors: tensor 'w': unknown dtype 'Q4_K'"));
  s = parse_entry(R"({"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]})", 1);
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("dtype F8_E4M3 is not supported"));
  s = parse_entry(R"({"dtype":7,"shape":[1],"data_offsets":[0,1]})", 1);
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_THAT(s.message(), HasSubstr("dtype is number 7, expected a string"));
}

TEST(Safetensors, MissingFields) {
  Status s = parse_entry(R"({"shape":[1],"data_offsets":[0,4]})", 4);
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': dtype is missing"));
  s = parse_entry(R"({"dtype":"F32","data_offsets":[0,4]})", 4);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': shape is missing"));
  s = parse_entry(R"({"dtype":"F32","shape":[1]})", 4);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': data_offsets is missing"));
  s = parse_entry(R"("F32")", 4);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': entry is string \"F32\", expected an object"));
}

TEST(Safetensors, BadShapes) {
  Status s = parse_entry(R"({"dtype":"F32","shape":[2,-1],"data_offsets":[0,8]})", 8);
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': shape array [2,-1] has negative dimension -1"));
  s = parse_entry(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,8]})", 8);
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_THAT(s.message(), HasSubstr("expected a non-negative integer"));
  s = parse_entry(R"({"dtype":"F32","shape":"[2]","data_offsets":[0,8]})", 8);
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_THAT(s.message(), HasSubstr("expected an array of integers"));
  s = parse_entry(R"({"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]})", 4);
  EXPECT_EQ(s.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("rank 9"));
  s = parse_entry(R"({"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,4]})", 4);
  EXPECT_EQ(s.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("past 2^63"));
}

TEST(Safetensors, OffsetsPastEndOfData) {
  Status s = parse_entry(R"({"dtype":"F32","shape":[4],"data_offsets":[8,24]})", 16);
  EXPECT_EQ(s.code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(s.message(), "t.safetensors: tensor 'w': data_offsets [8, 24] end past the data region (16 bytes)");
  s = parse_entry(R"({"dtype":"F32","shape":[0],"data_offsets":[18446744073709551615,18446744073709551615]})", 16);
  EXPECT_EQ(s.code(), ErrorCode::kOutOfRange);
}

TEST(Safetensors, BadOffsets) {
  Status s = parse_entry(R"({"dtype":"U8","shape":[0],"data_offsets":[8,4]})", 16);
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_THAT(s.message(), HasSubstr("data_offsets [8, 4] begin after end"));
  s = parse_entry(R"({"dtype":"U8","shape":[4],"data_offsets":[-4,0]})", 16);
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_THAT(s.message(), HasSubstr("expected two non-negative integers"));
  s = parse_entry(R"({"dtype":"U8","shape":[4],"data_offsets":[0,4,8]})", 16);
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_THAT(s.message(), HasSubstr("expected two non-negative integers"));
}

TEST(Safetensors, SizeMismatchNamesBothSizes) {
  auto r = parse_text(make_file(R"({"model.norm.weight":{"dtype":"BF16","shape":[1024],"data_offsets":[0,10]}})", 10));
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_EQ(r.status().message(),
            "t.safetensors: tensor 'model.norm.weight': data_offsets [0, 10] hold 10 bytes but shape [1024] of "
            "BF16 needs 2048");
}

TEST(Safetensors, OverflowInShapeProduct) {
  Status s = parse_entry(R"({"dtype":"BF16","shape":[1099511627776,1099511627776],"data_offsets":[0,0]})", 0);
  EXPECT_EQ(s.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(s.message(),
              HasSubstr("tensor 'w': shape [1099511627776, 1099511627776] has more elements than fit in 64 bits"));
  // Elements fit, bytes do not.
  s = parse_entry(R"({"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]})", 0);
  EXPECT_EQ(s.code(), ErrorCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("needs more bytes than fit in 64 bits"));
}

TEST(Safetensors, OverlappingTensors) {
  auto r = parse_text(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                12));
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(),
              HasSubstr("t.safetensors: tensor 'b': data_offsets [4, 12] overlap tensor 'a' at [0, 8]"));
  // One tensor nested inside a longer one.
  r = parse_text(make_file(R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},)"
                           R"("b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]},)"
                           R"("c":{"dtype":"U8","shape":[2],"data_offsets":[8,10]}})",
                           16));
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("overlap tensor 'a'"));
}

TEST(Safetensors, EmptyTensorsAndGapsAreAccepted) {
  auto r = parse_text(make_file(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,4]},)"
                                R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]},)"
                                R"("c":{"dtype":"U8","shape":[0],"data_offsets":[6,6]},)"
                                R"("d":{"dtype":"U8","shape":[2],"data_offsets":[12,14]}})",
                                16));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->tensors().size(), 4u);
  EXPECT_EQ(r->find("d")->data.size(), 2u);
}

TEST(Safetensors, DuplicateNamesAreRejected) {
  auto r = parse_text(make_file(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                2));
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("t.safetensors: header has key 'a' twice"));
  // A repeated field inside one entry too.
  Status s = parse_entry(R"({"dtype":"U8","dtype":"F32","shape":[1],"data_offsets":[0,1]})", 1);
  EXPECT_EQ(s.code(), ErrorCode::kParse);
  EXPECT_THAT(s.message(), HasSubstr("key 'dtype' twice"));
}

TEST(Safetensors, MetadataMustBeStrings) {
  auto r = parse_text(make_file(R"({"__metadata__":{"format":"pt","n":3}})"));
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("t.safetensors: __metadata__ 'n' is number 3, expected a string"));
  r = parse_text(make_file(R"({"__metadata__":["pt"]})"));
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("expected an object of strings"));
}

TEST(Safetensors, ControlBytesInNamesAreEscapedInMessages) {
  auto r = parse_text(make_file("{\"bad\\nname\":{\"dtype\":\"X\",\"shape\":[],\"data_offsets\":[0,0]}}"));
  EXPECT_EQ(r.status().code(), ErrorCode::kParse);
  EXPECT_THAT(r.status().message(), HasSubstr("tensor 'bad\\x0aname'"));
}

TEST(Safetensors, SerializeRejectsInconsistentInput) {
  auto data = pattern(6, 0);
  auto r = serialize_safetensors({{"w", DType::kF32, {2}, data}});
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("tensor 'w': has 6 bytes but shape [2] of F32 needs 8"));
  r = serialize_safetensors({{"w", DType::kU8, {6}, data}, {"w", DType::kU8, {6}, data}});
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("written twice"));
  r = serialize_safetensors({{"w", DType::kU8, {-6}, data}});
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
}

TEST(Dtype, NamesAndSizes) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI8, DType::kU8, DType::kI16, DType::kI32,
                  DType::kI64, DType::kBool}) {
    EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
  }
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(dtype_size(DType::kBool), 1u);
  EXPECT_EQ(dtype_name(DType::kBF16), "BF16");
  EXPECT_EQ(dtype_from_name("bf16"), std::nullopt);  // case matters, as in the format
}

}  // namespace
}  // namespace tern
