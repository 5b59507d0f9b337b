// The engine flags of the `tern` subcommands.
#include "cli/engine_setup.h"

#include "cli/number_checks.h"

namespace tern::cli {

void add_kv_cache_dtype_option(CLI::App& cmd, EngineOptions& o) {
  cmd.add_option("--kv-cache-dtype", o.kv_cache_dtype,
                 "KV cache element type: auto (bf16 on CUDA; on the CPU bf16 with the fast kernel set, fp32 with "
                 "optimized and reference), float32 (alias fp32; the CPU only), bfloat16 (alias bf16) or fp8 (alias "
                 "fp8_e4m3): FP8 E4M3 with per-layer scales of 1, twice the tokens of bf16 (four times fp32) in the "
                 "same memory")
      ->check([](const std::string& text) {
        Result<KvCacheDType> dtype = parse_kv_cache_dtype(text);
        return dtype.is_ok() ? std::string() : dtype.status().message();
      })
      ->capture_default_str()->envname("TERN_KV_CACHE_DTYPE");
}

void add_model_options(CLI::App& cmd, EngineOptions& o, bool model_positional) {
  cmd.add_option(model_positional ? "model,--model,-m" : "--model,-m", o.model,
                 "Model folder (Hugging Face layout), GGUF file, or Hugging Face repo ORG/NAME[@REVISION][:FILE] "
                 "fetched into the HF cache (FILE: one GGUF file of the repo, by name or quantization tag)")
      ->required()->envname("TERN_MODEL");
  cmd.add_option("--threads,-t", o.threads,
                 "CPU threads (default: the physical cores this process may run on; a core's second hardware "
                 "thread shares its vector units)")
      ->envname("TERN_THREADS");
  cmd.add_option("--quantization,-q", o.quantization,
                 "CPU: quantize the weights at load to a llama-quantize mix (q8_0, q4_0, q4_k_m, q5_k_m, q6_k), "
                 "for a model without a quantized GGUF; or awq, gptq, compressed-tensors: the int4 scheme of the "
                 "checkpoint, which must match its config.json (int4 checkpoints load without the flag too); or fp8: "
                 "float weights quantized at load to FP8 e4m3 with per-row scales (CUDA; on the CPU the same "
                 "values in fp32, the reference)")
      ->check(CLI::IsMember({"q8_0", "q4_0", "q4_k_m", "q5_k_m", "q6_k", "awq", "gptq", "compressed-tensors", "fp8"},
                            CLI::ignore_case))
      ->envname("TERN_QUANTIZATION");
  cmd.add_flag("--quantize-lm-head", o.run.fp8_lm_head,
               "Quantize the LM head (the vocabulary projection, tied to the embedding in ERNIE 4.5) to FP8 e4m3 "
               "with per-row scales, beside --quantization fp8, an int4 checkpoint or float weights (not a "
               "llama-quantize mix); by default it stays as loaded, as in vLLM")
      ->envname("TERN_QUANTIZE_LM_HEAD");
  cmd.add_option("--cpu-kernels", o.cpu_kernels,
                 "CPU kernel set: auto (fast on AMD CPUs with AVX512_BF16, whose bf16 products run at twice the "
                 "fp32 rate; optimized elsewhere), fast (AVX-512/AVX2 by what the CPU has; activations rounded to bf16 before "
                 "their products with bf16 weights where the CPU has AVX512_BF16, as HF's bf16 forward, the GPU "
                 "path and llama.cpp round them, from a repacked copy of the layer matrices whose file pages go "
                 "back), optimized (the same kernels with fp32 activations: about half the bf16 prefill rate, "
                 "logits within 1e-4 of the reference) or reference (plain loops, the oracle)")
      ->check(CLI::IsMember({"auto", "optimized", "fast", "reference"}))->capture_default_str()->envname("TERN_CPU_KERNELS");
  cmd.add_option("--device", o.device,
                 "auto (cuda when this build has CUDA and a GPU is present), cuda, cpu, or null: no model runs and "
                 "every step picks one fixed token at once, to measure what the server and the engine cost "
                 "themselves (HTTP, scheduling, detokenization, streaming)")
      ->check(CLI::IsMember({"auto", "cuda", "cpu", "null"}))->capture_default_str()->envname("TERN_DEVICE");
}

void add_engine_options(CLI::App& cmd, EngineOptions& o, bool model_positional) {
  add_model_options(cmd, o, model_positional);
  cmd.add_option("--max-model-len", o.run.max_model_len,
                 "Longest sequence (prompt + output) in tokens (default: the model's, capped by the KV cache)")
      ->envname("TERN_MAX_MODEL_LEN");
  cmd.add_option("--max-num-seqs", o.run.max_num_seqs, "Most sequences in one batch")
      ->check(at_least(1))->capture_default_str()->envname("TERN_MAX_NUM_SEQS");
  cmd.add_option("--max-num-batched-tokens", o.run.max_num_batched_tokens,
                 "Most tokens computed in one step (default: 4096 on CUDA, 2048 on the CPU)")
      ->check(at_least(1))->envname("TERN_MAX_NUM_BATCHED_TOKENS");
  cmd.add_option("--decode-step-tokens", o.decode_step_tokens,
                 "Most tokens in a step that carries decoding streams, so that a long prefill does not hold up "
                 "their next token; while the requests waiting for prefill outnumber those streams (and these "
                 "are at most --long-step-max-streams), a step takes up to --max-num-batched-tokens (0: every "
                 "step up to --max-num-batched-tokens; at or above it, the two are the same)")
      ->check(at_least(0))->capture_default_str()->envname("TERN_DECODE_STEP_TOKENS");
  cmd.add_option("--long-step-max-streams", o.long_step_max_streams,
                 "Most decoding streams a step longer than --decode-step-tokens may hold up: with more streams "
                 "decoding, steps keep to --decode-step-tokens even while the requests waiting for prefill "
                 "outnumber them (0: no bound)")
      ->check(at_least(0))->capture_default_str()->envname("TERN_LONG_STEP_MAX_STREAMS");
  cmd.add_option("--block-size", o.run.block_size, "Tokens per KV cache block")
      ->check(between(1, 1024))->capture_default_str()->envname("TERN_BLOCK_SIZE");
  cmd.add_option("--kv-cache-memory", o.kv_cache_memory,
                 "Memory for the KV cache, e.g. 2GiB or 512MiB (default: CUDA, room for --max-num-seqs sequences "
                 "of --max-model-len tokens, or of 2048 when that is not given, within the GPU's free memory; "
                 "CPU, 2GiB)")
      ->envname("TERN_KV_CACHE_MEMORY");
  add_kv_cache_dtype_option(cmd, o);
  cmd.add_option("--gpu-memory-utilization", o.run.gpu_memory_utilization,
                 "CUDA: share of the GPU's memory tern may take (weights, workspace, KV cache), e.g. 0.9; the KV "
                 "cache gets the rest. Instead of --kv-cache-memory")
      ->check(between(0.0, 1.0))->envname("TERN_GPU_MEMORY_UTILIZATION");
  cmd.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", o.enable_prefix_caching,
               "Reuse the KV cache of shared prompt prefixes (default on)")
      ->envname("TERN_ENABLE_PREFIX_CACHING");
  cmd.add_flag("--enforce-eager", o.run.enforce_eager, "CUDA: run every step eagerly, without CUDA graphs")
      ->envname("TERN_ENFORCE_EAGER");
  cmd.add_flag("--async-scheduling,!--no-async-scheduling", o.async_scheduling,
               "CUDA: schedule and launch step n + 1 while step n runs, its new tokens fed to it on the GPU "
               "(default on)")
      ->envname("TERN_ASYNC_SCHEDULING");
  cmd.add_flag("--decode-kernel,!--no-decode-kernel", o.run.decode_kernel,
               "CUDA: run all layers of a one-token step (a single stream's decode) as one persistent kernel "
               "where the GPU and model shapes allow (default on); off: a few kernels per layer")
      ->envname("TERN_DECODE_KERNEL");
  cmd.add_option("--gemm-k-split-tokens", o.run.k_split_max_tokens,
                 "CUDA: steps of up to this many tokens (past the few a single-token GEMV takes) run the "
                 "attention output and MLP down projections split over their inputs, the slices' partial sums "
                 "added by the norm after each: more of the GPU busy at decode batch sizes (0: never; bf16 "
                 "weights only)")
      ->check(at_least(0))->capture_default_str()->envname("TERN_GEMM_K_SPLIT_TOKENS");
  cmd.add_option("--null-step-us", o.run.null_step_us,
                 "With --device null: each step takes this many microseconds (slept, as a GPU step's wait), so "
                 "each stream gets one token an event as from a device with that step time (default 0: at once)")
      ->check(between(int64_t{0}, int64_t{10000000}))->capture_default_str()->envname("TERN_NULL_STEP_US");
  cmd.add_option("--speculative-config", o.speculative_config,
                 "Speculative decoding by prompt lookup, as vLLM's JSON: {\"method\": \"ngram\", "
                 "\"num_speculative_tokens\": N, \"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2, "
                 "\"disable_by_batch_size\": 4}: a decoding sequence whose last 2-4 tokens occurred earlier in its "
                 "prompt or output verifies the up to N tokens that followed them in its next step, and keeps "
                 "those its own sampling picks again (same outputs; fewer steps where text repeats), while at most "
                 "disable_by_batch_size sequences decode (4 on the CPU, 1 on a GPU unless given; default off)")
      ->envname("TERN_SPECULATIVE_CONFIG");
  cmd.add_option("--speculate", o.speculate,
                 "As TGI's: speculative decoding by prompt lookup with up to N drafts a step and "
                 "--speculative-config's other defaults (0: off)")
      ->check(between(0, 16))->capture_default_str()->envname("TERN_SPECULATE");
  cmd.add_option("--max-logprobs", o.max_logprobs,
                 "Most logprobs (top_logprobs, prompt_logprobs, TGI's top_n_tokens) a request may ask for "
                 "(400 beyond)")
      ->check(between(0, 1 << 20))->capture_default_str()->envname("TERN_MAX_LOGPROBS");
}

}  // namespace tern::cli
