// Building an Engine from engine options.
#include "setup/engine_setup.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "backend/cpu/kernel_set.h"
#include "backend/cpu/linear_kernels.h"
#include "base/logging.h"
#include "base/mapped_file.h"
#include "formats/checkpoint.h"
#include "formats/gguf.h"
#include "formats/int4_config.h"
#include "engine/runner.h"
#include "runners/cpu_runner.h"
#include "runners/cuda_runner.h"
#include "runners/null_runner.h"
#include "setup/model_source.h"

namespace tern {

Result<SpeculativeConfig> speculative_config_of(const EngineOptions& o) {
  if (!o.speculative_config.empty() && o.speculate > 0) {
    return invalid_argument("--speculative-config and --speculate both name speculative decoding: give one");
  }
  if (!o.speculative_config.empty()) return parse_speculative_config(o.speculative_config);
  SpeculativeConfig c;
  c.num_tokens = o.speculate;
  TERN_RETURN_IF_ERROR(validate_speculative_config(c));
  return c;
}

Result<int64_t> parse_bytes(const std::string& text) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (...) {
    return invalid_argument("cannot read a size from '" + text + "' (try 2GiB or 512MiB)");
  }
  std::string unit = text.substr(pos);
  double scale = 1;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "K" || unit == "KB") scale = 1e3;
  else if (unit == "KiB") scale = 1024.0;
  else if (unit == "M" || unit == "MB") scale = 1e6;
  else if (unit == "MiB") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB") scale = 1e9;
  else if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
  else return invalid_argument("unknown size unit '" + unit + "' in '" + text + "' (use B, KiB, MiB, GiB, K, M, G)");
  double bytes = value * scale;
  if (!(bytes > 0) || bytes > 9e18) return invalid_argument("size '" + text + "' is out of range");
  return static_cast<int64_t>(std::llround(bytes));
}

GenerationDefaults generation_defaults_from_gguf(const GgufFile& gguf) {
  GenerationDefaults d;
  std::string found;
  auto number = [&](const char* key, std::optional<double>& out) {
    if (auto v = gguf.get_f32(key); v.is_ok() && std::isfinite(*v)) {
      out = *v;
      found += std::string(found.empty() ? "" : ", ") + key;
    }
  };
  number("general.sampling.temp", d.temperature);
  number("general.sampling.top_p", d.top_p);
  number("general.sampling.penalty_repeat", d.repetition_penalty);
  if (auto k = gguf.get_i32("general.sampling.top_k"); k.is_ok() && *k >= 0) {
    d.top_k = *k;
    found += std::string(found.empty() ? "" : ", ") + "general.sampling.top_k";
  }
  if (found.empty()) {
    spdlog::info("{}: no generation defaults in the GGUF (no general.sampling.* keys); requests that leave "
                 "sampling out use temperature 1, top_p 1",
                 gguf.name());
  } else {
    spdlog::info("{}: generation defaults from {} (GGUF has no do_sample: sampling is on)", gguf.name(), found);
  }
  return d;
}

namespace {

bool is_int4_method(const std::string& quantization) {
  for (Int4Scheme s : {Int4Scheme::kAwqGemm, Int4Scheme::kGptq, Int4Scheme::kCompressedTensors}) {
    if (quantization == int4_method_name(s)) return true;
  }
  return false;
}

// --quantization awq|gptq|compressed-tensors names the checkpoint's own
// scheme (as vLLM takes it), so it must match config.json's; and one log
// line says how the int4 matrices run.
Status check_int4_checkpoint(const Ernie45Model& model, const std::string& path, const std::string& quantization,
                             const std::string& device) {
  const std::optional<Int4Config>& int4 = model.int4_config();
  if (is_int4_method(quantization)) {
    if (!int4) {
      return invalid_argument("--quantization " + quantization + " loads a checkpoint quantized that way, but " + path +
                              " has no quantization_config in its config.json (" +
                              (model.gguf() != nullptr ? "a GGUF file" : "float weights") +
                              "); to quantize float weights at load use --quantization q4_0, q4_k_m, q5_k_m, q6_k "
                              "or q8_0 (CPU), or make an int4 folder first (tools/quantize_awq.py, AutoAWQ, GPTQModel, "
                              "llm-compressor)");
    }
    if (quantization != int4_method_name(int4->scheme)) {
      return invalid_argument("--quantization " + quantization + " does not match " + path +
                              "/config.json, whose quantization_config.quant_method is " +
                              std::string(int4_method_name(int4->scheme)));
    }
  }
  if (!int4) return Status::ok();
  if (model.num_int4_matrices() == 0) {
    spdlog::warn("{}/config.json has a quantization_config ({}) but no layer is stored that way: float weights loaded",
                 path, int4_method_name(int4->scheme));
    return Status::ok();
  }
  // Q4_0 / Q8_0 hold the checkpoint's values exactly (formats/int4_weights.h); bf16 rounds them.
  spdlog::info("{}: int4 checkpoint ({}): its {} matrices kept as {}", path, describe_int4_config(*int4),
               model.num_int4_matrices(), model.int4_storage());
  if (device == "cuda") {
    spdlog::info(
        "on the GPU its Q4_0 and Q8_0 matrices run as int4 weights (W4A16: 4-bit codes, a scale and zero "
        "per 32, the same values), its bf16 ones as bf16");
  }
  return Status::ok();
}

}  // namespace

Status apply_quantization(Ernie45Model& model, const std::string& path, const std::string& quantization,
                          const std::string& device, RunnerOptions& run) {
  TERN_RETURN_IF_ERROR(check_int4_checkpoint(model, path, quantization, device));
  // --quantize-lm-head: with fp8 (below), float layers or an int4 checkpoint's; a llama-quantize mix sets the
  // head's own type.
  const bool head_alone = run.fp8_lm_head && (quantization.empty() || is_int4_method(quantization));
  if (run.fp8_lm_head && !head_alone && quantization != "fp8") {
    return invalid_argument("--quantize-lm-head quantizes the LM head to FP8 beside --quantization fp8, an int4 "
                            "checkpoint or float weights, but --quantization " + quantization +
                            " gives the head a type of its own; leave one of the two out");
  }
  if (head_alone) {
    if (device == "cuda") return Status::ok();  // quantized as it is uploaded, as fp8's layers
    spdlog::info("--quantize-lm-head on the CPU: the LM head holds the fp32 values of its FP8 form (the GPU "
                 "kernels' reference); no memory or speed is saved");
    return model.quantize_lm_head_fp8();
  }
  if (quantization.empty() || is_int4_method(quantization)) return Status::ok();
  if (quantization == "fp8") {
    if (model.gguf() == nullptr && model.int4_config()) {
      return invalid_argument("--quantization fp8 quantizes float weights at load, but " + path +
                              " is an int4 checkpoint (" + std::string(int4_method_name(model.int4_config()->scheme)) +
                              "); leave --quantization out or give its scheme");
    }
    if (device == "cuda") {
      run.fp8_weights = true;  // quantized as they are uploaded, by the same function as below
      return Status::ok();
    }
    spdlog::info("--quantization fp8 on the CPU: the layers' matrices hold the fp32 values of their FP8 form "
                 "(the GPU kernels' reference); no memory or speed is saved");
    return model.quantize_fp8(run.fp8_lm_head);
  }
  if (device != "cpu" && quantization != "q4_0") {
    return unsupported("--quantization " + quantization +
                       " quantizes the CPU model; the GPU takes fp8, q4_0 or an "
                       "int4 checkpoint (run with --device cpu, use --quantization fp8 or q4_0, or leave it out)");
  }
  TERN_ASSIGN_OR_RETURN(QuantMix mix, parse_quant_mix(quantization));
  if (device == "cuda") {
    spdlog::info(
        "--quantization q4_0 on the GPU: the matrices quantized to Q4_0 on the host as on the CPU; the "
        "layers' run as int4 weights (W4A16), the embedding and LM head as bf16");
  }
  return model.quantize(mix);
}

std::string LoadedEngine::CpuCompute::describe() const {
  if (kernels.empty()) return "";
  std::string what = isa == "none" ? "plain loops" : isa == "avx512" ? "AVX-512" : isa == "avx2" ? "AVX2" : "portable";
  if (bf16_products) what += ", bf16 products";
  return std::to_string(threads) + (threads == 1 ? " thread, " : " threads, ") + kernels + " kernels (" + what + ")";
}

namespace {

// --device null's runner: as many blocks as the CPU pool would hold, and
// every token the first of " the" (a plain text piece in any vocabulary
// that has it; else the first id that is not special).
Result<std::unique_ptr<Runner>> make_null_runner(const Ernie45Model& model, const Tokenizer& tokenizer,
                                                 const RunnerOptions& run) {
  const ModelConfig& c = model.config();
  TERN_ASSIGN_OR_RETURN(const int64_t blocks, CpuRunner::pool_blocks(c, run));
  int32_t token = -1;
  const std::vector<int32_t> ids = tokenizer.encode(" the", false);
  if (!ids.empty() && ids.front() >= 0 && ids.front() < c.vocab_size) token = ids.front();
  for (int32_t id = 0; token < 0 && id < c.vocab_size; ++id) {
    if (!tokenizer.is_special(id)) token = id;
  }
  if (token < 0) return invalid_argument("--device null: the vocabulary has no token that is not special");
  spdlog::info("--device null: no model runs; every step picks token {} after {} us ({} KV blocks planned, none "
               "held)",
               token, run.null_step_us, blocks);
  return std::unique_ptr<Runner>(new NullRunner(c.vocab_size, blocks, run.block_size, token, run.null_step_us));
}

}  // namespace

Result<LoadedEngine> load_engine(const EngineOptions& o) {
  auto start = std::chrono::steady_clock::now();
  LoadedEngine le;
  TERN_ASSIGN_OR_RETURN(const SpeculativeConfig speculative, speculative_config_of(o));
  const cpu::KernelSet* kernels = cpu::kernel_set_named(o.cpu_kernels);
  if (kernels == nullptr) {
    return invalid_argument("--cpu-kernels takes auto, fast, optimized or reference, not '" + o.cpu_kernels + "'");
  }
  std::string device = o.device;
  if (device == "auto") {
    bool gpu_present = std::filesystem::exists("/dev/nvidiactl") || std::filesystem::exists("/dev/nvidia0");
    device = cuda_backend_built() && gpu_present ? "cuda" : "cpu";
  }
  if (o.run.null_step_us > 0 && device != "null") return invalid_argument("--null-step-us is for --device null");
  // On CUDA the host model is the upload's source: the optimized set, which
  // repacks only quantized matrices, as it always has (the fast set's bf16
  // panels would cost load time and fault the file pages in again).
  if (device == "cuda" && kernels == &cpu::fast_kernel_set()) kernels = &cpu::optimized_kernel_set();
  TERN_ASSIGN_OR_RETURN(ModelSource source, resolve_model_source(o.model));
  le.model_path = source.path;
  le.model_name = source.name;
  TERN_ASSIGN_OR_RETURN(le.model, Ernie45Model::load(source.path, o.threads, *kernels));
  if (const GgufFile* gguf = le.model->gguf()) {
    // The tokenizer and sampling keys of the file the model already parsed.
    TERN_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::from_gguf(*gguf));
    le.tokenizer = std::make_unique<Tokenizer>(std::move(tok));
    le.generation_defaults = generation_defaults_from_gguf(*gguf);
  } else {
    TERN_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::load(source.path));
    le.tokenizer = std::make_unique<Tokenizer>(std::move(tok));
    std::string gen_path = source.path + "/generation_config.json";
    if (std::filesystem::exists(gen_path)) {
      TERN_ASSIGN_OR_RETURN(std::string text, read_text_file(gen_path));
      TERN_ASSIGN_OR_RETURN(le.generation_defaults, parse_generation_config(text, gen_path));
    }
  }
  const ModelConfig& cfg = le.model->config();
  const bool by_share = o.run.gpu_memory_utilization > 0;
  if (by_share && !o.kv_cache_memory.empty()) {
    return invalid_argument("give --kv-cache-memory or --gpu-memory-utilization, not both");
  }
  if (by_share && device != "cuda") {
    return invalid_argument("--gpu-memory-utilization sizes the KV cache on the GPU; on the CPU use --kv-cache-memory");
  }
  TERN_ASSIGN_OR_RETURN(KvCacheDType kv_dtype, parse_kv_cache_dtype(o.kv_cache_dtype));
  if (device == "cuda" && kv_dtype == KvCacheDType::kF32) {
    return invalid_argument("--kv-cache-dtype float32 is for the CPU; the CUDA cache holds bf16 (auto, bfloat16) or "
                            "fp8");
  }
  // The CPU's auto under the fast set: bf16 K/V (as HF's bf16 forward and
  // llama.cpp's f16 cache keep them), half the bytes of fp32 to write and read.
  // --device null plans the blocks this pool would hold.
  if ((device == "cpu" || device == "null") && kv_dtype == KvCacheDType::kAuto &&
      kernels == &cpu::fast_kernel_set()) {
    kv_dtype = KvCacheDType::kBf16;
  }
  // The KV cache's size, and how it was chosen (for the start-up log).
  int64_t kv_bytes = 0;
  if (by_share) {
    char share[32];
    std::snprintf(share, sizeof(share), "%g", o.run.gpu_memory_utilization);
    le.kv_sizing = std::string("--gpu-memory-utilization ") + share;
  } else if (!o.kv_cache_memory.empty()) {
    TERN_ASSIGN_OR_RETURN(kv_bytes, parse_bytes(o.kv_cache_memory));
    le.kv_sizing = "--kv-cache-memory " + o.kv_cache_memory;
  } else if (device == "cuda") {
    // Room for max_num_seqs whole sequences: vLLM takes 90% of the card,
    // which starves anything else on it; this takes what the limits need.
    const int64_t len = o.run.max_model_len > 0 ? o.run.max_model_len : std::min<int64_t>(cfg.max_position_embeddings, 2048);
    const int64_t per_token = cfg.num_layers * 2 * cfg.kv_dim() * kv_element_bytes(kv_dtype, 2);  // bf16 or fp8 K and V
    kv_bytes = o.run.max_num_seqs * (len + o.run.block_size) * per_token;
    le.kv_sizing = "default: " + std::to_string(o.run.max_num_seqs) + " sequences of " + std::to_string(len) +
                   " tokens, within the free GPU memory";
  } else {
    kv_bytes = int64_t{2} << 30;
    le.kv_sizing = "default: 2GiB";
  }
  RunnerOptions run = o.run;
  if (run.max_num_batched_tokens <= 0) run.max_num_batched_tokens = device == "cuda" ? kCudaStepTokens : kCpuStepTokens;
  le.max_num_batched_tokens = run.max_num_batched_tokens;
  run.kv_cache_bytes = kv_bytes;
  run.kv_cache_dtype = kv_dtype;
  run.kv_fit_to_free = device == "cuda" && o.kv_cache_memory.empty() && !by_share;
  TERN_RETURN_IF_ERROR(apply_quantization(*le.model, source.path, o.quantization, device, run));
  std::unique_ptr<Runner> runner;
  if (device == "cuda") {
    TERN_ASSIGN_OR_RETURN(runner, make_cuda_runner(*le.model, run));
  } else if (device == "null") {
    TERN_ASSIGN_OR_RETURN(runner, make_null_runner(*le.model, *le.tokenizer, run));
  } else {
    TERN_ASSIGN_OR_RETURN(runner, CpuRunner::create(*le.model, run));
    // Only this runner reads the model now: --quantization's rows in memory go where packed copies serve.
    if (const int64_t freed = le.model->drop_packed_sources(); freed > 0) {
      spdlog::info("--quantization: {:.1f} MiB of quantized rows freed (their packed copies serve the CPU kernels)",
                   static_cast<double>(freed) / (1 << 20));
    }
  }
  le.device = device;
  if (device == "cpu") {
    const cpu::CpuIsa isa = cpu::best_cpu_isa();
    le.cpu.threads = le.model->num_threads();
    le.cpu.kernels = kernels->name;
    le.cpu.isa = kernels == &cpu::reference_kernel_set() ? "none"
                 : isa == cpu::CpuIsa::kAvx512          ? "avx512"
                 : isa == cpu::CpuIsa::kAvx2            ? "avx2"
                                                        : "portable";
    le.cpu.bf16_products = kernels == &cpu::fast_kernel_set() && cpu::cpu_has_avx512_bf16();
  }

  int64_t cache_tokens = runner->num_kv_blocks() * runner->block_size();
  le.kv_cache_tokens = cache_tokens;
  le.kv_cache_blocks = runner->num_kv_blocks();
  le.kv_cache_dtype = kv_dtype == KvCacheDType::kFp8E4m3                           ? "fp8_e4m3"
                      : device == "cuda" || kv_dtype == KvCacheDType::kBf16 ? "bf16"
                                                                             : "fp32";
  int64_t max_len = o.run.max_model_len > 0 ? o.run.max_model_len : std::min(cfg.max_position_embeddings, cache_tokens);
  if (max_len > cfg.max_position_embeddings) {
    return invalid_argument("--max-model-len " + std::to_string(max_len) + " exceeds the model's " +
                            std::to_string(cfg.max_position_embeddings) + " positions");
  }
  if (max_len > cache_tokens) {
    return invalid_argument("--max-model-len " + std::to_string(max_len) + " needs more KV cache than the " +
                            std::to_string(cache_tokens) + " tokens it holds (" +
                            (o.kv_cache_memory.empty() ? std::string("default size") : "--kv-cache-memory " + o.kv_cache_memory) +
                            "); raise --kv-cache-memory" + (device == "cuda" ? " or --gpu-memory-utilization" : "") +
                            ", or lower --max-model-len");
  }
  le.max_model_len = max_len;

  EngineConfig config;
  config.scheduler.max_num_seqs = o.run.max_num_seqs;
  config.scheduler.max_num_batched_tokens = run.max_num_batched_tokens;
  if (o.decode_step_tokens > 0 && o.decode_step_tokens < run.max_num_batched_tokens) {
    spdlog::info("engine: steps of up to {} tokens; {} while the streams decoding outnumber the prompts waiting "
                 "or number more than {}",
                 run.max_num_batched_tokens, o.decode_step_tokens, o.long_step_max_streams);
  } else {
    spdlog::info("engine: steps of up to {} tokens", run.max_num_batched_tokens);
  }
  config.scheduler.decode_step_tokens = o.decode_step_tokens;
  config.scheduler.long_step_max_streams = o.long_step_max_streams;
  config.scheduler.enable_prefix_caching = o.enable_prefix_caching;
  config.overlap = o.async_scheduling;
  config.max_model_len = max_len;
  config.max_logprobs = o.max_logprobs;
  config.eos_ids = le.tokenizer->default_stop_ids();
  for (int32_t id : cfg.eos_token_ids)
    if (std::find(config.eos_ids.begin(), config.eos_ids.end(), id) == config.eos_ids.end()) config.eos_ids.push_back(id);
  for (int32_t id : le.generation_defaults.eos_token_ids)
    if (std::find(config.eos_ids.begin(), config.eos_ids.end(), id) == config.eos_ids.end()) config.eos_ids.push_back(id);
  config.speculative = with_device_default(speculative, device == "cuda");
  if (config.speculative.enabled()) {
    if (!runner->scores_prompts()) {
      return invalid_argument("speculative decoding checks its drafts against the logits of every row, which the " +
                              device + " runner does not return; run it with --device cpu or cuda");
    }
    spdlog::info("engine: speculative decoding by prompt lookup: up to {} drafts a step from earlier {}-{} token "
                 "matches, while at most {} sequences decode",
                 config.speculative.num_tokens, config.speculative.lookup_min, config.speculative.lookup_max,
                 config.speculative.max_seqs);
  }
  le.engine = std::make_unique<Engine>(std::move(runner), *le.tokenizer, config);
  le.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return le;
}

}  // namespace tern
