// ERNIE 4.5 in GGUF, as llama.cpp's convert_hf_to_gguf.py writes it and
// llama.cpp reads it (architecture "ernie4_5"): the hyper-parameter keys, the
// tensor names and the Hugging Face tensor each one comes from. One table
// serves the GGUF loader and `tern convert`, so the two cannot drift apart.
//
// No q/k permutation: llama.cpp permutes q_proj/k_proj only for
// architectures whose HF checkpoints use the NeoX half-rotation while
// llama.cpp's graph uses rope type NORM (LLaMA and its kin). ERNIE 4.5's
// rotary is already the interleaved form (MODEL.md), llama.cpp runs it as
// rope type NORM, and its converter (Ernie4_5Model) copies q and k as they
// are. So the loader has nothing to undo and the forward pass is the same.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "formats/gguf.h"
#include "model/model_config.h"

namespace tern::ernie45 {

// general.architecture of a dense ERNIE 4.5 GGUF.
inline constexpr std::string_view kGgufArchitecture = "ernie4_5";

// The weights of the model; the layer ones repeat in every block.
enum class Weight {
  kTokenEmbedding,
  kOutputNorm,
  kOutput,  // the LM head; absent when tied to the embedding
  kAttnNorm,
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnOutput,
  kFfnNorm,
  kFfnGate,
  kFfnUp,
  kFfnDown,
};

struct WeightName {
  Weight weight;
  bool per_layer;
  std::string_view hf;    // "model.embed_tokens.weight"; per layer, what follows "model.layers.N."
  std::string_view gguf;  // "token_embd.weight"; per layer, what follows "blk.N."
};

// Every weight, global ones first, then one block's in the order of a layer.
std::span<const WeightName> weight_names();
// Full names; `layer` is used by per-layer weights only.
std::string hf_weight_name(Weight w, int64_t layer = 0);
std::string gguf_weight_name(Weight w, int64_t layer = 0);
// The weight and layer a Hugging Face tensor name denotes
// ("model.layers.3.mlp.up_proj.weight" -> {kFfnUp, 3}; layer 0 for global
// weights), nullopt for a name outside the table.
std::optional<std::pair<Weight, int64_t>> parse_hf_weight_name(std::string_view hf_name);
// The GGUF name of a Hugging Face tensor ("model.layers.3.mlp.up_proj.weight"
// -> "blk.3.ffn_up.weight"), nullopt for a name outside the table.
std::optional<std::string> gguf_name_of_hf(std::string_view hf_name);
// The PyTorch shape [out, in] (or [n]) `c` gives weight `w`.
std::vector<int64_t> weight_shape(Weight w, const ModelConfig& c);
// True for the tensors llama.cpp's converter keeps in F32 whatever the
// outtype: 1-D tensors and the norms.
bool gguf_keeps_f32(std::string_view gguf_name, size_t rank);

// "ernie4_5." + suffix: the architecture's hyper-parameter keys.
std::string arch_key(std::string_view suffix);

// Hyper-parameter key suffixes (after "ernie4_5.").
inline constexpr std::string_view kKeyBlockCount = "block_count";
inline constexpr std::string_view kKeyContextLength = "context_length";
inline constexpr std::string_view kKeyEmbeddingLength = "embedding_length";
inline constexpr std::string_view kKeyFeedForwardLength = "feed_forward_length";
inline constexpr std::string_view kKeyHeadCount = "attention.head_count";
inline constexpr std::string_view kKeyHeadCountKv = "attention.head_count_kv";
inline constexpr std::string_view kKeyKeyLength = "attention.key_length";
inline constexpr std::string_view kKeyValueLength = "attention.value_length";
inline constexpr std::string_view kKeyRopeFreqBase = "rope.freq_base";
inline constexpr std::string_view kKeyRmsEps = "attention.layer_norm_rms_epsilon";
inline constexpr std::string_view kKeyVocabSize = "vocab_size";              // optional; llama.cpp counts tokens
inline constexpr std::string_view kKeyRopeDimensionCount = "rope.dimension_count";  // optional
inline constexpr std::string_view kKeyRopeScalingType = "rope.scaling.type";        // optional
inline constexpr std::string_view kKeyExpertCount = "expert_count";                 // MoE only

// The hyper-parameter key/values convert_hf_to_gguf.py writes for `c`, in
// its order (block_count ... layer_norm_rms_epsilon, key_length,
// value_length). The converter writes key/value_length only when
// config.json has head_dim; every ERNIE 4.5 config does, so they are always
// written here.
std::vector<GgufKeyValue> hparam_key_values(const ModelConfig& c);

// The ModelConfig of an ERNIE 4.5 GGUF, with the checks parse_model_config
// applies to config.json: general.architecture must be "ernie4_5"; the
// sizes are required (as llama.cpp requires them), positive and at most
// 2^24; head_count_kv defaults to head_count and key_length to
// embedding_length / head_count, as in llama.cpp; vocab_size is
// ernie4_5.vocab_size or the length of tokenizer.ggml.tokens; the model is
// tied when there is no output.weight; special ids come from
// tokenizer.ggml.*_token_id (llama.cpp's SentencePiece defaults 1 / 2
// otherwise). RoPE scaling, a partial rotary and experts are refused by
// name. Every error names the file and the key.
Result<ModelConfig> config_from_gguf(const GgufFile& file);

}  // namespace tern::ernie45
