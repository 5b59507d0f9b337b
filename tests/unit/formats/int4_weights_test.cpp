// Int4 layers against a plain reference: random 4-bit values, zero points,
// scales and group maps are packed here by loops written from each format's
// description (AutoAWQ GEMM, GPTQ v1/v2, compressed-tensors pack-quantized),
// written to a real folder, and the loader's bf16 must equal (q - z) * s
// rounded to bf16, on shapes with odd and ragged group counts; kept as
// Q4_0 / Q8_0 blocks, the values must be (q - z) * s exactly. Then every
// malformed layer (shape, dtype, missing tensor, group size, zero points,
// g_idx, scales) must be refused naming the tensor.
#include "formats/int4_weights.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "base/bf16.h"

namespace tern {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

constexpr char kPrefix[] = "model.layers.0.mlp.up_proj";

// A layer in plain form: q [out][in] and z, s [groups][out], g_idx [in].
struct Layer {
  int64_t out = 0, in = 0, groups = 0;
  std::vector<int> q, zero, g_idx;
  std::vector<float> scale;  // exactly representable in fp16 and bf16

  float expected(int64_t o, int64_t i) const {
    const size_t gz = static_cast<size_t>(g_idx[static_cast<size_t>(i)] * out + o);
    return bf16_to_f32(f32_to_bf16(static_cast<float>(q[static_cast<size_t>(o * in + i)] - zero[gz]) * scale[gz]));
  }
};

// Groups of `width` consecutive channels, or (shuffled) any channel order.
Layer random_layer(int64_t out, int64_t in, int64_t width, bool symmetric, bool shuffled, uint32_t seed) {
  std::mt19937 rng(seed);
  Layer l;
  l.out = out;
  l.in = in;
  l.groups = (in + width - 1) / width;
  std::uniform_int_distribution<int> nib(0, 15);
  for (int64_t k = 0; k < out * in; ++k) l.q.push_back(nib(rng));
  // Scales of 1..15 sixteenths times a power of two: exact in fp16 and bf16.
  std::uniform_int_distribution<int> mant(1, 15), expo(-9, -3);
  for (int64_t k = 0; k < l.groups * out; ++k) {
    l.zero.push_back(symmetric ? 8 : nib(rng));
    l.scale.push_back(std::ldexp(static_cast<float>(mant(rng) * (k % 2 ? -1 : 1)), expo(rng) - 4));
  }
  for (int64_t i = 0; i < in; ++i) l.g_idx.push_back(static_cast<int>(i / width));
  if (shuffled) std::shuffle(l.g_idx.begin(), l.g_idx.end(), rng);
  return l;
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// 8 nibbles into a word, value(n) in nibble n.
template <typename F>
int32_t word(F value) {
  uint32_t w = 0;
  for (int n = 0; n < 8; ++n) w |= static_cast<uint32_t>(value(n) & 0xF) << (4 * n);
  return static_cast<int32_t>(w);
}

struct Tensor {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};
using Tensors = std::map<std::string, Tensor>;

std::vector<uint8_t> f16_scales(const Layer& l, bool out_major) {
  std::vector<uint16_t> s;
  if (out_major) {
    for (int64_t o = 0; o < l.out; ++o)
      for (int64_t g = 0; g < l.groups; ++g) s.push_back(f32_to_f16(l.scale[static_cast<size_t>(g * l.out + o)]));
  } else {
    for (float v : l.scale) s.push_back(f32_to_f16(v));
  }
  return bytes_of(s);
}

Tensors pack_awq(const Layer& l) {
  static constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // column 8j + kOrder[n] in nibble n
  std::vector<int32_t> qweight, qzeros;
  for (int64_t i = 0; i < l.in; ++i)
    for (int64_t j = 0; j < l.out / 8; ++j)
      qweight.push_back(word([&](int n) { return l.q[static_cast<size_t>((8 * j + kOrder[n]) * l.in + i)]; }));
  for (int64_t g = 0; g < l.groups; ++g)
    for (int64_t j = 0; j < l.out / 8; ++j)
      qzeros.push_back(word([&](int n) { return l.zero[static_cast<size_t>(g * l.out + 8 * j + kOrder[n])]; }));
  const std::string p = kPrefix;
  return {{p + ".qweight", {DType::kI32, {l.in, l.out / 8}, bytes_of(qweight)}},
          {p + ".qzeros", {DType::kI32, {l.groups, l.out / 8}, bytes_of(qzeros)}},
          {p + ".scales", {DType::kF16, {l.groups, l.out}, f16_scales(l, false)}}};
}

Tensors pack_gptq(const Layer& l, bool v1) {
  std::vector<int32_t> qweight, qzeros;
  for (int64_t k = 0; k < l.in / 8; ++k)
    for (int64_t o = 0; o < l.out; ++o)
      qweight.push_back(word([&](int n) { return l.q[static_cast<size_t>(o * l.in + 8 * k + n)]; }));
  for (int64_t g = 0; g < l.groups; ++g)
    for (int64_t j = 0; j < l.out / 8; ++j)
      qzeros.push_back(word([&](int n) { return l.zero[static_cast<size_t>(g * l.out + 8 * j + n)] - (v1 ? 1 : 0); }));
  const std::string p = kPrefix;
  return {{p + ".qweight", {DType::kI32, {l.in / 8, l.out}, bytes_of(qweight)}},
          {p + ".qzeros", {DType::kI32, {l.groups, l.out / 8}, bytes_of(qzeros)}},
          {p + ".scales", {DType::kF16, {l.groups, l.out}, f16_scales(l, false)}},
          {p + ".g_idx", {DType::kI32, {l.in}, bytes_of(std::vector<int32_t>(l.g_idx.begin(), l.g_idx.end()))}}};
}

Tensors pack_compressed_tensors(const Layer& l, bool symmetric, bool act_order = false) {
  const int64_t words = (l.in + 7) / 8, zero_rows = (l.out + 7) / 8;
  std::vector<int32_t> packed, zp;
  for (int64_t o = 0; o < l.out; ++o)
    for (int64_t k = 0; k < words; ++k)
      packed.push_back(word([&](int n) { return 8 * k + n < l.in ? l.q[size_t(o * l.in + 8 * k + n)] : 0; }));
  for (int64_t j = 0; j < zero_rows; ++j)
    for (int64_t g = 0; g < l.groups; ++g)
      zp.push_back(word([&](int n) { return 8 * j + n < l.out ? l.zero[size_t(g * l.out + 8 * j + n)] : 0; }));
  std::vector<uint16_t> scale;  // bf16, [out][groups]
  for (int64_t o = 0; o < l.out; ++o)
    for (int64_t g = 0; g < l.groups; ++g) scale.push_back(f32_to_bf16(l.scale[static_cast<size_t>(g * l.out + o)]));
  const std::string p = kPrefix;
  Tensors t = {{p + ".weight_packed", {DType::kI32, {l.out, words}, bytes_of(packed)}},
               {p + ".weight_scale", {DType::kBF16, {l.out, l.groups}, bytes_of(scale)}},
               {p + ".weight_shape", {DType::kI64, {2}, bytes_of(std::vector<int64_t>{l.out, l.in})}}};
  if (!symmetric) t[p + ".weight_zero_point"] = {DType::kI32, {zero_rows, l.groups}, bytes_of(zp)};
  if (act_order) {
    t[p + ".weight_g_idx"] = {DType::kI32, {l.in}, bytes_of(std::vector<int32_t>(l.g_idx.begin(), l.g_idx.end()))};
  }
  return t;
}

Int4Config config_of(Int4Scheme scheme, int64_t group, bool symmetric, bool act_order = false, bool v1 = true) {
  Int4Config c;
  c.scheme = scheme;
  c.group_size = group;
  c.symmetric = symmetric;
  c.act_order = act_order;
  c.zero_minus_one = scheme == Int4Scheme::kGptq && v1;
  return c;
}

class Int4WeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "tern_int4_XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  Result<std::vector<uint16_t>> load(const Tensors& tensors, const Int4Config& config, int64_t out, int64_t in) {
    std::vector<TensorToWrite> list;
    for (const auto& [name, t] : tensors) list.push_back({name, t.dtype, t.shape, t.data});
    auto bytes = serialize_safetensors(list);
    EXPECT_TRUE(bytes.is_ok()) << bytes.status().to_string();
    {
      std::ofstream f(dir_ + "/model.safetensors", std::ios::binary | std::ios::trunc);
      f << *bytes;
    }
    auto ckpt = Checkpoint::open(dir_);
    EXPECT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
    std::vector<std::string> used;
    auto w = dequantize_int4_linear(*ckpt, config, kPrefix, out, in, &used);
    if (w.is_ok()) used_ = used;
    return w;
  }

  void expect_equal(const Layer& l, const std::vector<uint16_t>& w) {
    ASSERT_EQ(w.size(), static_cast<size_t>(l.out * l.in));
    int mismatches = 0;
    for (int64_t o = 0; o < l.out; ++o) {
      for (int64_t i = 0; i < l.in; ++i) {
        const float got = bf16_to_f32(w[static_cast<size_t>(o * l.in + i)]);
        if (got != l.expected(o, i) && ++mismatches <= 5) {
          ADD_FAILURE() << "W[" << o << "][" << i << "] = " << got << ", expected " << l.expected(o, i);
        }
      }
    }
    EXPECT_EQ(mismatches, 0);
  }

  std::string dir_;
  std::vector<std::string> used_;
};

TEST_F(Int4WeightsTest, AwqGemmMatchesReference) {
  // {out, in, group}: 3 groups (odd), one group per row (-1), 5 groups of 128.
  for (auto [out, in, group] : {std::tuple{16, 96, 32}, {24, 64, 0}, {8, 640, 128}}) {
    const Layer l = random_layer(out, in, group > 0 ? group : in, false, false, static_cast<uint32_t>(out * in));
    auto w = load(pack_awq(l), config_of(Int4Scheme::kAwqGemm, group, false), out, in);
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    expect_equal(l, *w);
  }
  EXPECT_EQ(used_.size(), 3u);
}

TEST_F(Int4WeightsTest, GptqMatchesReferenceInEachLayout) {
  struct Case {
    int64_t out, in, group;
    bool sym, act_order, v1;
  };
  // Ragged last groups (200 = 3 x 64 + 8; 72 < 128), odd counts, act order, v1 and v2 zero points.
  for (const Case& c : {Case{16, 200, 64, true, false, true}, Case{24, 72, 128, false, false, true},
                        Case{8, 96, 32, false, false, false}, Case{16, 192, 64, false, true, true},
                        Case{32, 136, 16, true, true, false}}) {
    SCOPED_TRACE(::testing::Message() << c.out << "x" << c.in << " group " << c.group << " sym " << c.sym
                                      << " act_order " << c.act_order << " v1 " << c.v1);
    Layer l = random_layer(c.out, c.in, c.group, c.sym, c.act_order, static_cast<uint32_t>(c.out + c.in));
    if (!c.sym && c.v1) {
      for (int& z : l.zero) z = std::max(z, 1);  // v1 cannot store a zero point of 0
    }
    auto w = load(pack_gptq(l, c.v1), config_of(Int4Scheme::kGptq, c.group, c.sym, c.act_order, c.v1), c.out, c.in);
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    expect_equal(l, *w);
  }
}

TEST_F(Int4WeightsTest, GptqWithoutGIdxUsesConsecutiveGroups) {
  const Layer l = random_layer(8, 64, 32, true, false, 7);
  Tensors t = pack_gptq(l, true);
  t.erase(std::string(kPrefix) + ".g_idx");
  auto w = load(t, config_of(Int4Scheme::kGptq, 32, true), 8, 64);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  expect_equal(l, *w);
}

TEST_F(Int4WeightsTest, CompressedTensorsMatchesReference) {
  // out 13 and in 100 are no multiples of 8: padded words; 4 groups, the last ragged; channel strategy;
  // actorder "group" (weight_g_idx).
  for (auto [out, in, group, sym, act_order] :
       {std::tuple{13, 100, 32, false, false}, {13, 100, 32, true, false}, {16, 64, 0, false, false},
        {24, 192, 64, true, false}, {13, 100, 32, false, true}}) {
    SCOPED_TRACE(::testing::Message() << out << "x" << in << " group " << group << " sym " << sym << " act_order "
                                      << act_order);
    const Layer l =
        random_layer(out, in, group > 0 ? group : in, sym, act_order, static_cast<uint32_t>(in * 3 + out));
    auto w = load(pack_compressed_tensors(l, sym, act_order),
                  config_of(Int4Scheme::kCompressedTensors, group, sym, act_order), out, in);
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    expect_equal(l, *w);
  }
}

// ggml's Q4_0 / Q8_0 blocks decoded by hand: d (fp16), then 16 bytes of
// nibbles (input j low, j + 16 high, minus 8) or 32 int8 values.
std::vector<float> decode(const Int4Layer& layer, int64_t out, int64_t in) {
  std::vector<float> w;
  const uint8_t* p = layer.data.data();
  for (int64_t b = 0; b < out * in / 32; ++b) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    const float d = f16_to_f32(h);
    float block[32];
    if (layer.dtype == DType::kQ4_0) {
      for (int j = 0; j < 16; ++j) {
        block[j] = static_cast<float>((p[2 + j] & 0xF) - 8) * d;
        block[j + 16] = static_cast<float>((p[2 + j] >> 4) - 8) * d;
      }
      p += 18;
    } else {
      for (int j = 0; j < 32; ++j) block[j] = static_cast<float>(static_cast<int8_t>(p[2 + j])) * d;
      p += 34;
    }
    w.insert(w.end(), block, block + 32);
  }
  EXPECT_EQ(p, layer.data.data() + layer.data.size());
  return w;
}

TEST_F(Int4WeightsTest, KeepsExactLayersAsGgmlBlocks) {
  struct Case {
    Int4Scheme scheme;
    int64_t out, in, group;
    bool sym, act_order;
    DType want;
  };
  for (const Case& c : {Case{Int4Scheme::kGptq, 16, 192, 64, true, false, DType::kQ4_0},
                        Case{Int4Scheme::kGptq, 16, 200, 32, true, false, DType::kBF16},   // 200 is no whole blocks
                        Case{Int4Scheme::kGptq, 16, 128, 32, true, true, DType::kBF16},    // groups reordered
                        Case{Int4Scheme::kAwqGemm, 16, 96, 32, false, false, DType::kQ8_0},
                        Case{Int4Scheme::kAwqGemm, 16, 64, 16, false, false, DType::kBF16},  // blocks span groups
                        Case{Int4Scheme::kCompressedTensors, 13, 96, 96, true, false, DType::kQ4_0},
                        Case{Int4Scheme::kCompressedTensors, 13, 128, 64, false, false, DType::kQ8_0}}) {
    SCOPED_TRACE(::testing::Message() << int4_method_name(c.scheme) << " " << c.out << "x" << c.in << " group "
                                      << c.group << " sym " << c.sym << " act_order " << c.act_order);
    const Layer l = random_layer(c.out, c.in, c.group, c.sym, c.act_order, static_cast<uint32_t>(c.in + 7 * c.out));
    const Tensors t = c.scheme == Int4Scheme::kGptq      ? pack_gptq(l, true)
                      : c.scheme == Int4Scheme::kAwqGemm ? pack_awq(l)
                                                         : pack_compressed_tensors(l, c.sym);
    std::vector<TensorToWrite> list;
    for (const auto& [name, tensor] : t) list.push_back({name, tensor.dtype, tensor.shape, tensor.data});
    auto bytes = serialize_safetensors(list);
    ASSERT_TRUE(bytes.is_ok());
    std::ofstream(dir_ + "/model.safetensors", std::ios::binary | std::ios::trunc) << *bytes;
    auto ckpt = Checkpoint::open(dir_);
    ASSERT_TRUE(ckpt.is_ok()) << ckpt.status().to_string();
    auto layer = load_int4_linear(*ckpt, config_of(c.scheme, c.group, c.sym, c.act_order), kPrefix, c.out, c.in);
    ASSERT_TRUE(layer.is_ok()) << layer.status().to_string();
    EXPECT_EQ(layer->dtype, c.want);
    if (c.want == DType::kBF16) {
      ASSERT_EQ(layer->data.size(), static_cast<size_t>(c.out * c.in * 2));
      std::vector<uint16_t> w(static_cast<size_t>(c.out * c.in));
      std::memcpy(w.data(), layer->data.data(), layer->data.size());
      expect_equal(l, w);
      continue;
    }
    const std::vector<float> w = decode(*layer, c.out, c.in);
    int mismatches = 0;
    for (int64_t o = 0; o < c.out; ++o) {
      for (int64_t i = 0; i < c.in; ++i) {
        const size_t gz = static_cast<size_t>(l.g_idx[static_cast<size_t>(i)] * c.out + o);
        const float exact = static_cast<float>(l.q[static_cast<size_t>(o * c.in + i)] - l.zero[gz]) * l.scale[gz];
        mismatches += w[static_cast<size_t>(o * c.in + i)] != exact;
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST_F(Int4WeightsTest, ScalesFp16CannotHoldStayBf16) {
  // compressed-tensors writes bf16 scales; one below fp16's normal range is not an fp16 value.
  Layer l = random_layer(8, 64, 32, true, false, 9);
  l.scale[3] = std::ldexp(1.0f + 1.0f / 128, -20);
  auto layer = [&]() -> Result<Int4Layer> {
    std::vector<TensorToWrite> list;
    const Tensors t = pack_compressed_tensors(l, true);
    for (const auto& [name, tensor] : t) list.push_back({name, tensor.dtype, tensor.shape, tensor.data});
    std::ofstream(dir_ + "/model.safetensors", std::ios::binary | std::ios::trunc) << *serialize_safetensors(list);
    auto ckpt = Checkpoint::open(dir_);
    if (!ckpt.is_ok()) return ckpt.status();
    return load_int4_linear(*ckpt, config_of(Int4Scheme::kCompressedTensors, 32, true), kPrefix, 8, 64);
  }();
  ASSERT_TRUE(layer.is_ok()) << layer.status().to_string();
  EXPECT_EQ(layer->dtype, DType::kBF16);
}

// ---- malformed layers: each refused, naming the tensor and the fault.

void expect_error(const Result<std::vector<uint16_t>>& r, ErrorCode code, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  for (const std::string& part : parts) EXPECT_THAT(r.status().message(), HasSubstr(part));
}

TEST_F(Int4WeightsTest, RefusesMissingTensors) {
  const Layer l = random_layer(16, 64, 32, false, false, 1);
  Tensors t = pack_awq(l);
  t.erase(std::string(kPrefix) + ".scales");
  expect_error(load(t, config_of(Int4Scheme::kAwqGemm, 32, false), 16, 64), ErrorCode::kNotFound,
               {std::string(kPrefix) + ".scales", "missing"});
  Tensors c = pack_compressed_tensors(l, false);
  c.erase(std::string(kPrefix) + ".weight_zero_point");
  expect_error(load(c, config_of(Int4Scheme::kCompressedTensors, 32, false), 16, 64), ErrorCode::kNotFound,
               {"weight_zero_point"});
  Tensors g = pack_gptq(l, true);
  g.erase(std::string(kPrefix) + ".g_idx");
  expect_error(load(g, config_of(Int4Scheme::kGptq, 32, false, /*act_order=*/true), 16, 64), ErrorCode::kNotFound,
               {"g_idx"});
}

TEST_F(Int4WeightsTest, RefusesWrongShapesAndDtypes) {
  const Layer l = random_layer(16, 64, 32, false, false, 2);
  // The layer is 16 x 64 but the config's group size says 16: qzeros/scales have 2 groups, not 4.
  expect_error(load(pack_awq(l), config_of(Int4Scheme::kAwqGemm, 16, false), 16, 64), ErrorCode::kInvalidArgument,
               {"qzeros", "has shape [2, 2], expected [4, 2]", "AWQ"});
  // A layer the model expects to be 32 wide.
  expect_error(load(pack_gptq(l, true), config_of(Int4Scheme::kGptq, 32, false), 32, 64),
               ErrorCode::kInvalidArgument, {"qweight", "[8, 16]", "[8, 32]"});
  Tensors t = pack_awq(l);
  t[std::string(kPrefix) + ".scales"].dtype = DType::kI16;
  expect_error(load(t, config_of(Int4Scheme::kAwqGemm, 32, false), 16, 64), ErrorCode::kInvalidArgument,
               {"scales", "dtype I16", "F16 or BF16 or F32"});
  Tensors c = pack_compressed_tensors(l, true);
  c[std::string(kPrefix) + ".weight_shape"].data = bytes_of(std::vector<int64_t>{16, 63});
  expect_error(load(c, config_of(Int4Scheme::kCompressedTensors, 32, true), 16, 64), ErrorCode::kInvalidArgument,
               {"weight_shape", "[16, 63]"});
}

TEST_F(Int4WeightsTest, RefusesGroupSizesAndWidthsThePackingCannotHold) {
  const Layer l = random_layer(16, 96, 32, false, false, 3);
  expect_error(load(pack_awq(l), config_of(Int4Scheme::kAwqGemm, 64, false), 16, 96), ErrorCode::kInvalidArgument,
               {"group_size 64 does not divide in_features 96"});
  expect_error(load({}, config_of(Int4Scheme::kAwqGemm, 32, false), 12, 64), ErrorCode::kInvalidArgument,
               {"out_features 12 is not a multiple of 8"});
  expect_error(load({}, config_of(Int4Scheme::kGptq, 32, false), 16, 60), ErrorCode::kInvalidArgument,
               {"multiples of 8"});
}

TEST_F(Int4WeightsTest, RefusesBadZeroPointsGIdxAndScales) {
  Layer l = random_layer(16, 64, 32, true, false, 5);
  // A v2 checkpoint (zero points stored as 8) read as v1: 9 everywhere.
  expect_error(load(pack_gptq(l, false), config_of(Int4Scheme::kGptq, 32, true, false, /*v1=*/true), 16, 64),
               ErrorCode::kInvalidArgument, {"qzeros", "zero point 9", "sym=true"});
  // Reordered groups without desc_act.
  Layer shuffled = random_layer(16, 64, 32, true, true, 6);
  expect_error(load(pack_gptq(shuffled, true), config_of(Int4Scheme::kGptq, 32, true), 16, 64),
               ErrorCode::kUnsupported, {"g_idx", "reordered", "desc_act"});
  // g_idx naming a group that does not exist.
  Layer bad = l;
  bad.g_idx[5] = 7;
  Tensors t = pack_gptq(l, true);
  t[std::string(kPrefix) + ".g_idx"].data = bytes_of(std::vector<int32_t>(bad.g_idx.begin(), bad.g_idx.end()));
  expect_error(load(t, config_of(Int4Scheme::kGptq, 32, true, true), 16, 64), ErrorCode::kInvalidArgument,
               {"g_idx", "input channel 5 to group 7"});
  // A NaN scale.
  Tensors n = pack_awq(random_layer(16, 64, 32, false, false, 8));
  std::vector<uint8_t>& s = n[std::string(kPrefix) + ".scales"].data;
  s[6] = 0x00;
  s[7] = 0x7e;  // fp16 NaN at [0, 3]
  expect_error(load(n, config_of(Int4Scheme::kAwqGemm, 32, false), 16, 64), ErrorCode::kInvalidArgument,
               {"scales", "non-finite scale at [0, 3]"});
  // A zero-point tensor in a symmetric compressed-tensors layer.
  Tensors c = pack_compressed_tensors(l, false);
  expect_error(load(c, config_of(Int4Scheme::kCompressedTensors, 32, true), 16, 64), ErrorCode::kInvalidArgument,
               {"weight_zero_point", "symmetric"});
}

}  // namespace
}  // namespace tern
