// The ERNIE 4.5 GGUF table and the config read from GGUF keys. Key values
// are untrusted: each is type-checked by the reader's getters and
// range-checked here before the model trusts it.
#include "model/ernie4_5/gguf_names.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace tern::ernie45 {
namespace {

constexpr std::array<WeightName, 12> kWeights = {{
    {Weight::kTokenEmbedding, false, "model.embed_tokens.weight", "token_embd.weight"},
    {Weight::kOutputNorm, false, "model.norm.weight", "output_norm.weight"},
    {Weight::kOutput, false, "lm_head.weight", "output.weight"},
    {Weight::kAttnNorm, true, "input_layernorm.weight", "attn_norm.weight"},
    {Weight::kAttnQ, true, "self_attn.q_proj.weight", "attn_q.weight"},
    {Weight::kAttnK, true, "self_attn.k_proj.weight", "attn_k.weight"},
    {Weight::kAttnV, true, "self_attn.v_proj.weight", "attn_v.weight"},
    {Weight::kAttnOutput, true, "self_attn.o_proj.weight", "attn_output.weight"},
    {Weight::kFfnNorm, true, "post_attention_layernorm.weight", "ffn_norm.weight"},
    {Weight::kFfnGate, true, "mlp.gate_proj.weight", "ffn_gate.weight"},
    {Weight::kFfnUp, true, "mlp.up_proj.weight", "ffn_up.weight"},
    {Weight::kFfnDown, true, "mlp.down_proj.weight", "ffn_down.weight"},
}};

// entry() indexes the table by the enum.
constexpr bool table_in_enum_order() {
  for (size_t i = 0; i < kWeights.size(); ++i)
    if (static_cast<size_t>(kWeights[i].weight) != i) return false;
  return true;
}
static_assert(table_in_enum_order());

constexpr std::string_view kHfLayerPrefix = "model.layers.";
constexpr std::string_view kGgufLayerPrefix = "blk.";
// As parse_model_config: larger than any real dimension, far from overflow.
constexpr uint64_t kMaxDim = uint64_t{1} << 24;

const WeightName& entry(Weight w) { return kWeights[static_cast<size_t>(w)]; }

std::string number_text(double d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", d);
  return buf;
}

// Reads one GGUF file's keys with messages that name the file and the key.
class KeyReader {
 public:
  explicit KeyReader(const GgufFile& file) : file_(file) {}

  // A size: any non-negative integer type, 1..kMaxDim. Absent: `fallback`,
  // or kNotFound when there is none.
  Result<int64_t> dim(const std::string& key, std::optional<int64_t> fallback = std::nullopt) const {
    const GgufValue* v = file_.find(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return not_found(file_.name() + ": key '" + key + "' is missing");
    }
    if (v->is_array()) {
      return unsupported(file_.name() + ": key '" + key + "' is " + v->type_string() +
                         " (a value per layer); tern reads one value for all layers");
    }
    TERN_ASSIGN_OR_RETURN(uint64_t n, file_.get_uint(key));
    if (n < 1 || n > kMaxDim) {
      return out_of_range(file_.name() + ": key '" + key + "' is " + std::to_string(n) +
                          ", expected a positive integer at most " + std::to_string(kMaxDim));
    }
    return static_cast<int64_t>(n);
  }

  // A positive finite float (f32 as llama.cpp writes it, or f64).
  Result<double> positive(const std::string& key, std::optional<double> fallback = std::nullopt) const {
    const GgufValue* v = file_.find(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return not_found(file_.name() + ": key '" + key + "' is missing");
    }
    double d = 0;
    if (const float* f = v->get_if<float>()) {
      d = *f;
    } else if (const double* g = v->get_if<double>()) {
      d = *g;
    } else {
      return parse_error(file_.name() + ": key '" + key + "' is " + v->type_string() + ", expected f32");
    }
    if (!std::isfinite(d) || !(d > 0)) {
      return out_of_range(file_.name() + ": key '" + key + "' is " + number_text(d) + ", expected a positive number");
    }
    return d;
  }

  // A token id below `vocab`; `fallback` when the key is absent.
  Result<int32_t> token_id(const std::string& key, int32_t fallback, int64_t vocab) const {
    uint64_t id = static_cast<uint64_t>(fallback);
    if (file_.find(key) != nullptr) {
      TERN_ASSIGN_OR_RETURN(id, file_.get_uint(key));
    }
    if (id >= static_cast<uint64_t>(vocab)) {
      return out_of_range(file_.name() + ": key '" + key + "' is " + std::to_string(id) +
                          (file_.find(key) == nullptr ? " (llama.cpp's default)" : "") +
                          ", expected a token id below the vocabulary size " + std::to_string(vocab));
    }
    return static_cast<int32_t>(id);
  }

 private:
  const GgufFile& file_;
};

std::string dtype_for(const GgufFile& file) {
  const GgufTensor* embd = file.find_tensor(gguf_weight_name(Weight::kTokenEmbedding));
  if (embd != nullptr && embd->type == GgmlType::kF32) return "float32";
  if (embd != nullptr && embd->type == GgmlType::kF16) return "float16";
  return "bfloat16";
}

}  // namespace

std::span<const WeightName> weight_names() { return kWeights; }

std::string hf_weight_name(Weight w, int64_t layer) {
  const WeightName& e = entry(w);
  if (!e.per_layer) return std::string(e.hf);
  return std::string(kHfLayerPrefix) + std::to_string(layer) + "." + std::string(e.hf);
}

std::string gguf_weight_name(Weight w, int64_t layer) {
  const WeightName& e = entry(w);
  if (!e.per_layer) return std::string(e.gguf);
  return std::string(kGgufLayerPrefix) + std::to_string(layer) + "." + std::string(e.gguf);
}

std::optional<std::pair<Weight, int64_t>> parse_hf_weight_name(std::string_view hf_name) {
  for (const WeightName& e : kWeights) {
    if (!e.per_layer && hf_name == e.hf) return std::pair<Weight, int64_t>(e.weight, 0);
  }
  if (hf_name.substr(0, kHfLayerPrefix.size()) != kHfLayerPrefix) return std::nullopt;
  std::string_view rest = hf_name.substr(kHfLayerPrefix.size());
  uint32_t layer = 0;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), layer);
  // Digits only, no leading zero: "01" would map two names to one.
  if (ec != std::errc() || end == rest.data() + rest.size() || *end != '.' || (rest[0] == '0' && end - rest.data() > 1)) {
    return std::nullopt;
  }
  std::string_view suffix = rest.substr(static_cast<size_t>(end - rest.data()) + 1);
  for (const WeightName& e : kWeights) {
    if (e.per_layer && suffix == e.hf) return std::pair<Weight, int64_t>(e.weight, layer);
  }
  return std::nullopt;
}

std::optional<std::string> gguf_name_of_hf(std::string_view hf_name) {
  auto parsed = parse_hf_weight_name(hf_name);
  if (!parsed) return std::nullopt;
  return gguf_weight_name(parsed->first, parsed->second);
}

std::vector<int64_t> weight_shape(Weight w, const ModelConfig& c) {
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size;
  switch (w) {
    case Weight::kTokenEmbedding:
    case Weight::kOutput:
      return {c.vocab_size, hidden};
    case Weight::kOutputNorm:
    case Weight::kAttnNorm:
    case Weight::kFfnNorm:
      return {hidden};
    case Weight::kAttnQ:
      return {c.q_dim(), hidden};
    case Weight::kAttnK:
    case Weight::kAttnV:
      return {c.kv_dim(), hidden};
    case Weight::kAttnOutput:
      return {hidden, c.q_dim()};
    case Weight::kFfnGate:
    case Weight::kFfnUp:
      return {inter, hidden};
    case Weight::kFfnDown:
      return {hidden, inter};
  }
  return {};
}

bool gguf_keeps_f32(std::string_view gguf_name, size_t rank) {
  constexpr std::string_view kNormSuffix = "_norm.weight";
  return rank <= 1 ||
         (gguf_name.size() >= kNormSuffix.size() && gguf_name.substr(gguf_name.size() - kNormSuffix.size()) == kNormSuffix);
}

std::string arch_key(std::string_view suffix) { return std::string(kGgufArchitecture) + "." + std::string(suffix); }

std::vector<GgufKeyValue> hparam_key_values(const ModelConfig& c) {
  auto u32 = [](int64_t v) { return GgufValue(static_cast<uint32_t>(v)); };
  return {
      {arch_key(kKeyBlockCount), u32(c.num_layers)},
      {arch_key(kKeyContextLength), u32(c.max_position_embeddings)},
      {arch_key(kKeyEmbeddingLength), u32(c.hidden_size)},
      {arch_key(kKeyFeedForwardLength), u32(c.intermediate_size)},
      {arch_key(kKeyHeadCount), u32(c.num_heads)},
      {arch_key(kKeyHeadCountKv), u32(c.num_kv_heads)},
      {arch_key(kKeyRopeFreqBase), GgufValue(static_cast<float>(c.rope_theta))},
      {arch_key(kKeyRmsEps), GgufValue(static_cast<float>(c.rms_norm_eps))},
      {arch_key(kKeyKeyLength), u32(c.head_dim)},
      {arch_key(kKeyValueLength), u32(c.head_dim)},
  };
}

Result<ModelConfig> config_from_gguf(const GgufFile& file) {
  const std::string& src = file.name();
  TERN_ASSIGN_OR_RETURN(std::string_view arch, file.get_string("general.architecture"));
  if (arch != kGgufArchitecture) {
    return unsupported(src + ": general.architecture is '" + std::string(arch) + "'; tern runs '" +
                       std::string(kGgufArchitecture) + "' (dense ERNIE 4.5)");
  }
  KeyReader r(file);
  ModelConfig c;
  c.architecture = "Ernie4_5ForCausalLM";
  c.model_type = "ernie4_5";
  if (const GgufValue* experts = file.find(arch_key(kKeyExpertCount)); experts != nullptr) {
    return unsupported(src + ": key '" + arch_key(kKeyExpertCount) + "' is set; mixture-of-experts is not supported");
  }
  TERN_ASSIGN_OR_RETURN(c.num_layers, r.dim(arch_key(kKeyBlockCount)));
  TERN_ASSIGN_OR_RETURN(c.max_position_embeddings, r.dim(arch_key(kKeyContextLength)));
  TERN_ASSIGN_OR_RETURN(c.hidden_size, r.dim(arch_key(kKeyEmbeddingLength)));
  TERN_ASSIGN_OR_RETURN(c.intermediate_size, r.dim(arch_key(kKeyFeedForwardLength)));
  TERN_ASSIGN_OR_RETURN(c.num_heads, r.dim(arch_key(kKeyHeadCount)));
  TERN_ASSIGN_OR_RETURN(c.num_kv_heads, r.dim(arch_key(kKeyHeadCountKv), c.num_heads));
  if (c.num_heads % c.num_kv_heads != 0) {
    return parse_error(src + ": " + arch_key(kKeyHeadCount) + " " + std::to_string(c.num_heads) +
                       " is not a multiple of " + arch_key(kKeyHeadCountKv) + " " + std::to_string(c.num_kv_heads));
  }
  std::optional<int64_t> default_head_dim;
  if (c.hidden_size % c.num_heads == 0) default_head_dim = c.hidden_size / c.num_heads;
  TERN_ASSIGN_OR_RETURN(c.head_dim, r.dim(arch_key(kKeyKeyLength), default_head_dim));
  if (c.head_dim % 2 != 0) {
    return parse_error(src + ": " + arch_key(kKeyKeyLength) + " " + std::to_string(c.head_dim) +
                       " is odd; RoPE rotates pairs");
  }
  TERN_ASSIGN_OR_RETURN(int64_t value_length, r.dim(arch_key(kKeyValueLength), c.head_dim));
  if (value_length != c.head_dim) {
    return unsupported(src + ": " + arch_key(kKeyValueLength) + " " + std::to_string(value_length) + " differs from " +
                       arch_key(kKeyKeyLength) + " " + std::to_string(c.head_dim));
  }
  TERN_ASSIGN_OR_RETURN(int64_t rope_dims, r.dim(arch_key(kKeyRopeDimensionCount), c.head_dim));
  if (rope_dims != c.head_dim) {
    return unsupported(src + ": " + arch_key(kKeyRopeDimensionCount) + " " + std::to_string(rope_dims) +
                       " rotates part of a head of " + std::to_string(c.head_dim) + "; only full rotary is supported");
  }
  if (file.find(arch_key(kKeyRopeScalingType)) != nullptr) {
    TERN_ASSIGN_OR_RETURN(std::string_view scaling, file.get_string(arch_key(kKeyRopeScalingType)));
    if (scaling != "none") {
      return unsupported(src + ": " + arch_key(kKeyRopeScalingType) + " '" + std::string(scaling) +
                         "' is not supported (only plain RoPE)");
    }
  }
  // llama.cpp's default base when the key is absent.
  TERN_ASSIGN_OR_RETURN(c.rope_theta, r.positive(arch_key(kKeyRopeFreqBase), 10000.0));
  TERN_ASSIGN_OR_RETURN(c.rms_norm_eps, r.positive(arch_key(kKeyRmsEps)));

  if (file.find(arch_key(kKeyVocabSize)) != nullptr) {
    TERN_ASSIGN_OR_RETURN(c.vocab_size, r.dim(arch_key(kKeyVocabSize)));
  } else if (file.find("tokenizer.ggml.tokens") != nullptr) {
    TERN_ASSIGN_OR_RETURN(auto tokens, file.get_string_array("tokenizer.ggml.tokens"));
    if (tokens.empty() || tokens.size() > kMaxDim) {
      return out_of_range(src + ": tokenizer.ggml.tokens holds " + std::to_string(tokens.size()) +
                          " tokens, expected 1.." + std::to_string(kMaxDim));
    }
    c.vocab_size = static_cast<int64_t>(tokens.size());
  } else {
    return not_found(src + ": neither '" + arch_key(kKeyVocabSize) +
                     "' nor 'tokenizer.ggml.tokens' gives the vocabulary size");
  }
  c.tie_word_embeddings = file.find_tensor(gguf_weight_name(Weight::kOutput)) == nullptr;
  c.use_bias = false;
  c.torch_dtype = dtype_for(file);
  TERN_ASSIGN_OR_RETURN(c.bos_token_id, r.token_id("tokenizer.ggml.bos_token_id", 1, c.vocab_size));
  TERN_ASSIGN_OR_RETURN(int32_t eos, r.token_id("tokenizer.ggml.eos_token_id", 2, c.vocab_size));
  c.eos_token_ids = {eos};
  TERN_ASSIGN_OR_RETURN(c.pad_token_id, r.token_id("tokenizer.ggml.padding_token_id", 0, c.vocab_size));
  return c;
}

}  // namespace tern::ernie45
