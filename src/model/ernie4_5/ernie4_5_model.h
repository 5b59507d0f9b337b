// Ernie45Model: the ERNIE 4.5 dense decoder (MODEL.md) on a CPU kernel set
// (the reference kernels unless told otherwise). Loads a Hugging Face folder
// (config.json + safetensors) or a GGUF file as llama.cpp writes it
// (gguf_names.h), checks every tensor's name, shape and dtype, and runs the forward pass over a
// KvCache (one sequence) or a PagedKvPool (a batch of sequences, one engine
// step). Weights stay in the checkpoint's memory map (zero copy), except the
// matrices of an int4 checkpoint (AWQ, GPTQ, compressed-tensors W4A16:
// formats/int4_weights.h), which become Q4_0 or Q8_0 blocks holding the same
// values, or bf16 where blocks cannot, at load.
// Thread: one caller at a time (forward uses internal scratch and a pool).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/kernel_set.h"
#include "backend/cpu/reference_kernels.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "formats/checkpoint.h"
#include "formats/int4_config.h"
#include "model/ernie4_5/gguf_names.h"
#include "model/forward_batch.h"
#include "model/gguf_quantize.h"
#include "model/kv_cache.h"
#include "model/model_config.h"
#include "model/paged_kv_pool.h"

namespace tern {

// Wall time of forward calls so far, by part: what a step-time breakdown
// (tern bench, engine metrics) reports.
struct ForwardProfile {
  double linear_s = 0;     // q/k/v/o and MLP projections, all layers
  double attention_s = 0;  // storing K/V and attending over the cache
  double lm_head_s = 0;    // final norm and the vocabulary projection
  double other_s = 0;      // embedding, norms, RoPE, SiLU, residual adds
  int64_t calls = 0;       // forward / forward_all / forward_batch calls that ran
};

class Ernie45Model {
 public:
  // `path` is a model folder (config.json and its checkpoint) or a GGUF
  // file (is_gguf_file: the config from its keys, the weights from its
  // tensors, every tensor of the file used). num_threads <= 0 means
  // default_thread_count(); `kernels` runs the forward pass. Errors name the
  // file and the key or tensor at fault.
  static Result<std::unique_ptr<Ernie45Model>> load(const std::string& path, int num_threads,
                                                    const cpu::KernelSet& kernels = cpu::reference_kernel_set());

  Ernie45Model(const Ernie45Model&) = delete;
  Ernie45Model& operator=(const Ernie45Model&) = delete;

  const ModelConfig& config() const { return config_; }
  // The GGUF file the model was loaded from (its tokenizer and sampling keys
  // too), valid while the model lives; nullptr for a Hugging Face folder.
  const GgufFile* gguf() const { return checkpoint_.gguf(); }
  // The int4 scheme of the folder (config.json's quantization_config), how
  // many of its matrices were int4, and how they are kept ("84 Q4_0, 42
  // bf16"); nullopt, 0 and "" for a float checkpoint or a GGUF file.
  const std::optional<Int4Config>& int4_config() const { return int4_; }
  int64_t num_int4_matrices() const { return num_int4_matrices_; }
  std::string int4_storage() const;
  int num_threads() const { return pool_.num_threads(); }
  const cpu::KernelSet& kernels() const { return *kernels_; }

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

  // The bound weights, read-only: views into the checkpoint (valid while the
  // model lives) in the checkpoint's dtype, for backends that upload them
  // elsewhere (CUDA). lm_head() is embedding() when the model ties them.
  struct LayerWeights {
    cpu::WeightVector input_norm;
    cpu::WeightMatrix q, k, v, o;
    cpu::WeightVector post_attention_norm;
    cpu::WeightMatrix gate, up, down;
  };
  const cpu::WeightMatrix& embedding() const { return embed_; }
  const cpu::WeightMatrix& lm_head() const { return lm_head_; }
  const cpu::WeightVector& final_norm() const { return final_norm_; }
  std::span<const LayerWeights> layer_weights() const { return layers_; }
  // The rotary frequencies the reference forward uses (head_dim / 2 floats).
  std::span<const float> rope_inv_freq() const { return inv_freq_; }

  // Requantizes the matrices in memory to `mix` (llama-quantize's per-tensor
  // rules, model/gguf_quantize.h; norms stay as they are): vLLM's and
  // llama.cpp's --quantization for a model loaded from bf16. The forward runs
  // the quantized kernels from then on. Call before any forward.
  Status quantize(QuantMix mix);
  // --quantization fp8 on the CPU: every decoder layer's matrices become
  // the fp32 values of their FP8 e4m3 form with per-row scales
  // (backend/cpu/fp8_quant.h), the values the GPU's FP8 kernels compute
  // with; the embedding and the LM head stay as loaded. This is the GPU's
  // oracle, not a smaller model: the matrices take 4 bytes a weight. Errors:
  // a matrix that is not float (a quantized GGUF, an int4 checkpoint), a
  // non-finite weight. Call before any forward. With `lm_head`, the
  // vocabulary projection too (quantize_lm_head_fp8).
  Status quantize_fp8(bool lm_head = false);
  // The vocabulary projection alone as the fp32 values of its FP8 form (a
  // tied model's head becomes a matrix of its own; the embedding lookups
  // keep the loaded table): --quantize-lm-head's reference, with the layers
  // as they are or after quantize_fp8. The same errors.
  Status quantize_lm_head_fp8();
  // With quantize_fp8, the reference of FP8 tensor-core GEMMs (W8A8): each
  // decoder layer matrix's input rows, one token each, rounded to e4m3 with
  // the row's own scale (amax / 448, cpu::quantize_fp8_row, as the GPU's
  // activation quantizer) before the product. Off (W8A16) by default.
  void set_fp8_activations(bool on) { fp8_activations_ = on; }
  // For a model only the CPU forward reads from now on (engine setup calls it
  // after making the CPU runner; a GPU upload would read the rows):
  // frees the rows quantize() made in memory wherever a packed copy serves
  // every product (the layer matrices and an untied head, quantized, packed,
  // on a CPU with the packed kernels), since those rows cannot go back to the
  // OS the way a file's pages do. Their `data` becomes null. The bytes freed.
  int64_t drop_packed_sources();

  const ForwardProfile& profile() const { return profile_; }
  void reset_profile() { profile_ = ForwardProfile{}; }

  // An empty pool shaped for this model: `num_blocks` blocks of `block_size` positions.
  PagedKvPool make_pool(int64_t num_blocks, int64_t block_size, KvCacheDType dtype = KvCacheDType::kAuto) const;

  // One engine step over many sequences. The tokens of all chunks run
  // together (every weight matrix is read once per step); chunk i's tokens
  // sit at positions start_pos .. start_pos+n-1 of its sequence, their K/V
  // are written to the pool through its block table, and they attend to
  // positions 0..pos of that sequence (earlier ones must already be in the
  // pool). For each chunk with all_logits, in batch order, the logits of
  // every token, and for each other chunk with want_logits, the logits of
  // its last token, go to the next vocab_size floats of `logits`
  // ([num_want, vocab_size]). No two chunks may write one pool slot
  // (checked), and no chunk may write a slot another chunk reads, i.e. a
  // shared block (not checked: copy on write is the engine's job).
  // Errors (InvalidArgument; checked before the pool is touched, so on
  // error nothing is written): empty batch or chunk, token id outside
  // [0, vocab), negative start_pos, a block table too short or naming a
  // block outside the pool, two chunks writing one slot, a logits buffer
  // not exactly num_want * vocab_size, a pool of another shape.
  Status forward_batch(std::span<const SequenceChunk> batch, PagedKvPool& pool, std::span<float> logits);

 private:
  Ernie45Model(ModelConfig config, Checkpoint checkpoint, int num_threads, const cpu::KernelSet& kernels);

  Status bind_weights();
  // The kernel set's repacked copies of the matrices (KernelSet::pack), set
  // as their WeightMatrix::packed; redone after quantize.
  void pack_weights();
  // m's rows replaced by the fp32 values of their e4m3 form (quantize_fp8).
  Status requantize_fp8(cpu::WeightMatrix& m, const std::string& name);
  // The checkpoint's name of a weight: Hugging Face's, or GGUF's for a GGUF file.
  std::string weight_name(ernie45::Weight w, int64_t layer = 0) const;
  // GGUF: every tensor of the file must be a weight the model bound, as llama.cpp requires.
  Status check_all_tensors_used() const;
  // The tensor `name` with exactly `shape`, as a kernel view (copied only if
  // its bytes are misaligned for its dtype); matrices may be block-quantized.
  Result<const void*> tensor_data(const std::string& name, const std::vector<int64_t>& shape, DType* dtype,
                                  bool matrix);
  Result<cpu::WeightMatrix> matrix(const std::string& name, int64_t rows, int64_t cols);
  // True when the matrix `name` ("....weight") is stored as an int4 layer;
  // an error when the folder holds it both ways, or int4 tensors without a
  // quantization_config that says how they are packed.
  Result<bool> is_int4_matrix(const std::string& name) const;
  // The int4 layer behind `name`, as load_int4_linear keeps it (in int4_data_).
  Result<cpu::WeightMatrix> int4_matrix(const std::string& name, int64_t rows, int64_t cols);
  Result<cpu::WeightVector> vector(const std::string& name, int64_t size);

  // Where a step's K/V rows go and are read from (interface), for one
  // sequence in a KvCache or a batch in a PagedKvPool; in ernie4_5.cpp.
  class KvAccess;
  class CacheKv;
  class PoolKv;

  Status run_cache(std::span<const int32_t> tokens, KvCache& cache, std::span<float> logits, bool all_logits);
  Status check_batch(std::span<const SequenceChunk> batch, const PagedKvPool& pool, std::span<float> logits);
  // The step planned in tokens_, positions_, seqs_ and logit_rows_: embed,
  // every layer, then the head for the logit rows.
  void run_step(KvAccess& kv, std::span<float> logits);
  void round_rows_to_fp8(float* x, int64_t n, int64_t width);
  void run_layer(int64_t layer, KvAccess& kv);
  // fn(first_token, count) over the step's n tokens: split over the pool by
  // token rows of `width` floats when they are enough to pay for a hand-off
  // (prefill), on this thread otherwise (decode). For the row-wise ops
  // (norms, RoPE, SiLU, residual adds), whose bits do not depend on the split.
  template <typename Fn>
  void by_tokens(int64_t n, int64_t width, const Fn& fn);
  // ys[i] = x . ws[i]^T for n tokens, through the set's linear_many when it has one.
  void project(const float* x, int64_t n, std::initializer_list<const cpu::WeightMatrix*> ws,
               std::initializer_list<float*> ys);
  void compute_logits(std::span<float> logits);

  ModelConfig config_;
  Checkpoint checkpoint_;  // owns the memory maps the weight views point into
  std::vector<std::string> bound_;  // names of the tensors bind_weights took
  std::vector<std::unique_ptr<uint64_t[]>> owned_;  // aligned copies of misaligned tensors
  std::optional<Int4Config> int4_;
  std::vector<std::vector<uint8_t>> int4_data_;  // the matrices of int4 layers
  int64_t num_int4_matrices_ = 0;
  int64_t int4_as_q4_0_ = 0, int4_as_q8_0_ = 0;  // the rest are bf16
  std::vector<std::unique_ptr<cpu::PackedWeight>> packed_;  // what the matrices' `packed` point to
  cpu::WeightMatrix embed_;
  cpu::WeightMatrix lm_head_;  // the embedding when tie_word_embeddings (but after quantize_fp8(true))
  cpu::WeightVector final_norm_;
  std::vector<LayerWeights> layers_;
  std::vector<float> inv_freq_;
  const cpu::KernelSet* kernels_;
  ThreadPool pool_;
  bool fp8_activations_ = false;  // set_fp8_activations
  ForwardProfile profile_;

  // The step in flight, rebuilt per call in buffers that keep their
  // capacity (no allocation once the largest step has been seen): all
  // sequences' tokens concatenated, their absolute positions, each
  // sequence's rows and K/V views, and the rows whose logits are wanted.
  std::vector<int32_t> tokens_;
  std::vector<int64_t> positions_;
  std::vector<cpu::AttentionSequence> seqs_;
  std::vector<int64_t> logit_rows_;
  std::vector<const float*> block_ptrs_;     // the pool's K and V block pointers for seqs_ (fp32 pool)
  std::vector<const uint8_t*> block_ptrs8_;  // the same for an fp8 pool
  std::vector<const uint16_t*> block_ptrs16_;  // and for a bf16 pool
  std::vector<int64_t> slots_;            // pool slots written this step (duplicate check)
  // Activations [T, width] of the tokens in flight.
  std::vector<float> x_, h_, q_, k_, v_, attn_, gate_, up_, out_;
};

}  // namespace tern
