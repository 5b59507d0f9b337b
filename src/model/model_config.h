// ModelConfig: the shape and hyper-parameters of a model, read from a
// Hugging Face config.json (or GGUF metadata later) and validated so the
// forward pass can trust it. Also GenerationDefaults from generation_config.json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tern {

struct ModelConfig {
  std::string architecture;  // as written in config.json
  std::string model_type;    // "ernie4_5"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = true;
  bool use_bias = false;
  std::string torch_dtype = "bfloat16";
  int32_t bos_token_id = 1;
  std::vector<int32_t> eos_token_ids;  // config.json's eos_token_id (int or list)
  int32_t pad_token_id = 0;
  // config.json's optional "tern_notice": one line the server shows its users
  // (the log, /v1/models, the chat page); the demo model says what it is.
  std::string notice;

  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
};

// Parses and validates config.json text; `source` names the file in errors.
// Unknown architectures and inconsistent shapes are errors.
Result<ModelConfig> parse_model_config(std::string_view json_text, const std::string& source);

// Sampling defaults a model ships in generation_config.json.
struct GenerationDefaults {
  std::optional<bool> do_sample;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> repetition_penalty;
  std::vector<int32_t> eos_token_ids;
};

Result<GenerationDefaults> parse_generation_config(std::string_view json_text, const std::string& source);

}  // namespace tern
