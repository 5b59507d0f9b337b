// RunnerOptions: what the engine's flags decide about running a model on a
// device (the KV pool's size and block, a step's token and sequence limits,
// graphs and the one-token kernel on CUDA). One struct from the command line
// through the runner to the device model, never copied field by field.
#pragma once

#include <cstdint>

#include "model/kv_cache_dtype.h"

namespace tern {

struct RunnerOptions {
  int64_t block_size = 16;                // positions per KV block
  int64_t kv_cache_bytes = 0;             // the KV pool: the number of whole blocks that fit
  // The pool's element type (--kv-cache-dtype): auto is fp32 on the CPU,
  // bf16 on CUDA; fp8 is e4m3 on both, so the same bytes hold more blocks.
  KvCacheDType kv_cache_dtype = KvCacheDType::kAuto;
  // Instead of kv_cache_bytes (> 0, CUDA): the share of the GPU's total
  // memory tern's allocations may take (weights, workspace, graphs and the
  // KV pool); the pool gets what is left of it. vLLM's --gpu-memory-utilization.
  double gpu_memory_utilization = 0;
  // kv_cache_bytes is a default, not a request: when it does not fit, take
  // what the GPU has free (less a margin) instead of failing.
  bool kv_fit_to_free = false;
  int64_t max_num_batched_tokens = 2048;  // the scheduler's token budget: no step holds more
  int64_t max_num_seqs = 256;             // the scheduler's sequence limit; CUDA decode graphs go up to it (<= 256)
  int64_t max_model_len = 0;              // longest sequence, sizes the decode block tables (0: the model's)
  bool enforce_eager = false;             // CUDA: no graphs, every step's kernels launched one by one
  // CUDA: one-token steps run all their layers as one persistent kernel
  // where the shapes and the GPU allow; off: a few kernels per layer.
  bool decode_kernel = true;
  // CUDA: steps past the GEMV's sizes of up to this many tokens run the
  // o and down projections as K slices (their partials summed by the norm
  // after each); 0: never. --gemm-k-split-tokens. On an H100, decode at
  // 128-256 sequences +2-3%, 64 and below level, through HTTP conc-64 and
  // conc-256 +3-4% (docs/benchmarks.md).
  int64_t k_split_max_tokens = 512;
  // CUDA: the decoder layers' matrices go to the GPU as FP8 e4m3 with one
  // fp32 scale per output row (backend/cpu/fp8_quant.h); the embedding
  // stays bf16, the LM head too unless fp8_lm_head. --quantization fp8.
  bool fp8_weights = false;
  // The LM head (the vocabulary projection) as FP8 e4m3 with per-row
  // scales, beside FP8, int4 or bf16 layers: a third of the weight bytes a
  // bf16 token reads; a tied head gets codes of its own, the embedding
  // staying bf16 for the lookups. --quantize-lm-head.
  bool fp8_lm_head = false;
  // --device null: how long each step takes (microseconds, slept), so that
  // streams get one token an event as from a device with that step time.
  int64_t null_step_us = 0;
};

}  // namespace tern
