// Tiny random ERNIE 4.5 checkpoints for model tests: a config.json and a
// hand-written safetensors file (bf16 weights) in a temporary folder that is
// removed with the object. Header-only; each test file gets its own copy.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "base/bf16.h"

namespace tern::test {

struct TinySpec {
  int64_t vocab = 101, hidden = 64, inter = 80, layers = 2, heads = 4, kv_heads = 2, head_dim = 24;
  double theta = 10000.0;
  bool tie = true;
  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
};

inline std::string tiny_config_json(const TinySpec& s) {
  return std::string("{\"architectures\": [\"Ernie4_5ForCausalLM\"], \"model_type\": \"ernie4_5\"") +
         ", \"vocab_size\": " + std::to_string(s.vocab) + ", \"hidden_size\": " + std::to_string(s.hidden) +
         ", \"intermediate_size\": " + std::to_string(s.inter) +
         ", \"num_hidden_layers\": " + std::to_string(s.layers) +
         ", \"num_attention_heads\": " + std::to_string(s.heads) +
         ", \"num_key_value_heads\": " + std::to_string(s.kv_heads) +
         ", \"head_dim\": " + std::to_string(s.head_dim) + ", \"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-05" +
         ", \"rope_theta\": " + std::to_string(s.theta) + ", \"max_position_embeddings\": 4096" +
         ", \"use_bias\": false, \"tie_word_embeddings\": " + (s.tie ? "true" : "false") +
         ", \"torch_dtype\": \"bfloat16\", \"bos_token_id\": 1, \"eos_token_id\": 2, \"pad_token_id\": 0}";
}

// A safetensors file of random bf16 tensors with ERNIE's names and shapes.
// Scales keep activations O(1), so softmax and SiLU work away from their
// linear regions and small errors would show.
inline std::string tiny_safetensors(const TinySpec& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string header = "{", data;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    int64_t n = 1;
    for (int64_t dim : shape) n *= dim;
    const size_t begin = data.size();
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h = 0;
      while (h == 0 || h == 0x8000) h = f32_to_bf16(d(rng));
      data.append(reinterpret_cast<const char*>(&h), 2);
    }
    std::string dims;
    for (int64_t dim : shape) dims += (dims.empty() ? "" : ",") + std::to_string(dim);
    if (header.size() > 1) header += ",";
    header += "\"" + name + "\":{\"dtype\":\"BF16\",\"shape\":[" + dims + "],\"data_offsets\":[" +
              std::to_string(begin) + "," + std::to_string(data.size()) + "]}";
  };
  auto mat = [&](const std::string& name, int64_t rows, int64_t cols) {
    float a = 1.7f / std::sqrt(static_cast<float>(cols));
    add(name, {rows, cols}, -a, a);
  };
  auto layer = [](int64_t l, const char* suffix) { return "model.layers." + std::to_string(l) + "." + suffix; };
  add("model.embed_tokens.weight", {s.vocab, s.hidden}, -1.0f, 1.0f);
  for (int64_t l = 0; l < s.layers; ++l) {
    add(layer(l, "input_layernorm.weight"), {s.hidden}, 0.5f, 1.5f);
    mat(layer(l, "self_attn.q_proj.weight"), s.q_dim(), s.hidden);
    mat(layer(l, "self_attn.k_proj.weight"), s.kv_dim(), s.hidden);
    mat(layer(l, "self_attn.v_proj.weight"), s.kv_dim(), s.hidden);
    mat(layer(l, "self_attn.o_proj.weight"), s.hidden, s.q_dim());
    add(layer(l, "post_attention_layernorm.weight"), {s.hidden}, 0.5f, 1.5f);
    mat(layer(l, "mlp.gate_proj.weight"), s.inter, s.hidden);
    mat(layer(l, "mlp.up_proj.weight"), s.inter, s.hidden);
    mat(layer(l, "mlp.down_proj.weight"), s.hidden, s.inter);
  }
  add("model.norm.weight", {s.hidden}, 0.5f, 1.5f);
  if (!s.tie) mat("lm_head.weight", s.vocab, s.hidden);
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  uint64_t len = header.size();
  return std::string(reinterpret_cast<const char*>(&len), 8) + header + data;
}

// A random model in a fresh temporary folder, deleted on destruction.
class TinyModelDir {
 public:
  TinyModelDir(const TinySpec& spec, uint32_t seed) {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("tern_tiny_model_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
    std::ofstream(path_ / "config.json", std::ios::binary) << tiny_config_json(spec);
    std::ofstream(path_ / "model.safetensors", std::ios::binary) << tiny_safetensors(spec, seed);
  }
  ~TinyModelDir() { std::filesystem::remove_all(path_); }
  TinyModelDir(const TinyModelDir&) = delete;
  TinyModelDir& operator=(const TinyModelDir&) = delete;
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace tern::test
