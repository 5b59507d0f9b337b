// `tern quantize` and `tern convert --outtype q8_0`: the type each mix gives
// each tensor (llama-quant.cpp's rules, written out here by hand), that the
// files keep every key, load, and run close to the bf16 file with a bound per
// type, and that bad requests are refused with errors naming the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <tuple>

#include "backend/cpu/quant_reference.h"
#include "base/bf16.h"
#include "formats/checkpoint.h"
#include "model/ernie4_5/ernie4_5_model.h"
#include "model/ernie4_5/gguf_names.h"
#include "model/gguf_quantize.h"
#include "support/tiny_gguf.h"
#include "support/tiny_model.h"

namespace tern {
namespace {

using ernie45::OutType;
constexpr GgmlType F32 = GgmlType::kF32, F16 = GgmlType::kF16, Q8_0 = GgmlType::kQ8_0, Q4_0 = GgmlType::kQ4_0,
                   Q4_K = GgmlType::kQ4_K, Q5_K = GgmlType::kQ5_K, Q6_K = GgmlType::kQ6_K;

// The tensors of an ERNIE GGUF with `layers` layers, hidden width `hidden`
// and FFN width `inter` (ne[0] is a row's length), in the converter's order.
std::vector<GgufTensor> model_tensors(int64_t layers, int64_t hidden, int64_t inter, bool tied) {
  std::vector<GgufTensor> t;
  auto add = [&](std::string name, std::vector<int64_t> dims, GgmlType type) {
    GgufTensor x;
    x.name = std::move(name);
    x.dims = std::move(dims);
    x.type = type;
    t.push_back(std::move(x));
  };
  add("token_embd.weight", {hidden, 1000}, GgmlType::kBF16);
  for (int64_t l = 0; l < layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", {hidden}, F32);
    for (const char* m : {"attn_q", "attn_k", "attn_v", "attn_output"}) add(b + m + ".weight", {hidden, hidden}, F16);
    add(b + "ffn_norm.weight", {hidden}, F32);
    add(b + "ffn_gate.weight", {hidden, inter}, F16);
    add(b + "ffn_up.weight", {hidden, inter}, F16);
    add(b + "ffn_down.weight", {inter, hidden}, F16);
  }
  add("output_norm.weight", {hidden}, F32);
  if (!tied) add("output.weight", {hidden, 1000}, GgmlType::kBF16);
  return t;
}

std::map<std::string, GgmlType> planned(QuantMix mix, const std::vector<GgufTensor>& tensors) {
  const std::vector<GgmlType> types = plan_quant_types(mix, tensors);
  EXPECT_EQ(types.size(), tensors.size());
  std::map<std::string, GgmlType> out;
  for (size_t i = 0; i < tensors.size() && i < types.size(); ++i) out[tensors[i].name] = types[i];
  return out;
}

// llama.cpp's use_more_bits for 16 layers (n/8 = 2, 7n/8 = 14): the first
// two, the last two, and every third from layer 4.
const std::set<int> kMoreBits16 = {0, 1, 4, 7, 10, 13, 14, 15};

TEST(GgufQuantPlan, KMediumMixesGiveQ6KToHalfOfAttnVAndFfnDownAndToOutput) {
  for (auto [mix, base] : {std::pair{QuantMix::kQ4_K_M, Q4_K}, std::pair{QuantMix::kQ5_K_M, Q5_K}}) {
    const auto p = planned(mix, model_tensors(16, 512, 1024, /*tied=*/false));
    EXPECT_EQ(p.at("token_embd.weight"), base);
    EXPECT_EQ(p.at("output.weight"), Q6_K);
    EXPECT_EQ(p.at("output_norm.weight"), F32);
    for (int l = 0; l < 16; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".";
      const GgmlType more = kMoreBits16.count(l) ? Q6_K : base;
      EXPECT_EQ(p.at(b + "attn_v.weight"), more) << b;
      EXPECT_EQ(p.at(b + "ffn_down.weight"), more) << b;
      for (const char* m : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"}) {
        EXPECT_EQ(p.at(b + m + ".weight"), base) << b << m;
      }
      EXPECT_EQ(p.at(b + "attn_norm.weight"), F32);
      EXPECT_EQ(p.at(b + "ffn_norm.weight"), F32);
    }
    // Tied: the embedding is the output too, and gets the output's type.
    EXPECT_EQ(planned(mix, model_tensors(16, 512, 1024, true)).at("token_embd.weight"), Q6_K);
  }
}

TEST(GgufQuantPlan, SingleTypeMixesQuantizeEveryMatrixAlike) {
  for (auto [mix, base, out] : {std::tuple{QuantMix::kQ8_0, Q8_0, Q8_0}, std::tuple{QuantMix::kQ4_0, Q4_0, Q6_K},
                                std::tuple{QuantMix::kQ6_K, Q6_K, Q6_K}}) {
    for (bool tied : {false, true}) {
      const auto tensors = model_tensors(8, 256, 768, tied);
      const auto p = planned(mix, tensors);
      for (const GgufTensor& t : tensors) {
        const bool is_output = t.name == "output.weight" || (tied && t.name == "token_embd.weight");
        const GgmlType want = t.dims.size() == 1 ? F32 : is_output ? out : base;
        EXPECT_EQ(p.at(t.name), want) << t.name << " " << quant_mix_info(mix).name;
      }
    }
  }
}

TEST(GgufQuantPlan, RowsThatDoNotSplitIntoBlocksFallBackAsInLlamaQuantize) {
  // Rows of 64 and 192 (the tiny models): no K-quant fits; llama-quantize
  // writes Q5_0 for Q4_K, Q5_1 for Q5_K and Q8_0 for Q6_K (the output, and
  // attn_v / ffn_down of the last of 3 layers under the K mixes).
  for (auto [mix, fallback] : {std::pair{QuantMix::kQ4_K_M, GgmlType::kQ5_0},
                               std::pair{QuantMix::kQ5_K_M, GgmlType::kQ5_1}, std::pair{QuantMix::kQ6_K, Q8_0}}) {
    const auto tensors = model_tensors(3, 64, 192, false);
    const auto p = planned(mix, tensors);
    for (const GgufTensor& t : tensors) {
      const bool q6k = t.name == "output.weight" || t.name == "blk.2.attn_v.weight" ||
                       t.name == "blk.2.ffn_down.weight";
      EXPECT_EQ(p.at(t.name), t.dims.size() == 1 ? F32 : q6k ? Q8_0 : fallback) << t.name;
    }
  }
  // Q4_0's output rule picks Q6_K when the rows split into 32, which then
  // does not fit 64 either: Q8_0.
  const auto q40 = planned(QuantMix::kQ4_0, model_tensors(3, 64, 192, false));
  EXPECT_EQ(q40.at("output.weight"), Q8_0);
  EXPECT_EQ(q40.at("blk.0.attn_v.weight"), Q4_0);
  // Rows of 48 split into no block: F16, as in llama.cpp.
  for (const QuantMixInfo& m : quant_mixes()) {
    const auto p = planned(m.mix, model_tensors(2, 48, 96, false));
    EXPECT_EQ(p.at("blk.1.attn_q.weight"), F16) << m.name;
    EXPECT_EQ(p.at("output.weight"), F16) << m.name;
    EXPECT_EQ(p.at("blk.1.ffn_down.weight"), m.mix == QuantMix::kQ8_0 || m.mix == QuantMix::kQ4_0 ? m.base : Q8_0)
        << m.name;
  }
}

TEST(GgufQuantPlan, NamesParseInEitherCaseAndUnknownOnesListTheChoices) {
  EXPECT_EQ(*parse_quant_mix("q4_k_m"), QuantMix::kQ4_K_M);
  EXPECT_EQ(*parse_quant_mix("Q5_K_M"), QuantMix::kQ5_K_M);
  EXPECT_EQ(static_cast<uint32_t>(*parse_quant_mix("q8_0")), 7u);
  EXPECT_EQ(static_cast<uint32_t>(*parse_quant_mix("q4_0")), 2u);
  EXPECT_EQ(static_cast<uint32_t>(*parse_quant_mix("q4_k_m")), 15u);
  EXPECT_EQ(static_cast<uint32_t>(*parse_quant_mix("q5_k_m")), 17u);
  EXPECT_EQ(static_cast<uint32_t>(*parse_quant_mix("q6_k")), 18u);
  for (const char* bad : {"q4_k", "q4_1", "q3_k_m", "f16", ""}) {
    auto r = parse_quant_mix(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("'" + std::string(bad) + "'"), std::string::npos) << r.status().to_string();
    EXPECT_NE(r.status().message().find("q4_k_m"), std::string::npos) << r.status().to_string();
  }
}

// ---- Whole files.

// Relative RMS distance of `got` from `want`.
double rel_rms(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

Result<std::vector<float>> logits_of(const std::string& path, const std::vector<int32_t>& ids) {
  TERN_ASSIGN_OR_RETURN(std::unique_ptr<Ernie45Model> m, Ernie45Model::load(path, 2));
  std::vector<float> out(static_cast<size_t>(m->config().vocab_size));
  KvCache cache = m->make_cache(16);
  TERN_RETURN_IF_ERROR(m->forward(ids, cache, out));
  return out;
}

const std::vector<int32_t> kIds = {5, 17, 99, 3, 42, 7, 250, 11};

// The tiny models' rows (64 and 192; 48 and 96 untied) fit no K-quant: what
// each mix writes there. Rows of 48 split into no block at all: F16.
GgmlType tiny_type(QuantMix mix, const GgufTensor& t, bool tied, int64_t layers) {
  if (t.dims.size() == 1) return F32;
  if (t.dims[0] % 32 != 0) return F16;
  const bool is_output = t.name == "output.weight" || (tied && t.name == "token_embd.weight");
  if (mix == QuantMix::kQ4_0) return is_output ? Q8_0 : Q4_0;
  if (mix != QuantMix::kQ4_K_M && mix != QuantMix::kQ5_K_M) return Q8_0;
  // The K mixes: Q6_K (then Q8_0) for the output and for attn_v and ffn_down
  // in the layers use_more_bits picks (the last of 2 or 3); Q5_0 / Q5_1 for the rest.
  const bool more_bits = t.name.rfind("blk." + std::to_string(layers - 1) + ".", 0) == 0 &&
                         (t.name.ends_with(".attn_v.weight") || t.name.ends_with(".ffn_down.weight"));
  if (is_output || more_bits) return Q8_0;
  return mix == QuantMix::kQ4_K_M ? GgmlType::kQ5_0 : GgmlType::kQ5_1;
}

class GgufQuantizeTiny : public ::testing::TestWithParam<std::tuple<std::string, QuantMix>> {
 protected:
  void SetUp() override {
    model_ = std::get<0>(GetParam());
    mix_ = std::get<1>(GetParam());
    bf16_ = tmp_.file("bf16.gguf");
    out_ = tmp_.file("out.gguf");
    Status st = test::convert_folder(std::string(TERN_TEST_DATA_DIR) + "/" + model_, OutType::kBF16, bf16_);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
  }
  test::TempDir tmp_;
  std::string model_, bf16_, out_;
  QuantMix mix_ = QuantMix::kQ8_0;
};

TEST_P(GgufQuantizeTiny, KeepsEveryKeyWritesTheRulesTypesAndRunsCloseToBf16) {
  auto done = quantize_gguf(bf16_, out_, mix_);
  ASSERT_TRUE(done.is_ok()) << done.status().to_string();
  auto in = GgufFile::open(bf16_);
  auto out = GgufFile::open(out_);
  ASSERT_TRUE(in.is_ok() && out.is_ok());

  // Keys: the input's in order and unchanged, then the two llama-quantize sets.
  std::vector<std::string> want_keys, got_keys;
  for (const GgufKeyValue& kv : in->metadata()) {
    if (kv.key == "general.quantization_version" || kv.key == "general.file_type") continue;
    want_keys.push_back(kv.key);
    const GgufValue* v = out->find(kv.key);
    ASSERT_NE(v, nullptr) << kv.key;
    EXPECT_TRUE(*v == kv.value) << kv.key;
  }
  want_keys.push_back("general.quantization_version");
  want_keys.push_back("general.file_type");
  for (const GgufKeyValue& kv : out->metadata()) got_keys.push_back(kv.key);
  EXPECT_EQ(got_keys, want_keys);
  EXPECT_EQ(*out->get_u32("general.file_type"), static_cast<uint32_t>(mix_));
  EXPECT_EQ(*out->get_u32("general.quantization_version"), 2u);

  // Tensors: same names, order and dims; the rule's type; norms byte for byte.
  const bool tied = in->find_tensor("output.weight") == nullptr;
  const auto layers = std::count_if(in->tensors().begin(), in->tensors().end(),
                                    [](const GgufTensor& t) { return t.name.ends_with(".attn_v.weight"); });
  ASSERT_EQ(out->tensors().size(), in->tensors().size());
  for (size_t i = 0; i < in->tensors().size(); ++i) {
    const GgufTensor& a = in->tensors()[i];
    const GgufTensor& b = out->tensors()[i];
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.dims, a.dims) << a.name;
    EXPECT_EQ(b.type, tiny_type(mix_, a, tied, layers)) << a.name;
    if (a.dims.size() == 1) {
      EXPECT_TRUE(std::equal(a.data.begin(), a.data.end(), b.data.begin(), b.data.end())) << a.name;
    }
  }
  EXPECT_EQ(done->num_tensors, in->tensors().size());
  EXPECT_LT(done->bytes_out, done->bytes_in);

  auto want = logits_of(bf16_, kIds);
  auto got = logits_of(out_, kIds);
  ASSERT_TRUE(want.is_ok() && got.is_ok()) << got.status().to_string();
  const double err = rel_rms(*got, *want);
  EXPECT_GT(err, 0.0) << "the quantized weights are used";
  // Q4_0 and the K mixes' 5-bit fallbacks (Q5_0 / Q5_1 on these narrow rows) are coarser than Q8_0 and Q6_K's.
  const bool coarse = mix_ == QuantMix::kQ4_0 || mix_ == QuantMix::kQ4_K_M || mix_ == QuantMix::kQ5_K_M;
  EXPECT_LT(err, coarse ? 0.3 : 0.05) << quant_mix_info(mix_).name;
}

INSTANTIATE_TEST_SUITE_P(TinyModels, GgufQuantizeTiny,
                         ::testing::Combine(::testing::Values("ernie-tiny", "ernie-tiny-untied"),
                                            ::testing::Values(QuantMix::kQ8_0, QuantMix::kQ4_0, QuantMix::kQ4_K_M,
                                                              QuantMix::kQ5_K_M, QuantMix::kQ6_K)),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param) + "_" +
                                           std::string(quant_mix_info(std::get<1>(info.param)).name);
                           for (char& c : n) c = (c == '-') ? '_' : c;
                           return n;
                         });

// A random model whose rows (256, 512) take the K-quants: every mix's own
// types, dequantized weights near the source, logits near bf16, and more
// bits closer. Converted without tokenizer keys (ernie4_5.vocab_size).
class GgufQuantizeWide : public ::testing::Test {
 protected:
  static test::TinySpec spec() {
    test::TinySpec s;
    s.vocab = 300;
    s.hidden = 256;
    s.inter = 512;
    s.layers = 8;
    s.heads = 4;
    s.kv_heads = 2;
    s.head_dim = 64;
    s.tie = false;
    return s;
  }
  void SetUp() override {
    bf16_ = tmp_.file("wide-bf16.gguf");
    const std::vector<GgufKeyValue> vocab = {{"ernie4_5.vocab_size", GgufValue(uint32_t{300})}};
    auto done = ernie45::convert_to_gguf(dir_.path(), OutType::kBF16, vocab, bf16_);
    ASSERT_TRUE(done.is_ok()) << done.status().to_string();
  }
  test::TinyModelDir dir_{spec(), 7};
  test::TempDir tmp_;
  std::string bf16_;
};

TEST_F(GgufQuantizeWide, KQuantMixesWriteTheirTypesAndMoreBitsAreCloser) {
  auto in = GgufFile::open(bf16_);
  ASSERT_TRUE(in.is_ok()) << in.status().to_string();
  auto want = logits_of(bf16_, kIds);
  ASSERT_TRUE(want.is_ok()) << want.status().to_string();
  // use_more_bits for 8 layers: n/8 = 1, 7n/8 = 7, and (i - 1) % 3 == 2.
  const std::set<int> more_bits = {0, 3, 6, 7};
  // A uniform block quantized with a step of range / levels is off by
  // step / sqrt(12), relative to its RMS 1 / levels: 0.4% at Q8_0's 255
  // levels, 1.6% / 3.2% / 6.7% at Q6_K's 64, Q5_K's 31, Q4_K's 15, 6% at
  // Q4_0's 16 (against max |x|); bounds leave room for the scales' rounding.
  const std::map<GgmlType, double> weight_bound = {{Q8_0, 0.01}, {Q6_K, 0.03}, {Q5_K, 0.06}, {Q4_K, 0.12},
                                                   {Q4_0, 0.15}};
  std::map<QuantMix, double> errors;
  for (const QuantMixInfo& m : quant_mixes()) {
    const std::string path = tmp_.file(std::string(m.name) + ".gguf");
    auto done = quantize_gguf(bf16_, path, m.mix);
    ASSERT_TRUE(done.is_ok()) << done.status().to_string();
    EXPECT_EQ(done->num_fallbacks, 0u) << m.name;
    auto out = GgufFile::open(path);
    ASSERT_TRUE(out.is_ok());
    const bool k_mix = m.mix == QuantMix::kQ4_K_M || m.mix == QuantMix::kQ5_K_M;
    for (size_t i = 0; i < in->tensors().size(); ++i) {
      const GgufTensor& a = in->tensors()[i];
      const GgufTensor& b = out->tensors()[i];
      if (a.dims.size() == 1) {
        EXPECT_EQ(b.type, F32) << a.name;
        continue;
      }
      int layer = -1;
      if (a.name.rfind("blk.", 0) == 0) layer = std::stoi(a.name.substr(4));
      const bool more = k_mix && more_bits.count(layer) &&
                        (a.name.find("attn_v") != std::string::npos || a.name.find("ffn_down") != std::string::npos);
      const GgmlType want_type = a.name == "output.weight" && m.mix != QuantMix::kQ8_0 ? Q6_K : more ? Q6_K : m.base;
      ASSERT_EQ(b.type, want_type) << a.name << " " << m.name;
      // The dequantized weights are near the bf16 source.
      const int64_t n = static_cast<int64_t>(a.num_elements());
      std::vector<float> src(static_cast<size_t>(n)), deq(static_cast<size_t>(n));
      const auto* bits = reinterpret_cast<const uint16_t*>(a.data.data());
      for (int64_t j = 0; j < n; ++j) src[static_cast<size_t>(j)] = bf16_to_f32(bits[j]);
      cpu::dequantize_row(*ggml_type_to_dtype(b.type), b.data.data(), n, deq.data());
      EXPECT_LT(rel_rms(deq, src), weight_bound.at(b.type)) << a.name << " " << m.name;
    }
    auto got = logits_of(path, kIds);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    errors[m.mix] = rel_rms(*got, *want);
    EXPECT_GT(errors[m.mix], 0.0);
  }
  // This random model amplifies weight error into its logits more than a
  // trained one: bounds at about 2x what the reference quantizers give.
  EXPECT_LT(errors[QuantMix::kQ8_0], 0.05);
  EXPECT_LT(errors[QuantMix::kQ6_K], 0.15);
  EXPECT_LT(errors[QuantMix::kQ5_K_M], 0.25);
  EXPECT_LT(errors[QuantMix::kQ4_K_M], 0.45);
  EXPECT_LT(errors[QuantMix::kQ4_0], 0.6);
  EXPECT_LT(errors[QuantMix::kQ8_0], errors[QuantMix::kQ6_K]);
  EXPECT_LT(errors[QuantMix::kQ6_K], errors[QuantMix::kQ5_K_M]);
  EXPECT_LT(errors[QuantMix::kQ5_K_M], errors[QuantMix::kQ4_K_M]);
  for (const auto& [mix, e] : errors) {
    std::printf("  %s: logits rel. RMS error %.4f\n", quant_mix_info(mix).name.data(), e);
  }
}

TEST_F(GgufQuantizeWide, AQuantizedFileRequantizes) {
  const std::string q8 = tmp_.file("q8.gguf"), q4 = tmp_.file("q4km.gguf");
  ASSERT_TRUE(quantize_gguf(bf16_, q8, QuantMix::kQ8_0).is_ok());
  auto done = quantize_gguf(q8, q4, QuantMix::kQ4_K_M);
  ASSERT_TRUE(done.is_ok()) << done.status().to_string();
  auto f = GgufFile::open(q4);
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(f->find_tensor("blk.1.attn_q.weight")->type, Q4_K);
  EXPECT_EQ(f->find_tensor("blk.0.attn_v.weight")->type, Q6_K);
  auto want = logits_of(bf16_, kIds);
  auto got = logits_of(q4, kIds);
  ASSERT_TRUE(want.is_ok() && got.is_ok());
  EXPECT_LT(rel_rms(*got, *want), 0.45);  // q4_k_m's bound above
}

// ---- Refusals.

class GgufQuantizeErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = tmp_.file("base.gguf");
    Status st = test::convert_folder(std::string(TERN_TEST_DATA_DIR) + "/ernie-tiny", OutType::kBF16, base_);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
  }
  test::TempDir tmp_;
  std::string base_;
};

TEST_F(GgufQuantizeErrors, AMissingInputIsNotFound) {
  const std::string out = tmp_.file("out.gguf");
  auto r = quantize_gguf(tmp_.file("nowhere.gguf"), out, QuantMix::kQ8_0);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(r.status().message().find("nowhere.gguf"), std::string::npos) << r.status().to_string();
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST_F(GgufQuantizeErrors, TheOutputMayNotBeTheInputUnderAnySpelling) {
  const auto size = std::filesystem::file_size(base_);
  const std::filesystem::path p(base_);
  for (const std::string& out : {base_, (p.parent_path() / "." / p.filename()).string()}) {
    auto r = quantize_gguf(base_, out, QuantMix::kQ4_0);
    ASSERT_FALSE(r.is_ok()) << out;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("is the input"), std::string::npos) << r.status().to_string();
  }
  EXPECT_EQ(std::filesystem::file_size(base_), size);
  EXPECT_TRUE(Ernie45Model::load(base_, 1).is_ok());
}

TEST_F(GgufQuantizeErrors, AMatrixOfATypeTernCannotReadIsNamedAndNothingIsWritten) {
  const std::string q41 = tmp_.file("q41.gguf"), out = tmp_.file("out.gguf");
  test::GgufEdits e;
  e.tensor = [](test::GgufEdits::Tensor& t) {
    if (t.name == "blk.2.ffn_up.weight") {
      t.type = GgmlType::kQ4_1;  // blocks of 32 in 20 bytes
      t.data.assign(static_cast<size_t>(t.dims[0] / 32 * 20 * t.dims[1]), 1);
    }
    return true;
  };
  ASSERT_TRUE(test::rewrite_gguf(base_, q41, e).is_ok());
  auto r = quantize_gguf(q41, out, QuantMix::kQ8_0);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(r.status().message().find("blk.2.ffn_up.weight"), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("Q4_1"), std::string::npos) << r.status().to_string();
  EXPECT_FALSE(std::filesystem::exists(out));
}

// ---- tern convert --outtype q8_0.

TEST(GgufConvertQ8_0, EveryMatrixIsQ8_0AsGgufPyWritesItAndTheFileLoads) {
  for (const char* model : {"ernie-tiny", "ernie-tiny-untied"}) {
    test::TempDir tmp;
    const std::string dir = std::string(TERN_TEST_DATA_DIR) + "/" + model;
    const std::string path = tmp.file("q8.gguf"), bf16 = tmp.file("bf16.gguf");
    ASSERT_TRUE(test::convert_folder(dir, OutType::kQ8_0, path).is_ok());
    ASSERT_TRUE(test::convert_folder(dir, OutType::kBF16, bf16).is_ok());
    auto f = GgufFile::open(path);
    auto ref = GgufFile::open(bf16);
    ASSERT_TRUE(f.is_ok() && ref.is_ok());
    EXPECT_EQ(*f->get_u32("general.file_type"), 7u);
    // The same keys in the same order as every other outtype.
    ASSERT_EQ(f->metadata().size(), ref->metadata().size());
    for (size_t i = 0; i < f->metadata().size(); ++i) EXPECT_EQ(f->metadata()[i].key, ref->metadata()[i].key);

    auto ckpt = Checkpoint::open(dir);
    ASSERT_TRUE(ckpt.is_ok());
    size_t matrices = 0;
    for (const GgufTensor& t : f->tensors()) {
      const GgufTensor* r = ref->find_tensor(t.name);
      ASSERT_NE(r, nullptr);
      EXPECT_EQ(t.dims, r->dims);
      if (t.dims.size() == 1) {
        EXPECT_EQ(t.type, F32) << t.name;
        continue;
      }
      ++matrices;
      const int64_t cols = t.dims[0], rows = t.dims[1];
      const auto* src = reinterpret_cast<const uint16_t*>(r->data.data());
      if (cols % 32 != 0) {  // the untied model's rows of 48: gguf-py falls back to F16
        ASSERT_EQ(t.type, F16) << t.name;
        const auto* got = reinterpret_cast<const uint16_t*>(t.data.data());
        for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(got[i], f32_to_f16(bf16_to_f32(src[i]))) << t.name;
        continue;
      }
      ASSERT_EQ(t.type, Q8_0) << t.name;
      // Bytes: Q8_0 of the bf16 source rows (gguf-py's quantize_q8_0 gives the same).
      const int64_t rb = cpu::row_bytes(DType::kQ8_0, cols);
      std::vector<float> row(static_cast<size_t>(cols));
      std::vector<uint8_t> want(static_cast<size_t>(rb));
      for (int64_t y = 0; y < rows; ++y) {
        for (int64_t x = 0; x < cols; ++x) row[static_cast<size_t>(x)] = bf16_to_f32(src[y * cols + x]);
        cpu::quantize_row(DType::kQ8_0, row.data(), cols, want.data());
        ASSERT_TRUE(std::equal(want.begin(), want.end(), t.data.begin() + y * rb)) << t.name << " row " << y;
      }
    }
    const size_t layers = *f->get_u32("ernie4_5.block_count");
    EXPECT_EQ(matrices, (f->find_tensor("output.weight") ? 2u : 1u) + 7u * layers);
    auto want = logits_of(bf16, kIds);
    auto got = logits_of(path, kIds);
    ASSERT_TRUE(want.is_ok() && got.is_ok()) << got.status().to_string();
    EXPECT_LT(rel_rms(*got, *want), 0.05) << model;
    EXPECT_GT(rel_rms(*got, *want), 0.0) << model;
  }
}

TEST(GgufConvertQ8_0, OtherQuantizedOuttypesAreRefusedPointingToQuantize) {
  for (const char* bad : {"q4_0", "q4_k_m", "Q8_0"}) {
    auto r = ernie45::parse_out_type(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_NE(r.status().message().find("tern quantize"), std::string::npos) << r.status().to_string();
  }
  EXPECT_EQ(*ernie45::parse_out_type("q8_0"), OutType::kQ8_0);
}

}  // namespace
}  // namespace tern
