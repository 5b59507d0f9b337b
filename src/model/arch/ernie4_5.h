// Ernie45Model: the ERNIE 4.5 dense decoder (MODEL.md) on the CPU reference
// kernels. Loads a Hugging Face folder (config.json + safetensors), checks
// every tensor's name, shape and dtype, and runs the forward pass over a
// KvCache. Weights stay in the checkpoint's memory map (zero copy).
// Thread: one caller at a time (forward uses internal scratch and a pool).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/reference_kernels.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "formats/checkpoint.h"
#include "model/kv_cache.h"
#include "model/model_config.h"

namespace tern {

class Ernie45Model {
 public:
  // Reads dir/config.json and the checkpoint in `dir`. num_threads <= 0
  // means default_thread_count(). Errors name the file and tensor at fault.
  static Result<std::unique_ptr<Ernie45Model>> load(const std::string& dir, int num_threads);

  Ernie45Model(const Ernie45Model&) = delete;
  Ernie45Model& operator=(const Ernie45Model&) = delete;

  const ModelConfig& config() const { return config_; }
  int num_threads() const { return pool_.num_threads(); }

  // An empty cache shaped for this model, room for `capacity` tokens.
  KvCache make_cache(int64_t capacity) const;

  // Runs `tokens` at positions cache.length() .. cache.length()+n-1, appends
  // their K/V to the cache and writes the logits of the last token to
  // `logits` (exactly vocab_size floats). On error nothing is appended.
  // Errors: InvalidArgument (no tokens, id outside [0, vocab), logits size,
  // cache of another shape), ResourceExhausted (cache capacity).
  Status forward(std::span<const int32_t> tokens, KvCache& cache, std::span<float> logits);
  // As forward, but writes the logits of every token: [n, vocab_size].
  Status forward_all(std::span<const int32_t> tokens, KvCache& cache, std::span<float> logits);

 private:
  struct LayerWeights {
    cpu::WeightVector input_norm;
    cpu::WeightMatrix q, k, v, o;
    cpu::WeightVector post_attention_norm;
    cpu::WeightMatrix gate, up, down;
  };

  Ernie45Model(ModelConfig config, Checkpoint checkpoint, int num_threads);

  Status bind_weights();
  // The tensor `name` with exactly `shape`, as a kernel view (copied only if
  // its bytes are misaligned for its dtype).
  Result<const void*> tensor_data(const std::string& name, const std::vector<int64_t>& shape, DType* dtype);
  Result<cpu::WeightMatrix> matrix(const std::string& name, int64_t rows, int64_t cols);
  Result<cpu::WeightVector> vector(const std::string& name, int64_t size);

  Status run(std::span<const int32_t> tokens, KvCache& cache, std::span<float> logits, bool all_logits);

  ModelConfig config_;
  Checkpoint checkpoint_;  // owns the memory maps the weight views point into
  std::vector<std::unique_ptr<uint64_t[]>> owned_;  // aligned copies of misaligned tensors
  cpu::WeightMatrix embed_;
  cpu::WeightMatrix lm_head_;  // the embedding when tie_word_embeddings
  cpu::WeightVector final_norm_;
  std::vector<LayerWeights> layers_;
  std::vector<float> inv_freq_;
  ThreadPool pool_;

  // Scratch, resized per call: activations of the tokens in flight.
  std::vector<int64_t> positions_;
  std::vector<float> x_, h_, q_, k_, v_, attn_, gate_, up_, out_;
};

}  // namespace tern
