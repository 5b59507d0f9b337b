// DeviceModel: the ERNIE 4.5 dense decoder on one CUDA GPU. Uploads the
// weights once as bf16 (q|k|v and gate|up concatenated so each is one GEMM),
// plans the activation workspace once for max_num_batched_tokens, owns the
// paged bf16 KV pool ([layer][k|v][block][block_size][kv_dim]) sized from a
// byte budget, and runs one engine step (a batch of SequenceChunks) per
// forward_batch call, returning fp32 logits of the rows that want them.
// This header has no CUDA includes so host-only code can hold a DeviceModel.
// Thread: one caller at a time (the engine thread); the GPU work of a call
// is finished when it returns.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/reference_kernels.h"
#include "base/status.h"
#include "model/forward_batch.h"
#include "model/model_config.h"

namespace tern::cuda {

// Host views of the weights to upload (any dtype the CPU kernels read), in
// PyTorch [out, in] layout. Borrowed for the duration of create() only.
struct HostLayerWeights {
  cpu::WeightVector input_norm;
  cpu::WeightMatrix q, k, v, o;
  cpu::WeightVector post_attention_norm;
  cpu::WeightMatrix gate, up, down;
};
struct HostWeights {
  cpu::WeightMatrix embedding;
  cpu::WeightMatrix lm_head;  // same data as embedding when tied: uploaded once
  cpu::WeightVector final_norm;
  std::vector<HostLayerWeights> layers;
  std::vector<float> rope_inv_freq;  // head_dim / 2, as the CPU reference computes them
};

struct DeviceModelOptions {
  int64_t block_size = 16;
  int64_t kv_cache_bytes = 0;              // the KV pool is the number of whole blocks that fit
  int64_t max_num_batched_tokens = 2048;   // tokens per forward_batch call
  int64_t max_logit_rows = 256;            // LM-head rows computed per pass (more are done in passes)
  int device = 0;
};

// Where the GPU memory went, for start-up logs and the memory target.
struct DeviceMemoryUse {
  int64_t weight_bytes = 0;
  int64_t workspace_bytes = 0;
  int64_t kv_pool_bytes = 0;
};

class DeviceModel {
 public:
  // Errors: Unsupported (no GPU, a shape the kernels do not handle),
  // ResourceExhausted (the weights, workspace or KV budget do not fit:
  // the message says how much is free), InvalidArgument (bad options).
  static Result<std::unique_ptr<DeviceModel>> create(const ModelConfig& config, const HostWeights& weights,
                                                     const DeviceModelOptions& options);
  ~DeviceModel();
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;

  // One engine step; the same contract as Ernie45Model::forward_batch
  // (model/arch/ernie4_5.h) over this model's device pool: chunk i's tokens
  // sit at start_pos.., their K/V go to the pool through its block table,
  // and logits of each want_logits chunk's last token fill the next
  // vocab_size floats of `logits`. Validated before any GPU work (token ids,
  // block tables against the pool, the token budget, the logits size). Two
  // chunks writing one slot is the engine's bug and is not checked here.
  Status forward_batch(std::span<const SequenceChunk> batch, std::span<float> logits);

  // Copies every layer's K and V of block src into dst (copy on write),
  // ordered before the next forward_batch.
  Status copy_block(int32_t src, int32_t dst);

  int64_t num_kv_blocks() const;
  int64_t block_size() const;
  int64_t vocab_size() const;
  int64_t max_num_batched_tokens() const;
  DeviceMemoryUse memory_use() const;

  // Copies the whole KV pool to the host as fp32 (tests).
  Status read_kv_pool(std::vector<float>& out) const;

 private:
  struct Impl;
  explicit DeviceModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tern::cuda
