// ERNIE 4.5 dense decoder on the reference kernels. The forward pass is
// written out layer by layer as in MODEL.md so it can be read against HF's
// modeling_ernie4_5.py; every step is fp32.
#include "model/arch/ernie4_5.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "base/checked_math.h"
#include "base/mapped_file.h"

namespace tern {
namespace {

Status check_config(const ModelConfig& c, const std::string& source) {
  auto bad = [&](const std::string& what) { return invalid_argument(source + ": " + what); };
  if (c.vocab_size <= 0 || c.vocab_size > std::numeric_limits<int32_t>::max()) return bad("vocab_size out of range");
  if (c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_layers <= 0) return bad("non-positive model size");
  if (c.num_heads <= 0 || c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    return bad("num_attention_heads must be a positive multiple of num_key_value_heads");
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) return bad("head_dim must be positive and even (rotary pairs)");
  if (c.use_bias) return unsupported(source + ": use_bias=true is not supported");
  if (!(c.rms_norm_eps > 0) || !(c.rope_theta > 0)) return bad("rms_norm_eps and rope_theta must be positive");
  return Status::ok();
}

std::string layer_name(int64_t layer, const char* suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

void add_in_place(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace

Ernie45Model::Ernie45Model(ModelConfig config, Checkpoint checkpoint, int num_threads)
    : config_(std::move(config)),
      checkpoint_(std::move(checkpoint)),
      pool_(num_threads > 0 ? num_threads : default_thread_count()) {}

Result<std::unique_ptr<Ernie45Model>> Ernie45Model::load(const std::string& dir, int num_threads) {
  const std::string config_path = dir + "/config.json";
  TERN_ASSIGN_OR_RETURN(std::string config_text, read_text_file(config_path));
  TERN_ASSIGN_OR_RETURN(ModelConfig config, parse_model_config(config_text, config_path));
  TERN_RETURN_IF_ERROR(check_config(config, config_path));
  TERN_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::open(dir));
  std::unique_ptr<Ernie45Model> model(new Ernie45Model(std::move(config), std::move(checkpoint), num_threads));
  TERN_RETURN_IF_ERROR(model->bind_weights());
  model->inv_freq_ = cpu::rope_inv_freq(model->config_.head_dim, model->config_.rope_theta);
  return model;
}

Result<const void*> Ernie45Model::tensor_data(const std::string& name, const std::vector<int64_t>& shape,
                                              DType* dtype) {
  TERN_ASSIGN_OR_RETURN(const TensorView* t, checkpoint_.require(name, shape));
  const std::string where = checkpoint_.file_of(name) + ": tensor " + name;
  if (!cpu::is_weight_dtype(t->dtype)) {
    return unsupported(where + " has dtype " + std::string(dtype_name(t->dtype)) + "; expected BF16, F16 or F32");
  }
  const size_t elem = cpu::weight_element_size(t->dtype);
  auto bytes = checked_mul(t->num_elements(), elem);
  if (!bytes || *bytes != t->data.size()) {
    return parse_error(where + " holds " + std::to_string(t->data.size()) + " bytes, not " +
                       t->shape_string() + " x " + std::to_string(elem));
  }
  *dtype = t->dtype;
  if (reinterpret_cast<uintptr_t>(t->data.data()) % elem == 0) return static_cast<const void*>(t->data.data());
  // safetensors only promises byte offsets; reading a misaligned uint16/float is UB.
  auto copy = std::make_unique<uint64_t[]>((t->data.size() + 7) / 8);
  std::memcpy(copy.get(), t->data.data(), t->data.size());
  owned_.push_back(std::move(copy));
  return static_cast<const void*>(owned_.back().get());
}

Result<cpu::WeightMatrix> Ernie45Model::matrix(const std::string& name, int64_t rows, int64_t cols) {
  cpu::WeightMatrix m;
  m.rows = rows;
  m.cols = cols;
  TERN_ASSIGN_OR_RETURN(m.data, tensor_data(name, {rows, cols}, &m.dtype));
  return m;
}

Result<cpu::WeightVector> Ernie45Model::vector(const std::string& name, int64_t size) {
  cpu::WeightVector v;
  v.size = size;
  TERN_ASSIGN_OR_RETURN(v.data, tensor_data(name, {size}, &v.dtype));
  return v;
}

Status Ernie45Model::bind_weights() {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size;
  TERN_ASSIGN_OR_RETURN(embed_, matrix("model.embed_tokens.weight", c.vocab_size, hidden));
  TERN_ASSIGN_OR_RETURN(final_norm_, vector("model.norm.weight", hidden));
  // As HF (and vLLM): a tied model's head is the embedding even if the file
  // also carries an lm_head.weight; an untied one must carry it.
  if (c.tie_word_embeddings) {
    lm_head_ = embed_;
  } else {
    if (checkpoint_.find("lm_head.weight") == nullptr) {
      return not_found("lm_head.weight missing from the checkpoint but config.json has tie_word_embeddings=false");
    }
    TERN_ASSIGN_OR_RETURN(lm_head_, matrix("lm_head.weight", c.vocab_size, hidden));
  }
  layers_.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    LayerWeights& w = layers_[static_cast<size_t>(l)];
    TERN_ASSIGN_OR_RETURN(w.input_norm, vector(layer_name(l, "input_layernorm.weight"), hidden));
    TERN_ASSIGN_OR_RETURN(w.q, matrix(layer_name(l, "self_attn.q_proj.weight"), c.q_dim(), hidden));
    TERN_ASSIGN_OR_RETURN(w.k, matrix(layer_name(l, "self_attn.k_proj.weight"), c.kv_dim(), hidden));
    TERN_ASSIGN_OR_RETURN(w.v, matrix(layer_name(l, "self_attn.v_proj.weight"), c.kv_dim(), hidden));
    TERN_ASSIGN_OR_RETURN(w.o, matrix(layer_name(l, "self_attn.o_proj.weight"), hidden, c.q_dim()));
    TERN_ASSIGN_OR_RETURN(w.post_attention_norm, vector(layer_name(l, "post_attention_layernorm.weight"), hidden));
    TERN_ASSIGN_OR_RETURN(w.gate, matrix(layer_name(l, "mlp.gate_proj.weight"), inter, hidden));
    TERN_ASSIGN_OR_RETURN(w.up, matrix(layer_name(l, "mlp.up_proj.weight"), inter, hidden));
    TERN_ASSIGN_OR_RETURN(w.down, matrix(layer_name(l, "mlp.down_proj.weight"), hidden, inter));
  }
  return Status::ok();
}

KvCache Ernie45Model::make_cache(int64_t capacity) const {
  return KvCache(config_.num_layers, config_.kv_dim(), capacity);
}

Status Ernie45Model::forward(std::span<const int32_t> tokens, KvCache& cache, std::span<float> logits) {
  return run(tokens, cache, logits, /*all_logits=*/false);
}

Status Ernie45Model::forward_all(std::span<const int32_t> tokens, KvCache& cache, std::span<float> logits) {
  return run(tokens, cache, logits, /*all_logits=*/true);
}

Status Ernie45Model::run(std::span<const int32_t> tokens, KvCache& cache, std::span<float> logits,
                         bool all_logits) {
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size, vocab = c.vocab_size;
  const int64_t q_dim = c.q_dim(), kv_dim = c.kv_dim();

  // Validate everything before touching the cache.
  if (n == 0) return invalid_argument("forward: no tokens");
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = tokens[static_cast<size_t>(i)];
    if (id < 0 || id >= vocab) {
      return invalid_argument("token id " + std::to_string(id) + " at index " + std::to_string(i) +
                              " outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  if (cache.num_layers() != c.num_layers || cache.kv_dim() != kv_dim) {
    return invalid_argument("KV cache shaped for " + std::to_string(cache.num_layers()) + " layers x " +
                            std::to_string(cache.kv_dim()) + " does not match the model (" +
                            std::to_string(c.num_layers) + " x " + std::to_string(kv_dim) + ")");
  }
  const int64_t out_rows = all_logits ? n : 1;
  if (static_cast<int64_t>(logits.size()) != out_rows * vocab) {
    return invalid_argument("logits buffer holds " + std::to_string(logits.size()) + " floats; expected " +
                            std::to_string(out_rows * vocab));
  }
  TERN_RETURN_IF_ERROR(cache.check_room(n));

  const int64_t start = cache.length();
  positions_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions_[static_cast<size_t>(i)] = start + i;
  auto sized = [](std::vector<float>& v, int64_t count) {
    v.resize(static_cast<size_t>(count));
    return v.data();
  };
  float* x = sized(x_, n * hidden);
  float* h = sized(h_, n * hidden);
  float* q = sized(q_, n * q_dim);
  float* k = sized(k_, n * kv_dim);
  float* v = sized(v_, n * kv_dim);
  float* attn = sized(attn_, n * q_dim);
  float* gate = sized(gate_, n * inter);
  float* up = sized(up_, n * inter);
  float* out = sized(out_, n * hidden);
  const float eps = static_cast<float>(c.rms_norm_eps);
  const cpu::AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim};

  cpu::embedding_lookup(embed_, tokens, x);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& w = layers_[static_cast<size_t>(l)];
    // Attention block.
    cpu::rmsnorm(x, n, w.input_norm, eps, h);
    cpu::linear(pool_, h, n, w.q, q);
    cpu::linear(pool_, h, n, w.k, k);
    cpu::linear(pool_, h, n, w.v, v);
    cpu::rope_interleaved(q, n, c.num_heads, c.head_dim, positions_, inv_freq_);
    cpu::rope_interleaved(k, n, c.num_kv_heads, c.head_dim, positions_, inv_freq_);
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(k + i * kv_dim, kv_dim, cache.key(l, start + i));
      std::copy_n(v + i * kv_dim, kv_dim, cache.value(l, start + i));
    }
    cpu::attention(pool_, q, positions_, cache.key_rows(l), cache.value_rows(l), shape, attn);
    cpu::linear(pool_, attn, n, w.o, out);
    add_in_place(x, out, n * hidden);
    // MLP block.
    cpu::rmsnorm(x, n, w.post_attention_norm, eps, h);
    cpu::linear(pool_, h, n, w.gate, gate);
    cpu::linear(pool_, h, n, w.up, up);
    cpu::silu_mul(gate, up, n * inter, gate);
    cpu::linear(pool_, gate, n, w.down, out);
    add_in_place(x, out, n * hidden);
  }
  // Only the rows whose logits are wanted go through the final norm and head.
  const float* last = x + (n - out_rows) * hidden;
  cpu::rmsnorm(last, out_rows, final_norm_, eps, h);
  cpu::linear(pool_, h, out_rows, lm_head_, logits.data());
  return cache.set_length(start + n);
}

}  // namespace tern
