// tern_gpu_bench: throughput of cuda::DeviceModel alone (no engine, no host
// sampling). For each configuration (decode graphs, eager launches, cuBLAS
// for every size) and batch size B: B sequences prefill a P-token prompt
// (timed: prefill tok/s), then N decode steps of B tokens with the greedy
// picks taken on the GPU (contexts P..P+N), timed step by step on the host
// clock (each step waits for its results, as the engine does); with
// --spread 1 the sequences decode from contexts spread over P/8..P instead
// (sequence b from a position of its own, rewriting its prompt's later K/V),
// as a server's batch of prompts of many lengths does. Also the
// decode rate when every row's logits come to the host, and the GPU memory
// besides the KV pool. Ends with one table line per configuration and batch.
// Configurations: graphs (the default options), eager (enforce_eager),
// pdl (graphs with programmatic dependent launches), cublas (no GEMV),
// gemvN (the GEMV up to N tokens), notiles (prefill attention token by
// token, as before query tiles), nokernel (one-token steps on the GEMV
// path's kernels instead of the persistent decode kernel), norope (RoPE
// and the KV write in rope_store_kv: not in the decode attention, and q not
// rotated in the prefill tiles), regkv (the decode attention's K/V chunks
// loaded into registers in every step, never staged through shared memory),
// headrows (the decode attention's tensor-core form with the q heads as the
// MMA's rows, 16 whatever the group, instead of its columns), headcols
// (the heads as the MMA's columns in P V only, the scores with the heads as
// rows, instead of the default's scores transposed with the keys as rows:
// attention_scores_transposed off),
// kv-fp8 (graphs over an FP8 E4M3 KV cache, --kv-cache-dtype fp8; any
// configuration NAME+kv-fp8 is NAME over that cache, fp8-tc+kv-fp8 both FP8 options),
// prefetchD and kv-fp8-prefetchD (the decode attention's register form
// prefetching its chunks D = 0..9 chunks ahead into L2 instead of the
// default: none over a bf16 pool, 1 over an e4m3 one),
// fp8 (--quantization fp8: FP8 weights, large steps on the bf16 GEMM of
// dequantized weights), fp8-tc (FP8 tensor-core GEMMs where cuBLASLt
// offers them, the server's default; fp8-tcN: up to N tokens), fp8-nofold and fp8-nofoldN
// (fp8-tc, fp8-tcN with a quantization before and a scaling pass after each
// GEMM instead of both folded into the norm and SiLU kernels), fp8-fast
// (fp8-tc with the tensor cores' own accumulation, fp8_fast_accum), fp8-head
// and fp8-headN (fp8-tc with the LM head FP8 too, --quantize-lm-head; its
// GEMMs of up to 128 rows, the default, or N, fp8_lm_head_max_rows; larger
// ones on the bf16 head), head8 (graphs, bf16 layers, the LM head FP8 in
// the GEMV and its GEMMs of up to 128 rows: --quantize-lm-head alone),
// fp8-nokernel (FP8, no persistent kernel), int4 (the model
// quantized to Q4_0 on the host as --quantization q4_0 does: the layers as
// int4 weights, W4A16; steps past the GEMV's on the int4 tensor-core GEMM
// up to int4_gemm_max_tokens, larger ones on the bf16 GEMM of dequantized
// weights), int4-dequant (int4, every step past the GEMV's dequantized),
// int4-tcN (int4, the tensor-core GEMM up to N tokens), int4-nokernel
// (int4, no persistent kernel), ksplit, ksplitN and
// ksplit-oAdB (graphs with the o and down GEMMs split over K in steps of
// up to 512, the default, or N tokens, k_split_max_tokens; A and B slices,
// default 2 and 2), nosplit (graphs without that split), tokensN (graphs
// with prefill steps of up to N tokens, max_num_batched_tokens; 2,048 or
// the largest batch otherwise), sm90 and sm90-N (graphs with the layers'
// GEMMs of steps past 512 tokens, or of N tokens and more, on the sm_90 GEMM
// of our own with SiLU x up fused, sm90_gemm_min_tokens), sm90-gu (the same
// for gate|up alone, sm90_gemm_gate_up_only), fp8-sm90 (FP8
// folded at every GEMM size, as fp8-tc2048, each GEMM of steps past 512
// tokens on the sm_90 GEMM's e4m3 form with the scales in its epilogue). With
// TERN_PROFILE_STEP=k set, decode step k of each batch runs between
// cudaProfilerStart and Stop (for `ncu --profile-from-start off`); with
// TERN_PROFILE_PREFILL set, the first timed prefill step of each batch does.
// --chunks 2,3,4,5: at batch 1, after its decode, steps of that many tokens
// of the one sequence with every row's logits and argmax on the device (what
// a step that verifies drafts runs), timed as the decode steps are, beside
// the one-token step's time.
// Usage: tern_gpu_bench --model DIR [--batch 1,8,64,256] [--prompt 256] [--steps 256] [--spread 0|1]
//                       [--configs graphs,eager,pdl,cublas,gemv8,int4] [--chunks 2,3,4,5]
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comma_list.h"
#include "model/ernie4_5/cuda/device_model.h"
#include "model/ernie4_5/ernie4_5_model.h"
#include "runners/cuda_runner.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int fail(const tern::Status& s) {
  std::fprintf(stderr, "tern_gpu_bench: %s\n", s.to_string().c_str());
  return 1;
}

// The decode kernel's timeline (TERN_DECODE_TIMELINE): block 0's phase
// times, mean over layers; then per grid barrier (over layers): how far the
// blocks' arrivals spread (last minus median), how long after the last
// arrival the first block leaves (the barrier's own latency), block 0's
// wait, and which block arrives last most often; then per phase the work
// time (from leaving the previous barrier to arriving at the next) of the
// mean block and of the slowest.
void print_timeline(const std::string& config, const tern::cuda::DecodeKernelTimeline& tl) {
  constexpr int kMarks = tern::cuda::kDecodeLayersMarks;
  const char* names[kMarks] = {"A norm", "A wait", "A qkv",   "bar",   "B chunks", "B merge", "bar",
                               "C merge", "C wait", "C o",   "bar",   "D norm",  "D wait", "D gate|up",
                               "bar",    "E act",  "E wait", "E down", "bar"};
  const int layers = (tl.marks - 1) / kMarks;
  std::printf("[%s] decode kernel phases, block 0, mean over %d layers (us):", config.c_str(), layers);
  for (int k = 0; k < kMarks; ++k) {
    double sum = 0;
    for (int l = 0; l < layers; ++l) sum += tl.at(0, l * kMarks + k + 1) - tl.at(0, l * kMarks + k);
    std::printf(" %s %.2f;", names[k], sum / layers / 1e3);
  }
  double tick = 1e30;  // the clock's step: the smallest nonzero interval seen
  for (int b = 0; b < tl.blocks; ++b) {
    for (int m = 1; m < tl.marks; ++m) {
      const double d = tl.at(b, m) - tl.at(b, m - 1);
      if (d > 0) tick = std::min(tick, d);
    }
  }
  std::printf(" SM clock %.0f MHz; %d blocks; clock step %.0f ns\n", tl.sm_mhz, tl.blocks, tick);
  const int bars[] = {3, 6, 10, 14, 18};
  const char* after[] = {"A (q|k|v)", "B (attention)", "C (merge, o)", "D (gate|up)", "E (down)"};
  int previous_leave = 0;  // mark at which the phase before each barrier starts (k + 1 of the last barrier)
  for (int i = 0; i < 5; ++i) {
    const int k = bars[i];
    const int n = k == 18 ? layers - 1 : layers;  // the last layer has no barrier after E
    double spread = 0, release = 0, wait0 = 0, work_mean = 0, work_max = 0;
    std::vector<int> last_count(static_cast<size_t>(tl.blocks), 0), slow_count(static_cast<size_t>(tl.blocks), 0);
    for (int l = 0; l < n; ++l) {
      std::vector<double> arrive(static_cast<size_t>(tl.blocks));
      double leave_first = 1e30, worst = -1;
      int last = 0, slow = 0;
      for (int b = 0; b < tl.blocks; ++b) {
        arrive[static_cast<size_t>(b)] = tl.at(b, l * kMarks + k);
        if (arrive[static_cast<size_t>(b)] > arrive[static_cast<size_t>(last)]) last = b;
        leave_first = std::min(leave_first, tl.at(b, l * kMarks + k + 1));
        const double work = tl.at(b, l * kMarks + k) - tl.at(b, l * kMarks + previous_leave);
        work_mean += work / tl.blocks;
        if (work > worst) {
          worst = work;
          slow = b;
        }
      }
      work_max += worst;
      std::vector<double> sorted = arrive;
      std::sort(sorted.begin(), sorted.end());
      spread += sorted.back() - sorted[sorted.size() / 2];
      release += leave_first - sorted.back();
      wait0 += tl.at(0, l * kMarks + k + 1) - tl.at(0, l * kMarks + k);
      ++last_count[static_cast<size_t>(last)];
      ++slow_count[static_cast<size_t>(slow)];
    }
    const auto most = [](const std::vector<int>& c) {
      return static_cast<int>(std::max_element(c.begin(), c.end()) - c.begin());
    };
    const int last_b = most(last_count), slow_b = most(slow_count);
    std::printf("[%s]   barrier after %-13s (us, mean over %d layers): arrivals' spread %.2f, release %.2f, "
                "block 0 waits %.2f; last to arrive most often block %d (%d times); phase work mean block %.2f, "
                "slowest %.2f (most often block %d, %d times)\n",
                config.c_str(), after[i], n, spread / n / 1e3, release / n / 1e3, wait0 / n / 1e3, last_b,
                last_count[static_cast<size_t>(last_b)], work_mean / n / 1e3, work_max / n / 1e3, slow_b,
                slow_count[static_cast<size_t>(slow_b)]);
    previous_leave = k + 1;
  }
}

struct Row {
  std::string config;
  int64_t batch = 0;
  double prefill_tok_s = 0, decode_ms = 0, decode_tok_s = 0, host_logits_tok_s = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, configs_arg = "graphs,eager,cublas";
  std::vector<int64_t> batches = {1, 8, 64, 256};
  int64_t prompt = 256, steps = 256;
  bool spread = false;
  std::vector<int64_t> chunks;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--model") {
      model_dir = value;
    } else if (flag == "--batch") {
      batches.clear();
      for (const std::string& b : tern::bench::comma_list(value)) batches.push_back(std::stoll(b));
    } else if (flag == "--prompt") {
      prompt = std::stoll(value);
    } else if (flag == "--steps") {
      steps = std::stoll(value);
    } else if (flag == "--spread") {
      if (value != "0" && value != "1") {
        std::fprintf(stderr, "tern_gpu_bench: --spread %s: 0 or 1\n", value.c_str());
        return 2;
      }
      spread = value == "1";
    } else if (flag == "--configs") {
      configs_arg = value;
    } else if (flag == "--chunks") {
      for (const std::string& n : tern::bench::comma_list(value)) chunks.push_back(std::stoll(n));
    }
  }
  if (model_dir.empty() || batches.empty()) {
    std::fprintf(stderr, "usage: tern_gpu_bench --model DIR [--batch 1,8,64,256] [--prompt 256] [--steps 256] "
                         "[--spread 0|1] [--configs graphs,eager,cublas] [--chunks 2,3,4,5]\n");
    return 2;
  }
  for (const int64_t n : chunks) {
    if (n < 2 || n >= steps) {
      std::fprintf(stderr, "tern_gpu_bench: --chunks %ld: from 2 to fewer than --steps tokens\n", static_cast<long>(n));
      return 2;
    }
  }
  if (steps < 8) {
    std::fprintf(stderr, "tern_gpu_bench: --steps %ld: at least 8 decode steps are timed\n", static_cast<long>(steps));
    return 2;
  }
  // NAME+kv-fp8: configuration NAME over an FP8 E4M3 KV cache.
  const auto base_of = [](const std::string& config) {
    const std::string suffix = "+kv-fp8";
    const bool kv = config.size() > suffix.size() && config.compare(config.size() - suffix.size(), suffix.size(), suffix) == 0;
    return kv ? config.substr(0, config.size() - suffix.size()) : config;
  };
  // The configurations the header lists; a name outside them is refused rather than run as graphs.
  const auto known = [](const std::string& config) {
    static const char* const kNames[] = {"graphs", "eager",  "cublas",       "cublas-eager", "pdl",
                                         "notiles", "norope", "regkv",        "kv-fp8",       "nokernel",
                                         "headrows", "headcols",
                                         "fp8",     "fp8-tc", "fp8-nokernel", "int4",         "int4-nokernel", "int4-dequant",
                                         "fp8-nofold", "fp8-fast",     "ksplit",       "fp8-head",     "nosplit",      "head8",
                                         "sm90", "sm90-gu", "fp8-sm90"};
    for (const char* name : kNames) {
      if (config == name) return true;
    }
    // prefix then 1 to `most` digits.
    const auto digits_after = [&](const std::string& prefix, size_t most = 9) {
      return config.size() > prefix.size() && config.size() <= prefix.size() + most && config.rfind(prefix, 0) == 0 &&
             config.find_first_not_of("0123456789", prefix.size()) == std::string::npos;
    };
    const bool slices = config.size() == 11 && config.rfind("ksplit-o", 0) == 0 && config[9] == 'd' &&
                        std::isdigit(static_cast<unsigned char>(config[8])) != 0 &&
                        std::isdigit(static_cast<unsigned char>(config[10])) != 0;  // ksplit-oAdB
    return slices || digits_after("ksplit") || digits_after("gemv") || digits_after("tokens") ||
           digits_after("fp8-tc") || digits_after("fp8-nofold") || digits_after("fp8-head") ||
           digits_after("prefetch", 1) || digits_after("sm90-") || digits_after("int4-tc") ||
           digits_after("kv-fp8-prefetch", 1);
  };
  for (const std::string& config : tern::bench::comma_list(configs_arg)) {  // before any work
    if (!known(base_of(config))) {
      std::fprintf(stderr, "tern_gpu_bench: --configs: unknown configuration '%s' (the header lists them)\n",
                   config.c_str());
      return 2;
    }
    if (config.rfind("tokens", 0) == 0 && std::atoll(config.c_str() + 6) < prompt) {
      std::fprintf(stderr, "tern_gpu_bench: %s: tokensN takes a token count of at least --prompt (%ld)\n",
                   config.c_str(), static_cast<long>(prompt));
      return 2;
    }
  }
  const auto t_load = Clock::now();
  auto model = tern::Ernie45Model::load(model_dir, 4);
  if (!model.is_ok()) return fail(model.status());
  const tern::ModelConfig& c = model.value()->config();
  std::printf("model %s: host load %.2f s\n", model_dir.c_str(), seconds_since(t_load));
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
  const int64_t bs = 16, per_seq = (prompt + steps + bs - 1) / bs + 1;
  const auto V = static_cast<size_t>(c.vocab_size);
  const char* profile_env = std::getenv("TERN_PROFILE_STEP");
  const int64_t profile_step = profile_env != nullptr ? std::atoll(profile_env) : -1;
  const bool profile_prefill = std::getenv("TERN_PROFILE_PREFILL") != nullptr;

  std::unique_ptr<tern::Ernie45Model> q4_0;  // the int4 configurations' model, made when first asked for
  std::vector<Row> table;
  for (const std::string& config : tern::bench::comma_list(configs_arg)) {
    const std::string base = base_of(config);  // what the options below are read from
    const bool int4 = base.rfind("int4", 0) == 0;
    if (int4 && q4_0 == nullptr) {
      const auto t_quant = Clock::now();
      auto m = tern::Ernie45Model::load(model_dir, 4);
      if (!m.is_ok()) return fail(m.status());
      q4_0 = std::move(m).value();
      if (tern::Status s = q4_0->quantize(tern::QuantMix::kQ4_0); !s.is_ok()) return fail(s);
      std::printf("[%s] load and Q4_0 quantization on the host %.2f s\n", config.c_str(), seconds_since(t_quant));
    }
    const tern::Ernie45Model& weights = int4 ? *q4_0 : *model.value();
    tern::cuda::DeviceModelOptions o;
    o.block_size = bs;
    o.max_num_batched_tokens = std::max<int64_t>(2048, max_batch);
    if (base.rfind("tokens", 0) == 0) {  // tokens8192: prefill steps of up to 8,192 tokens
      o.max_num_batched_tokens = std::max<int64_t>(std::atoll(base.c_str() + 6), max_batch);
    }
    o.max_num_seqs = std::max<int64_t>(max_batch, 1);
    o.max_model_len = prompt + steps;
    if (base.rfind("kv-fp8", 0) == 0 || base != config) o.kv_cache_dtype = tern::KvCacheDType::kFp8E4m3;
    o.kv_cache_bytes =
        max_batch * per_seq * c.num_layers * 2 * bs * c.kv_dim() * tern::kv_element_bytes(o.kv_cache_dtype, 2);
    o.enforce_eager = base == "eager" || base == "cublas-eager";
    if (base == "cublas" || base == "cublas-eager") o.gemv_max_tokens = 0;
    if (base.rfind("gemv", 0) == 0) o.gemv_max_tokens = std::stoll(base.substr(4));  // gemv8: up to 8 tokens
    if (base == "pdl") o.pdl = true;
    if (base == "notiles") o.prefill_tiles = false;
    if (base == "norope") o.rope_in_attention = false;  // RoPE and the KV write in rope_store_kv
    if (base == "regkv") o.attention_stage_kv = false;  // decode attention's K/V into registers
    if (base == "headrows") o.attention_heads_as_columns = false;
    if (base == "headcols") o.attention_scores_transposed = false;
    if (base.rfind("prefetch", 0) == 0 || base.rfind("kv-fp8-prefetch", 0) == 0) {
      o.attention_prefetch_chunks = base.back() - '0';  // one digit (known() checked)
    }
    if (base == "nokernel" || base == "fp8-nokernel" || base == "int4-nokernel") o.decode_kernel = false;  // one-token steps on the GEMV path
    if (base == "nosplit") o.k_split_max_tokens = 0;
    if (base == "int4-dequant") o.int4_gemm_max_tokens = 0;
    if (base.rfind("int4-tc", 0) == 0) o.int4_gemm_max_tokens = std::stoll(base.substr(7));
    if (base == "sm90" || base == "sm90-gu") o.sm90_gemm_min_tokens = 513;  // past the K-split's sizes: prefill
    o.sm90_gemm_gate_up_only = base == "sm90-gu";
    if (base == "fp8-sm90") {  // FP8 folded at every step size past the GEMV's, prefill steps on the e4m3 form
      o.sm90_gemm_min_tokens = 513;
      o.fp8_tensor_core_max_tokens = o.max_num_batched_tokens;
    }
    if (base.rfind("sm90-", 0) == 0 && base != "sm90-gu") o.sm90_gemm_min_tokens = std::stoll(base.substr(5));
    if (base.rfind("ksplit", 0) == 0) {  // ksplit, ksplitN (up to N tokens), ksplit-oAdB (A and B slices)
      const bool digits = base.size() > 6 && std::isdigit(static_cast<unsigned char>(base[6])) != 0;
      o.k_split_max_tokens = digits ? std::stoll(base.substr(6)) : 512;
      if (base.rfind("ksplit-o", 0) == 0) {
        o.o_k_splits = base[8] - '0';
        o.down_k_splits = base[10] - '0';
      }
    }
    if (base.rfind("fp8", 0) == 0) o.fp8_weights = true;
    // fp8 and fp8-nokernel: the dequantized form; fp8-tc: tensor cores up to the default token count,
    // fp8-tcN up to N tokens.
    const bool nofold = base.rfind("fp8-nofold", 0) == 0;
    o.fp8_fast_accum = base == "fp8-fast";
    o.fp8_lm_head = base.rfind("fp8-head", 0) == 0 || base == "head8";
    if (base.size() > 8 && o.fp8_lm_head) o.fp8_lm_head_max_rows = std::stoll(base.substr(8));
    o.fp8_tensor_cores = base.rfind("fp8-tc", 0) == 0 || nofold || o.fp8_fast_accum || o.fp8_lm_head ||
                         base == "fp8-sm90";
    o.fp8_fold_scales = !nofold;
    if (base.size() > 6 && base.rfind("fp8-tc", 0) == 0) o.fp8_tensor_core_max_tokens = std::stoll(base.substr(6));
    if (base.size() > 10 && nofold) o.fp8_tensor_core_max_tokens = std::stoll(base.substr(10));
    size_t free0 = 0, free1 = 0, total = 0;
    cudaSetDevice(0);
    cudaFree(nullptr);  // the context first, so it is not counted below
    cudaMemGetInfo(&free0, &total);
    const auto t_create = Clock::now();
    auto gpu = tern::cuda::DeviceModel::create(c, tern::cuda_host_weights(weights), o);
    if (!gpu.is_ok()) {
      std::printf("[%s] create failed: %s\n", config.c_str(), gpu.status().to_string().c_str());
      continue;
    }
    if (!gpu.value()->pdl_off_reason().empty()) {
      std::printf("[%s] pdl turned off: %s\n", config.c_str(), gpu.value()->pdl_off_reason().c_str());
    }
    if (gpu.value()->fp8_weights()) {
      std::printf("[%s] FP8 weights; large steps on %s%s%s\n", config.c_str(),
                  gpu.value()->fp8_tensor_core_gemms() ? "FP8 tensor-core GEMMs (cuBLASLt, per-token activation scales)"
                                                       : "bf16 GEMMs of dequantized weights",
                  gpu.value()->fp8_folded_scales() ? ", the scales folded into the norms and SiLU" : "",
                  o.fp8_fast_accum ? ", the tensor cores' own accumulation" : "");
    }
    if (gpu.value()->fp8_lm_head()) {
      std::printf("[%s] the LM head FP8 too (GEMMs up to %lld rows)\n", config.c_str(),
                  static_cast<long long>(gpu.value()->fp8_lm_head_gemm_rows()));
    }
    if (!gpu.value()->fp8_lm_head_note().empty()) {
      std::printf("[%s] %s\n", config.c_str(), gpu.value()->fp8_lm_head_note().c_str());
    }
    if (gpu.value()->int4_matrices() > 0) {
      const int64_t tc_rows = gpu.value()->int4_gemm_rows();
      std::printf("[%s] int4 weights (W4A16) in %lld layer matrices; %s bf16 GEMMs of dequantized weights\n",
                  config.c_str(), static_cast<long long>(gpu.value()->int4_matrices()),
                  tc_rows > 0 ? ("GEMMs of up to " + std::to_string(tc_rows) +
                                 " rows on the int4 tensor-core GEMM, larger ones on").c_str()
                              : "steps past the GEMV's on");
    }
    if (!gpu.value()->int4_declined().empty()) {
      std::printf("[%s] %s\n", config.c_str(), gpu.value()->int4_declined().c_str());
    }
    if (o.sm90_gemm_min_tokens > 0) {
      std::printf("[%s] %s\n", config.c_str(),
                  gpu.value()->sm90_gemm_rows() > 0
                      ? ("layer GEMMs of " + std::to_string(gpu.value()->sm90_gemm_rows()) +
                         " rows and more on the sm_90 GEMM, SiLU x up in gate|up's epilogue").c_str()
                      : "the sm_90 GEMM is not available here (no sm_90a kernels, or not an sm_90 GPU)");
    }
    if (gpu.value()->k_split_rows() > 0) {
      std::printf("[%s] o and down split over K (%d and %d slices) in steps of up to %lld GEMM rows\n",
                  config.c_str(), gpu.value()->o_k_splits(), gpu.value()->down_k_splits(),
                  static_cast<long long>(gpu.value()->k_split_rows()));
    }
    if (!gpu.value()->layers_kernel_off_reason().empty()) {
      std::printf("[%s] decode kernel off: %s\n", config.c_str(), gpu.value()->layers_kernel_off_reason().c_str());
    }
    const double create_s = seconds_since(t_create);
    cudaMemGetInfo(&free1, &total);
    const tern::cuda::DeviceMemoryUse mem = gpu.value()->memory_use();
    const double used = static_cast<double>(free0 - free1);
    std::printf("[%s] create %.2f s (upload, workspace, %zu graphs, pdl %d, decode kernel %d); GPU memory: "
                "weights %.0f MiB, workspace %.0f MiB, graphs %.1f MiB, KV pool %.0f MiB; all but the KV pool (cudaMemGetInfo) %.0f MiB\n",
                config.c_str(), create_s, gpu.value()->graph_batch_sizes().size(),
                gpu.value()->programmatic_launches() ? 1 : 0, gpu.value()->layers_kernel() ? 1 : 0,
                mem.weight_bytes / 1048576.0,
                mem.workspace_bytes / 1048576.0, mem.graph_bytes / 1048576.0, mem.kv_pool_bytes / 1048576.0,
                (used - static_cast<double>(mem.kv_pool_bytes)) / 1048576.0);

    std::mt19937 rng(1);
    std::uniform_int_distribution<int32_t> tok(3, static_cast<int32_t>(c.vocab_size - 1));
    for (const int64_t B : batches) {
      std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(B)), tables(static_cast<size_t>(B));
      for (int64_t b = 0; b < B; ++b) {
        tokens[static_cast<size_t>(b)].resize(static_cast<size_t>(prompt + steps));
        for (auto& t : tokens[static_cast<size_t>(b)]) t = tok(rng);
        for (int64_t k = 0; k < per_seq; ++k) tables[static_cast<size_t>(b)].push_back(static_cast<int32_t>(b * per_seq + k));
      }
      // Each sequence's first decode position: the prompt's end, or (--spread) one of B spread over
      // P/8..P in an order that puts long and short contexts side by side.
      std::vector<int64_t> start(static_cast<size_t>(B), prompt);
      if (spread) {
        for (int64_t b = 0; b < B; ++b) {
          const int64_t rank = (b * 7919) % B, lo = std::max<int64_t>(prompt / 8, 1);
          start[static_cast<size_t>(b)] = lo + (prompt - lo) * rank / std::max<int64_t>(B - 1, 1);
        }
      }
      std::vector<int32_t> picks;
      std::vector<float> logits;
      std::vector<uint8_t> greedy;
      auto step = [&](const std::vector<tern::SequenceChunk>& batch, bool on_device) {
        greedy.assign(batch.size(), on_device ? 1 : 0);
        picks.resize(batch.size());
        logits.resize(on_device ? 0 : batch.size() * V);
        return gpu.value()->forward_step(batch, greedy, picks, logits);
      };
      // Prefill, as many prompts per step as the token budget allows; twice,
      // timing the second (the first loads kernels and picks GEMM algorithms).
      double prefill_s = 0;
      for (int rep = 0; rep < 2; ++rep) {
        prefill_s = 0;
        for (int64_t first = 0; first < B;) {
          std::vector<tern::SequenceChunk> batch;
          int64_t used_tokens = 0;
          for (; first < B && used_tokens + prompt <= o.max_num_batched_tokens; ++first, used_tokens += prompt) {
            const auto& seq = tokens[static_cast<size_t>(first)];
            batch.push_back({std::span<const int32_t>(seq).first(static_cast<size_t>(prompt)), 0,
                             tables[static_cast<size_t>(first)], true});
          }
          const bool profiled = profile_prefill && rep == 1 && prefill_s == 0;
          if (profiled) cudaProfilerStart();
          const auto t = Clock::now();
          tern::Status s = step(batch, true);
          if (!s.is_ok()) return fail(s);
          prefill_s += seconds_since(t);
          if (profiled) cudaProfilerStop();
        }
      }
      // Decode: all steps with device picks, then a few with every row's logits to the host
      // (the context keeps growing; the last host steps rewrite positions already decoded).
      double decode_s = 0, host_s = 0;
      int64_t timed = 0, host_timed = 0;
      const int64_t host_steps = std::min<int64_t>(16, steps);
      for (int64_t i = 0; i < steps + host_steps; ++i) {
        const bool on_device = i < steps;
        const int64_t at = on_device ? i : steps - host_steps + (i - steps);
        std::vector<tern::SequenceChunk> batch;
        for (int64_t b = 0; b < B; ++b) {
          const int64_t pos = start[static_cast<size_t>(b)] + at;
          batch.push_back({std::span<const int32_t>(tokens[static_cast<size_t>(b)]).subspan(static_cast<size_t>(pos), 1),
                           pos, tables[static_cast<size_t>(b)], true});
        }
        if (i == profile_step) cudaProfilerStart();
        const auto t = Clock::now();
        tern::Status s = step(batch, on_device);
        if (!s.is_ok()) return fail(s);
        const double dt = seconds_since(t);
        if (i == profile_step) cudaProfilerStop();
        if (on_device && i >= 4) {  // the first steps warm up
          decode_s += dt;
          ++timed;
        } else if (!on_device && i >= steps + 2) {
          host_s += dt;
          ++host_timed;
        }
      }
      if (const tern::cuda::DecodeKernelTimeline tl = gpu.value()->decode_kernel_timeline(); tl.blocks > 0 && B == 1) {
        print_timeline(config, tl);
      }
      if (B == 1) {
        for (const int64_t n : chunks) {  // one sequence's steps of n tokens, every row argmaxed on the device
          double chunk_s = 0;
          int64_t chunk_timed = 0;
          const int64_t reps = std::min<int64_t>(steps, 64);
          for (int64_t i = 0; i < reps; ++i) {
            const int64_t pos = start[0] + (i * n) % (steps - n);
            tern::SequenceChunk ch{std::span<const int32_t>(tokens[0]).subspan(static_cast<size_t>(pos),
                                                                               static_cast<size_t>(n)),
                                   pos, tables[0], true};
            ch.all_logits = true;
            greedy.assign(static_cast<size_t>(n), 1);
            picks.resize(static_cast<size_t>(n));
            logits.clear();
            const auto t = Clock::now();
            tern::Status s = gpu.value()->forward_step({&ch, 1}, greedy, picks, logits);
            if (!s.is_ok()) return fail(s);
            if (i >= 4) {
              chunk_s += seconds_since(t);
              ++chunk_timed;
            }
          }
          const double ms = chunk_s / static_cast<double>(chunk_timed) * 1e3;
          std::printf("[%s] one sequence, steps of %ld tokens (every row's argmax): %.3f ms/step, %.2fx a one-token "
                      "step (%.3f ms), %s\n",
                      config.c_str(), static_cast<long>(n), ms, ms / (decode_s / static_cast<double>(timed) * 1e3),
                      decode_s / static_cast<double>(timed) * 1e3,
                      gpu.value()->last_step_used_layers_kernel() ? "the persistent kernel" : "per-layer kernels");
          const tern::cuda::DecodeKernelTimeline tl = gpu.value()->decode_kernel_timeline();
          if (tl.blocks > 0 && gpu.value()->last_step_used_layers_kernel()) {
            print_timeline(config + " chunk " + std::to_string(n), tl);
          }
          std::fflush(stdout);
        }
      }
      Row r;
      r.config = config;
      r.batch = B;
      r.prefill_tok_s = static_cast<double>(B * prompt) / prefill_s;
      r.decode_ms = decode_s / static_cast<double>(timed) * 1e3;
      r.decode_tok_s = static_cast<double>(B * timed) / decode_s;
      r.host_logits_tok_s = host_timed > 0 ? static_cast<double>(B * host_timed) / host_s : 0;
      std::printf("[%s] batch %3ld: prefill %ld x %ld tokens %.2f ms (%.0f tok/s); decode %.0f tok/s (%.3f ms/step) "
                  "with device picks, %.0f tok/s with all logits to the host\n",
                  config.c_str(), static_cast<long>(B), static_cast<long>(B), static_cast<long>(prompt),
                  prefill_s * 1e3, r.prefill_tok_s, r.decode_tok_s, r.decode_ms, r.host_logits_tok_s);
      std::fflush(stdout);
      table.push_back(r);
    }
  }
  std::printf("\n| config | batch | decode tok/s | ms/step | logits-to-host tok/s | prefill tok/s (%ld-token prompts) |\n"
              "|---|---|---|---|---|---|\n",
              static_cast<long>(prompt));
  for (const Row& r : table) {
    std::printf("| %s | %ld | %.0f | %.3f | %.0f | %.0f |\n", r.config.c_str(), static_cast<long>(r.batch),
                r.decode_tok_s, r.decode_ms, r.host_logits_tok_s, r.prefill_tok_s);
  }
  return 0;
}
