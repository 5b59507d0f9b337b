// ERNIE 4.5 GGUF files: what `tern convert` writes for the tiny test models
// at f32, f16 and bf16 (every key, its type and value, in llama.cpp's
// converter order; every tensor's name, dims, type and bytes), that
// Ernie45Model loads them with the folder's config and weights, and that a
// wrong or missing key or tensor is refused with an error naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "backend/cpu/kernel_set.h"
#include "backend/cpu/quant_reference.h"
#include "base/bf16.h"
#include "formats/checkpoint.h"
#include "model/ernie4_5/ernie4_5_model.h"
#include "model/ernie4_5/gguf_names.h"
#include "support/tiny_gguf.h"

namespace tern {
namespace {

using ernie45::OutType;

const char* type_name(OutType t) { return t == OutType::kF32 ? "f32" : t == OutType::kF16 ? "f16" : "bf16"; }

float as_f32(DType dtype, const void* data, size_t i) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (dtype == DType::kF32) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  return dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// The value a bf16 source element has after conversion to `t` (the converter
// goes through f32, then rounds to nearest even).
float converted(float source, GgmlType t) {
  if (t == GgmlType::kF16) return f16_to_f32(f32_to_f16(source));
  if (t == GgmlType::kBF16) return bf16_to_f32(f32_to_bf16(source));
  return source;
}

class GgufConvertTest : public ::testing::TestWithParam<std::tuple<std::string, OutType>> {
 protected:
  void SetUp() override {
    dir_ = std::string(TERN_TEST_DATA_DIR) + "/" + std::get<0>(GetParam());
    type_ = std::get<1>(GetParam());
    gguf_path_ = tmp_.file("model.gguf");
    Status st = test::convert_folder(dir_, type_, gguf_path_);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    auto text = read_text_file(dir_ + "/config.json");
    ASSERT_TRUE(text.is_ok());
    auto cfg = parse_model_config(*text, "config.json");
    ASSERT_TRUE(cfg.is_ok());
    config_ = *cfg;
  }
  GgmlType weight_type() const {
    return type_ == OutType::kF32 ? GgmlType::kF32 : type_ == OutType::kF16 ? GgmlType::kF16 : GgmlType::kBF16;
  }

  test::TempDir tmp_;
  std::string dir_, gguf_path_;
  OutType type_ = OutType::kF32;
  ModelConfig config_;
};

TEST_P(GgufConvertTest, KeysAreLlamaCppConvertersInItsOrder) {
  auto f = GgufFile::open(gguf_path_);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->version(), 3u);
  std::vector<std::string> keys;
  for (const GgufKeyValue& kv : f->metadata()) keys.push_back(kv.key);
  const std::vector<std::string> want = {
      "general.architecture", "general.type", "general.sampling.top_p", "general.sampling.temp",
      "general.sampling.penalty_repeat", "general.name", "general.size_label", "ernie4_5.block_count",
      "ernie4_5.context_length", "ernie4_5.embedding_length", "ernie4_5.feed_forward_length",
      "ernie4_5.attention.head_count", "ernie4_5.attention.head_count_kv", "ernie4_5.rope.freq_base",
      "ernie4_5.attention.layer_norm_rms_epsilon", "ernie4_5.attention.key_length",
      "ernie4_5.attention.value_length", "general.file_type", "general.quantization_version",
      "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
      "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
      "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
      "tokenizer.chat_template", "tokenizer.ggml.add_space_prefix"};
  EXPECT_EQ(keys, want);

  auto u32 = [&](const std::string& key) {
    auto v = f->get_u32(key);
    EXPECT_TRUE(v.is_ok()) << key << ": " << v.status().to_string();
    return v.is_ok() ? int64_t{*v} : -1;
  };
  EXPECT_EQ(*f->get_string("general.architecture"), "ernie4_5");
  EXPECT_EQ(*f->get_string("general.type"), "model");
  EXPECT_EQ(*f->get_string("general.name"), ernie45::model_title(std::get<0>(GetParam())));
  EXPECT_FLOAT_EQ(*f->get_f32("general.sampling.temp"), 0.8f);
  EXPECT_FLOAT_EQ(*f->get_f32("general.sampling.top_p"), 0.8f);
  EXPECT_FLOAT_EQ(*f->get_f32("general.sampling.penalty_repeat"), 1.0f);
  EXPECT_EQ(u32("ernie4_5.block_count"), config_.num_layers);
  EXPECT_EQ(u32("ernie4_5.context_length"), config_.max_position_embeddings);
  EXPECT_EQ(u32("ernie4_5.embedding_length"), config_.hidden_size);
  EXPECT_EQ(u32("ernie4_5.feed_forward_length"), config_.intermediate_size);
  EXPECT_EQ(u32("ernie4_5.attention.head_count"), config_.num_heads);
  EXPECT_EQ(u32("ernie4_5.attention.head_count_kv"), config_.num_kv_heads);
  EXPECT_EQ(u32("ernie4_5.attention.key_length"), config_.head_dim);
  EXPECT_EQ(u32("ernie4_5.attention.value_length"), config_.head_dim);
  EXPECT_EQ(*f->get_f32("ernie4_5.rope.freq_base"), static_cast<float>(config_.rope_theta));
  EXPECT_EQ(*f->get_f32("ernie4_5.attention.layer_norm_rms_epsilon"), static_cast<float>(config_.rms_norm_eps));
  EXPECT_EQ(u32("general.file_type"), type_ == OutType::kF32 ? 0 : type_ == OutType::kF16 ? 1 : 32);
  EXPECT_EQ(u32("general.quantization_version"), 2);
  EXPECT_EQ(*f->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(*f->get_string("tokenizer.ggml.pre"), "default");
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens")->size(), static_cast<size_t>(config_.vocab_size));
  EXPECT_EQ(u32("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(u32("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_EQ(u32("tokenizer.ggml.padding_token_id"), 0);
  EXPECT_FALSE(*f->get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_FALSE(*f->get_bool("tokenizer.ggml.add_eos_token"));
  EXPECT_FALSE(*f->get_bool("tokenizer.ggml.add_space_prefix"));
  auto tc = nlohmann::json::parse(*read_text_file(dir_ + "/tokenizer_config.json"));
  EXPECT_EQ(*f->get_string("tokenizer.chat_template"), tc["chat_template"].get<std::string>());
}

TEST_P(GgufConvertTest, TensorsHaveLlamaCppNamesDimsTypesAndTheFoldersValues) {
  auto f = GgufFile::open(gguf_path_);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  auto ckpt = Checkpoint::open(dir_);
  ASSERT_TRUE(ckpt.is_ok());

  std::set<std::string> want;
  want.insert("token_embd.weight");
  want.insert("output_norm.weight");
  if (!config_.tie_word_embeddings) want.insert("output.weight");
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    for (const char* n : {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                          "ffn_down"}) {
      want.insert("blk." + std::to_string(l) + "." + n + ".weight");
    }
  }
  std::set<std::string> got;
  for (const GgufTensor& t : f->tensors()) got.insert(t.name);
  EXPECT_EQ(got, want);

  for (const ernie45::WeightName& w : ernie45::weight_names()) {
    for (int64_t l = 0; l < (w.per_layer ? config_.num_layers : 1); ++l) {
      const std::string gname = ernie45::gguf_weight_name(w.weight, l);
      const GgufTensor* t = f->find_tensor(gname);
      const TensorView* src = ckpt->find(ernie45::hf_weight_name(w.weight, l));
      if (w.weight == ernie45::Weight::kOutput && config_.tie_word_embeddings) {
        EXPECT_EQ(t, nullptr);
        continue;
      }
      ASSERT_NE(t, nullptr) << gname;
      ASSERT_NE(src, nullptr) << gname;
      // ne is the PyTorch shape reversed: [out, in] -> {in, out}.
      std::vector<int64_t> ne(src->shape.rbegin(), src->shape.rend());
      EXPECT_EQ(t->dims, ne) << gname;
      const bool is_norm = src->shape.size() == 1;
      EXPECT_EQ(t->type, is_norm ? GgmlType::kF32 : weight_type()) << gname;
      const DType dt = *ggml_type_to_dtype(t->type);
      ASSERT_EQ(src->dtype, DType::kBF16);
      for (size_t i = 0; i < src->num_elements(); ++i) {
        const float want_v = converted(as_f32(DType::kBF16, src->data.data(), i), t->type);
        ASSERT_EQ(as_f32(dt, t->data.data(), i), want_v) << gname << " element " << i;
      }
    }
  }
}

TEST_P(GgufConvertTest, ModelLoadsWithTheFoldersConfigAndWeights) {
  auto from_gguf = Ernie45Model::load(gguf_path_, 1);
  ASSERT_TRUE(from_gguf.is_ok()) << from_gguf.status().to_string();
  auto from_dir = Ernie45Model::load(dir_, 1);
  ASSERT_TRUE(from_dir.is_ok()) << from_dir.status().to_string();
  const ModelConfig& g = (*from_gguf)->config();
  const ModelConfig& h = (*from_dir)->config();
  EXPECT_EQ(g.vocab_size, h.vocab_size);
  EXPECT_EQ(g.hidden_size, h.hidden_size);
  EXPECT_EQ(g.intermediate_size, h.intermediate_size);
  EXPECT_EQ(g.num_layers, h.num_layers);
  EXPECT_EQ(g.num_heads, h.num_heads);
  EXPECT_EQ(g.num_kv_heads, h.num_kv_heads);
  EXPECT_EQ(g.head_dim, h.head_dim);
  EXPECT_EQ(g.max_position_embeddings, h.max_position_embeddings);
  EXPECT_EQ(g.tie_word_embeddings, h.tie_word_embeddings);
  EXPECT_EQ(static_cast<float>(g.rms_norm_eps), static_cast<float>(h.rms_norm_eps));
  EXPECT_EQ(g.rope_theta, h.rope_theta);
  EXPECT_EQ(g.bos_token_id, h.bos_token_id);
  EXPECT_EQ(g.eos_token_ids, h.eos_token_ids);
  EXPECT_EQ(g.pad_token_id, h.pad_token_id);
  EXPECT_EQ(g.torch_dtype, type_ == OutType::kF32 ? "float32" : type_ == OutType::kF16 ? "float16" : "bfloat16");

  auto same_matrix = [&](const cpu::WeightMatrix& a, const cpu::WeightMatrix& b, GgmlType t, const char* what) {
    ASSERT_EQ(a.rows, b.rows) << what;
    ASSERT_EQ(a.cols, b.cols) << what;
    EXPECT_EQ(a.dtype, *ggml_type_to_dtype(t)) << what;
    // The GGUF's bytes are used where they lie (the reader aligns them).
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data) % 32, 0u) << what;
    for (size_t i = 0; i < static_cast<size_t>(a.rows * a.cols); ++i) {
      ASSERT_EQ(as_f32(a.dtype, a.data, i), converted(as_f32(b.dtype, b.data, i), t)) << what << " " << i;
    }
  };
  auto same_vector = [&](const cpu::WeightVector& a, const cpu::WeightVector& b, const char* what) {
    ASSERT_EQ(a.size, b.size) << what;
    EXPECT_EQ(a.dtype, DType::kF32) << what;  // norms stay f32
    for (size_t i = 0; i < static_cast<size_t>(a.size); ++i)
      ASSERT_EQ(as_f32(a.dtype, a.data, i), as_f32(b.dtype, b.data, i)) << what;
  };
  const GgmlType wt = weight_type();
  same_matrix((*from_gguf)->embedding(), (*from_dir)->embedding(), wt, "embedding");
  same_matrix((*from_gguf)->lm_head(), (*from_dir)->lm_head(), wt, "lm_head");
  same_vector((*from_gguf)->final_norm(), (*from_dir)->final_norm(), "final_norm");
  for (size_t l = 0; l < (*from_dir)->layer_weights().size(); ++l) {
    const auto& a = (*from_gguf)->layer_weights()[l];
    const auto& b = (*from_dir)->layer_weights()[l];
    same_vector(a.input_norm, b.input_norm, "input_norm");
    same_vector(a.post_attention_norm, b.post_attention_norm, "post_attention_norm");
    same_matrix(a.q, b.q, wt, "q");
    same_matrix(a.k, b.k, wt, "k");
    same_matrix(a.v, b.v, wt, "v");
    same_matrix(a.o, b.o, wt, "o");
    same_matrix(a.gate, b.gate, wt, "gate");
    same_matrix(a.up, b.up, wt, "up");
    same_matrix(a.down, b.down, wt, "down");
  }
}

INSTANTIATE_TEST_SUITE_P(TinyModels, GgufConvertTest,
                         ::testing::Combine(::testing::Values("ernie-tiny", "ernie-tiny-untied"),
                                            ::testing::Values(OutType::kF32, OutType::kF16, OutType::kBF16)),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param) + "_" + type_name(std::get<1>(info.param));
                           for (char& c : n) c = (c == '-') ? '_' : c;
                           return n;
                         });

// ---- What the loader refuses. Each case copies the converted tiny model
// with one edit and expects the error to name the key or tensor.

class GgufRefusals : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = tmp_.file("base.gguf");
    Status st = test::convert_folder(std::string(TERN_TEST_DATA_DIR) + "/ernie-tiny", OutType::kBF16, base_);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
  }
  // Loads a copy of the base file with `edits`; returns the load status.
  Status load_edited(const test::GgufEdits& edits) {
    const std::string path = tmp_.file("edited" + std::to_string(n_++) + ".gguf");
    Status st = test::rewrite_gguf(base_, path, edits);
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    auto m = Ernie45Model::load(path, 1);
    return m.is_ok() ? Status::ok() : m.status();
  }
  static test::GgufEdits drop_key(const std::string& key) {
    test::GgufEdits e;
    e.key = [key](GgufKeyValue& kv) { return kv.key != key; };
    return e;
  }
  static test::GgufEdits set_key(const std::string& key, GgufValue v) {
    test::GgufEdits e;
    e.key = [key, v](GgufKeyValue& kv) {
      if (kv.key == key) kv.value = v;
      return true;
    };
    return e;
  }

  test::TempDir tmp_;
  std::string base_;
  int n_ = 0;
};

TEST_F(GgufRefusals, TheUneditedCopyLoads) { EXPECT_TRUE(load_edited({}).is_ok()); }

TEST_F(GgufRefusals, MissingRequiredKeysAreNamed) {
  for (const char* key : {"ernie4_5.block_count", "ernie4_5.context_length", "ernie4_5.embedding_length",
                          "ernie4_5.feed_forward_length", "ernie4_5.attention.head_count",
                          "ernie4_5.attention.layer_norm_rms_epsilon", "general.architecture"}) {
    Status st = load_edited(drop_key(key));
    EXPECT_EQ(st.code(), ErrorCode::kNotFound) << key << ": " << st.to_string();
    EXPECT_NE(st.message().find(key), std::string::npos) << st.to_string();
  }
}

TEST_F(GgufRefusals, KeysWithWrongTypesOrValuesAreNamed) {
  struct Case {
    const char* key;
    GgufValue value;
    ErrorCode code;
  };
  const std::vector<Case> cases = {
      {"ernie4_5.block_count", GgufValue("3"), ErrorCode::kParse},
      {"ernie4_5.block_count", GgufValue(uint32_t{0}), ErrorCode::kOutOfRange},
      {"ernie4_5.embedding_length", GgufValue(uint64_t{1} << 40), ErrorCode::kOutOfRange},
      {"ernie4_5.attention.head_count_kv", GgufValue(uint32_t{3}), ErrorCode::kParse},
      {"ernie4_5.attention.key_length", GgufValue(uint32_t{7}), ErrorCode::kParse},
      {"ernie4_5.attention.value_length", GgufValue(uint32_t{16}), ErrorCode::kUnsupported},
      {"ernie4_5.attention.head_count", GgufValue(std::vector<uint32_t>{16, 16, 16}), ErrorCode::kUnsupported},
      {"ernie4_5.attention.layer_norm_rms_epsilon", GgufValue(-1.0f), ErrorCode::kOutOfRange},
      {"ernie4_5.rope.freq_base", GgufValue(std::nanf("")), ErrorCode::kOutOfRange},
      {"tokenizer.ggml.eos_token_id", GgufValue(uint32_t{5000}), ErrorCode::kOutOfRange},
  };
  for (const Case& c : cases) {
    Status st = load_edited(set_key(c.key, c.value));
    EXPECT_EQ(st.code(), c.code) << c.key << " = " << c.value.type_string() << ": " << st.to_string();
    EXPECT_NE(st.message().find(c.key), std::string::npos) << st.to_string();
  }
}

TEST_F(GgufRefusals, OtherArchitecturesAndFeaturesAreRefusedByName) {
  Status arch = load_edited(set_key("general.architecture", GgufValue("llama")));
  EXPECT_EQ(arch.code(), ErrorCode::kUnsupported);
  EXPECT_NE(arch.message().find("'llama'"), std::string::npos) << arch.to_string();

  test::GgufEdits scaling;
  scaling.extra_keys = {{"ernie4_5.rope.scaling.type", GgufValue("linear")}};
  Status st = load_edited(scaling);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("ernie4_5.rope.scaling.type"), std::string::npos) << st.to_string();

  test::GgufEdits partial;
  partial.extra_keys = {{"ernie4_5.rope.dimension_count", GgufValue(uint32_t{4})}};
  st = load_edited(partial);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("ernie4_5.rope.dimension_count"), std::string::npos) << st.to_string();

  test::GgufEdits moe;
  moe.extra_keys = {{"ernie4_5.expert_count", GgufValue(uint32_t{8})}};
  st = load_edited(moe);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("ernie4_5.expert_count"), std::string::npos) << st.to_string();
}

TEST_F(GgufRefusals, MissingWrongAndExtraTensorsAreNamed) {
  test::GgufEdits missing;
  missing.tensor = [](test::GgufEdits::Tensor& t) { return t.name != "blk.1.ffn_up.weight"; };
  Status st = load_edited(missing);
  EXPECT_EQ(st.code(), ErrorCode::kNotFound) << st.to_string();
  EXPECT_NE(st.message().find("blk.1.ffn_up.weight"), std::string::npos) << st.to_string();

  test::GgufEdits transposed;  // ne {out, in} instead of {in, out}: a layout mix-up
  transposed.tensor = [](test::GgufEdits::Tensor& t) {
    if (t.name == "blk.0.attn_k.weight") std::swap(t.dims[0], t.dims[1]);
    return true;
  };
  st = load_edited(transposed);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("blk.0.attn_k.weight"), std::string::npos) << st.to_string();

  test::GgufEdits extra;
  extra.extra_tensors = {{"blk.0.attn_output.bias", GgmlType::kF32, {64}, std::vector<uint8_t>(64 * 4, 0)}};
  st = load_edited(extra);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported) << st.to_string();
  EXPECT_NE(st.message().find("blk.0.attn_output.bias"), std::string::npos) << st.to_string();
}

// Every matrix of the bf16 file requantized to `type` (ne0 = the row's values).
test::GgufEdits quantize_matrices(DType type, GgmlType ggml) {
  test::GgufEdits e;
  e.tensor = [type, ggml](test::GgufEdits::Tensor& t) {
    if (t.dims.size() != 2) return true;
    const int64_t cols = t.dims[0], rows = t.dims[1];
    std::vector<float> row(static_cast<size_t>(cols));
    std::vector<uint8_t> out(static_cast<size_t>(rows * cpu::row_bytes(type, cols)));
    const auto* src = reinterpret_cast<const uint16_t*>(t.data.data());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) row[static_cast<size_t>(c)] = bf16_to_f32(src[r * cols + c]);
      cpu::quantize_row(type, row.data(), cols, out.data() + r * cpu::row_bytes(type, cols));
    }
    t.type = ggml;
    t.data = std::move(out);
    return true;
  };
  return e;
}

TEST_F(GgufRefusals, QuantizedMatricesLoadAndRunCloseToTheBf16File) {
  auto reference = Ernie45Model::load(base_, 1);
  ASSERT_TRUE(reference.is_ok()) << reference.status().to_string();
  const std::vector<int32_t> ids = {5, 17, 99, 3, 42, 7, 250, 11};
  const auto vocab = static_cast<size_t>(reference.value()->config().vocab_size);
  std::vector<float> want(vocab);
  KvCache c0 = reference.value()->make_cache(16);
  ASSERT_TRUE(reference.value()->forward(ids, c0, want).is_ok());
  // Q8_0 keeps ~8 bits, Q4_0 ~4: the logits of this random tiny model move by
  // a few percent and by a few tens of percent (the optimized set quantizes
  // the activations to 8 bits as well), and Q8_0 always by less.
  std::map<std::string, double> errors;
  for (auto [type, ggml, bound] : {std::tuple{DType::kQ8_0, GgmlType::kQ8_0, 0.05},
                                   std::tuple{DType::kQ4_0, GgmlType::kQ4_0, 0.3}}) {
    const std::string path = tmp_.file(std::string(dtype_name(type)) + ".gguf");
    ASSERT_TRUE(test::rewrite_gguf(base_, path, quantize_matrices(type, ggml)).is_ok());
    for (const char* set : {"reference", "optimized"}) {
      auto m = Ernie45Model::load(path, 2, *cpu::kernel_set_named(set));
      ASSERT_TRUE(m.is_ok()) << m.status().to_string();
      EXPECT_EQ(m.value()->layer_weights()[0].q.dtype, type);
      EXPECT_EQ(m.value()->embedding().dtype, type);
      std::vector<float> got(vocab);
      KvCache c = m.value()->make_cache(16);
      ASSERT_TRUE(m.value()->forward(ids, c, got).is_ok());
      double num = 0, den = 0;
      for (size_t i = 0; i < vocab; ++i) {
        num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        den += double(want[i]) * want[i];
      }
      EXPECT_LT(std::sqrt(num / den), bound) << dtype_name(type) << " " << set;
      EXPECT_GT(num, 0.0) << "the quantized weights were used";
      errors[std::string(dtype_name(type)) + set] = std::sqrt(num / den);
    }
  }
  EXPECT_LT(errors["Q8_0reference"], errors["Q4_0reference"]);
  EXPECT_LT(errors["Q8_0optimized"], errors["Q4_0optimized"]);
}

TEST_F(GgufRefusals, QuantizedNormsAndUnreadTypesAreRefusedNamingTensorAndType) {
  test::GgufEdits norm;  // norms stay float in every llama.cpp file
  norm.tensor = [](test::GgufEdits::Tensor& t) {
    if (t.name == "blk.0.attn_norm.weight") {
      t.type = GgmlType::kQ8_0;
      t.data.assign(static_cast<size_t>(t.dims[0] / 32 * 34), 1);
    }
    return true;
  };
  Status st = load_edited(norm);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported) << st.to_string();
  EXPECT_NE(st.message().find("blk.0.attn_norm.weight"), std::string::npos) << st.to_string();

  test::GgufEdits q41;  // a ggml type tern does not read
  q41.tensor = [](test::GgufEdits::Tensor& t) {
    if (t.name == "blk.0.attn_q.weight") {
      t.type = GgmlType::kQ4_1;  // blocks of 32 in 20 bytes
      t.data.assign(static_cast<size_t>(t.dims[0] / 32 * 20 * t.dims[1]), 1);
    }
    return true;
  };
  st = load_edited(q41);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported) << st.to_string();
  EXPECT_NE(st.message().find("blk.0.attn_q.weight"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("Q4_1"), std::string::npos) << st.to_string();
}

TEST(GgufNames, HuggingFaceNamesMapToLlamaCppNames) {
  EXPECT_EQ(ernie45::gguf_name_of_hf("model.embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(ernie45::gguf_name_of_hf("model.norm.weight"), "output_norm.weight");
  EXPECT_EQ(ernie45::gguf_name_of_hf("lm_head.weight"), "output.weight");
  EXPECT_EQ(ernie45::gguf_name_of_hf("model.layers.0.input_layernorm.weight"), "blk.0.attn_norm.weight");
  EXPECT_EQ(ernie45::gguf_name_of_hf("model.layers.17.self_attn.o_proj.weight"), "blk.17.attn_output.weight");
  EXPECT_EQ(ernie45::gguf_name_of_hf("model.layers.3.post_attention_layernorm.weight"), "blk.3.ffn_norm.weight");
  EXPECT_EQ(ernie45::gguf_name_of_hf("model.layers.12.mlp.down_proj.weight"), "blk.12.ffn_down.weight");
  for (const char* bad : {"model.layers.01.mlp.up_proj.weight", "model.layers.-1.mlp.up_proj.weight",
                          "model.layers.x.mlp.up_proj.weight", "model.layers.3.mlp.up_proj.bias",
                          "model.layers.3.self_attn.qkv_proj.weight", "model.layers.3", "model.layers."}) {
    EXPECT_EQ(ernie45::gguf_name_of_hf(bad), std::nullopt) << bad;
  }
}

TEST(GgufNames, SizeLabelIsLlamaCpps) {
  EXPECT_EQ(ernie45::size_label(360748032), "361M");
  EXPECT_EQ(ernie45::size_label(21'825'437'184), "22B");
  EXPECT_EQ(ernie45::size_label(1'500'000'000), "1.5B");
  EXPECT_EQ(ernie45::size_label(400), "0.40K");
  EXPECT_EQ(ernie45::size_label(5'300'000), "5.3M");
}

// general.name as convert_hf_to_gguf.py titles a folder name (gguf-py's
// Metadata.id_to_title), so both converters write the same key.
TEST(GgufModelTitle, FolderNamesAreTitledAsTheConverterTitlesThem) {
  EXPECT_EQ(ernie45::model_title("ernie-tiny"), "Ernie Tiny");
  EXPECT_EQ(ernie45::model_title("ERNIE-4.5-0.3B-PT"), "ERNIE 4.5 0.3B PT");
  EXPECT_EQ(ernie45::model_title("ernie-4.5-0.3b-random"), "Ernie 4.5 0.3b Random");
  EXPECT_EQ(ernie45::model_title("my-model-v2.1-chat"), "My Model v2.1 Chat");
  EXPECT_EQ(ernie45::model_title("qwen2-mixedCase--x1y"), "Qwen2 mixedCase X1Y");
}

}  // namespace
}  // namespace tern
