// Loading model + tokenizer + runner + engine from the vLLM-named engine
// options: the one way an engine is built, shared by the `tern` subcommands
// (generate, bench, serve) and the C API (capi/).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "engine/engine.h"
#include "formats/gguf.h"
#include "model/ernie4_5/ernie4_5_model.h"
#include "model/model_config.h"
#include "model/runner_options.h"
#include "tokenizer/tokenizer.h"

namespace tern {

// --max-num-batched-tokens' defaults: on CUDA, prefill steps of 4,096 tokens while a wave of prompts
// waits (~15% faster per token than 2,048 on an H100); on the CPU a step's cost grows with its tokens alone,
// and 2,048 keeps a wave's first prompts from waiting for the whole wave.
inline constexpr int64_t kCudaStepTokens = 4096;
inline constexpr int64_t kCpuStepTokens = 2048;
// --decode-step-tokens' default: below --max-num-batched-tokens (4096 on CUDA), it keeps most steps with
// decoding streams at 2,048 tokens (docs/api.md).
inline constexpr int64_t kDecodeStepTokens = 2048;
// --long-step-max-streams' default: a step past --decode-step-tokens holds up at most 64 decoding streams
// (measured on an H100 against 32: docs/benchmarks.md).
inline constexpr int64_t kLongStepMaxStreams = 64;

struct EngineOptions {
  std::string model;
  int threads = 0;
  std::string cpu_kernels = "auto";
  // Empty: the weights as loaded; else a llama-quantize mix applied at load (CPU), fp8, or an int4 scheme
  // (apply_quantization below).
  std::string quantization;
  // Block size, step limits, graphs, the one-token kernel; max_model_len 0:
  // the model's max_position_embeddings, capped by the KV cache;
  // max_num_batched_tokens 0 (here the default): kCudaStepTokens on CUDA,
  // kCpuStepTokens elsewhere. The KV pool's bytes are worked out from
  // kv_cache_memory by load_engine.
  RunnerOptions run{.max_num_batched_tokens = 0};
  std::string kv_cache_memory;  // empty: the default sizing (engine_setup.cpp)
  std::string kv_cache_dtype = "auto";  // --kv-cache-dtype: auto, bfloat16, fp8 or fp8_e4m3 (parse_kv_cache_dtype)
  bool enable_prefix_caching = true;
  // The token budget of a step with decoding streams while they outnumber the sequences waiting for
  // prefill (SchedulerConfig::decode_step_tokens); 0: run.max_num_batched_tokens for every step.
  int64_t decode_step_tokens = kDecodeStepTokens;
  // The most decoding streams such a longer step holds up (SchedulerConfig::long_step_max_streams); 0: any.
  int64_t long_step_max_streams = kLongStepMaxStreams;
  std::string device = "auto";
  bool async_scheduling = true;  // overlap scheduling where the runner can (CUDA)
  int max_logprobs = kMaxLogprobs;  // most logprobs / prompt_logprobs per request (vLLM's max_logprobs)
  // Speculative decoding by prompt lookup: vLLM's --speculative-config JSON, or TGI's --speculate N
  // (N drafts, the other settings' defaults); at most one of the two.
  std::string speculative_config;
  int speculate = 0;
};

// The speculative settings the options name (disabled when neither is given).
Result<SpeculativeConfig> speculative_config_of(const EngineOptions& o);

// Parses "2GiB", "512MiB", "1.5G", "1000000" into bytes.
Result<int64_t> parse_bytes(const std::string& text);

// Everything a running engine needs, owned together (the engine refers to
// the model and tokenizer, so they live here and outlive it).
struct LoadedEngine {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Ernie45Model> model;
  GenerationDefaults generation_defaults;
  int64_t max_model_len = 0;
  std::unique_ptr<Engine> engine;
  double load_ms = 0;
  std::string device;  // "cpu" or "cuda": where the engine runs
  // On the CPU, how the forward runs (empty kernels on CUDA): threads, the
  // kernel set's name, the instruction set its kernels run ("avx512",
  // "avx2", "portable"; "none" for the reference loops) and whether bf16
  // weights meet bf16-rounded activations (the fast set on AVX512_BF16).
  struct CpuCompute {
    int threads = 0;
    std::string kernels;
    std::string isa;
    bool bf16_products = false;
    // "2 threads, fast kernels (AVX-512, bf16 products)", for the start-up log.
    std::string describe() const;
  } cpu;
  int64_t max_num_batched_tokens = 0;  // the step budget in force (run.max_num_batched_tokens, 0 resolved)
  int64_t kv_cache_tokens = 0;
  int64_t kv_cache_blocks = 0;
  // The KV cache's element type as stored: "fp32" or "bf16" (auto on the CPU
  // or CUDA) or "fp8_e4m3", for the start-up log and /metrics.
  std::string kv_cache_dtype;
  std::string kv_sizing;  // how the KV cache was sized, for the start-up log
  std::string model_path;  // the folder or GGUF file loaded (a hub model's snapshot in the HF cache)
  std::string model_name;  // a hub model's repo id; empty for a local path
};

// o.model is a Hugging Face folder, or a GGUF file (is_gguf_file), or a hub
// repo fetched into the HF cache first (model_source.h); a GGUF file's
// tokenizer comes from its tokenizer.ggml.* keys and whose generation
// defaults from its general.sampling.* keys (logged either way).
Result<LoadedEngine> load_engine(const EngineOptions& o);

// --quantization for a loaded model on `device` ("cpu" or "cuda"): an int4
// scheme must match the checkpoint's; fp8 quantizes the layers' matrices
// (on the CPU in place, Ernie45Model::quantize_fp8; on CUDA as they are
// uploaded: run.fp8_weights); run.fp8_lm_head (--quantize-lm-head) does
// the same for the LM head beside fp8, an int4 scheme or none (refused with
// a llama-quantize mix); a llama-quantize mix requantizes the CPU model
// (refused for CUDA). Empty: nothing. Errors name the flag.
Status apply_quantization(Ernie45Model& model, const std::string& path, const std::string& quantization,
                          const std::string& device, RunnerOptions& run);

// The general.sampling.* keys llama.cpp's converter copies from
// generation_config.json (temp, top_p, top_k, penalty_repeat); keys that are
// absent or of another type are left out. Logs what it found, or that
// there is nothing. GGUF has no do_sample.
GenerationDefaults generation_defaults_from_gguf(const GgufFile& gguf);

}  // namespace tern
