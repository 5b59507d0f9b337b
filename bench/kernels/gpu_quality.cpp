// tern_gpu_quality: how far the GPU's FP8 forms move a model from the GPU's
// own bf16 form, measured on the GPU kernels themselves (tern_fp8_quality
// measures the same on the CPU reference, which has no tensor-core GEMM and
// no fast accumulation). Every configuration runs every step on the GEMM
// path (no GEMV, no persistent one-token kernel), so with FP8 weights every
// layer matrix goes through the FP8 tensor-core GEMMs (W8A8) that large
// serving steps take. For each prompt (the model's golden.json, or
// --random N prompts of 64-256 random token ids): the bf16 form's greedy
// continuation of --tokens tokens, then over prompt + continuation in one
// chunk, at every position, KL(bf16 || form) of the next-token
// distributions (nats) and whether the most likely tokens agree (top-1);
// and greedy agreement: the share of the form's own greedy tokens produced
// before its first difference from bf16's.
// Configurations: fp8 (--quantization fp8), fp8-fast (with the tensor
// cores' own accumulation, DeviceModelOptions::fp8_fast_accum), fp8-head
// (fp8 with the LM head FP8 too, --quantize-lm-head), head8 (bf16 layers,
// the LM head FP8: --quantize-lm-head alone), kv-fp8 (--kv-cache-dtype
// fp8), and any of the others with "+kv-fp8".
// Usage: tern_gpu_quality --model DIR [--tokens 20] [--random N]
//                         [--configs fp8,fp8-fast,kv-fp8,fp8+kv-fp8]
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "comma_list.h"
#include "model/ernie4_5/cuda/device_model.h"
#include "model/ernie4_5/ernie4_5_model.h"
#include "next_token_stats.h"
#include "runners/cuda_runner.h"

namespace {

constexpr int64_t kBlockSize = 16;

int fail(const std::string& message) {
  std::fprintf(stderr, "tern_gpu_quality: %s\n", message.c_str());
  return 1;
}

using tern::bench::argmax;

// One GPU form of the model with a block table covering max_len positions.
struct Form {
  std::string name;
  std::unique_ptr<tern::cuda::DeviceModel> gpu;
  std::vector<int32_t> table;
  size_t vocab = 0;

  // Greedy tokens after `prompt`: the prompt in one chunk, then one token a step.
  tern::Result<std::vector<int32_t>> greedy(const std::vector<int32_t>& prompt, int tokens) {
    std::vector<float> logits(vocab);
    std::vector<int32_t> out;
    tern::SequenceChunk chunk{prompt, 0, table, true};
    if (tern::Status s = gpu->forward_batch({&chunk, 1}, logits); !s.is_ok()) return s;
    for (int i = 0; i < tokens; ++i) {
      out.push_back(argmax(logits.data(), vocab));
      if (i + 1 == tokens) break;
      tern::SequenceChunk next{{&out.back(), 1}, static_cast<int64_t>(prompt.size()) + i, table, true};
      if (tern::Status s = gpu->forward_batch({&next, 1}, logits); !s.is_ok()) return s;
    }
    return out;
  }

  // Every position's logits of `ids`, in one chunk.
  tern::Result<std::vector<float>> all_logits(const std::vector<int32_t>& ids) {
    std::vector<float> logits(ids.size() * vocab);
    tern::SequenceChunk chunk{ids, 0, table, true, true};
    if (tern::Status s = gpu->forward_batch({&chunk, 1}, logits); !s.is_ok()) return s;
    return logits;
  }
};

tern::Result<Form> make_form(const std::string& name, const tern::Ernie45Model& model, int64_t max_len) {
  std::string base = name;
  const bool kv_fp8 = base == "kv-fp8" || (base.size() > 7 && base.substr(base.size() - 7) == "+kv-fp8");
  if (base != "kv-fp8" && kv_fp8) base.resize(base.size() - 7);
  if (base != "bf16" && base != "kv-fp8" && base != "fp8" && base != "fp8-fast" && base != "fp8-head" &&
      base != "head8") {
    return tern::invalid_argument("--configs: unknown configuration '" + name +
                                  "' (bf16, fp8, fp8-fast, fp8-head, head8, kv-fp8, and the FP8 ones with +kv-fp8)");
  }
  const tern::ModelConfig& c = model.config();
  const int64_t blocks = (max_len + kBlockSize - 1) / kBlockSize;
  tern::cuda::DeviceModelOptions o;
  o.block_size = kBlockSize;
  o.kv_cache_dtype = kv_fp8 ? tern::KvCacheDType::kFp8E4m3 : tern::KvCacheDType::kAuto;
  o.kv_cache_bytes = blocks * c.num_layers * 2 * kBlockSize * c.kv_dim() * tern::kv_element_bytes(o.kv_cache_dtype, 2);
  o.max_num_batched_tokens = std::max<int64_t>(max_len, 256);
  o.max_num_seqs = 1;
  o.max_model_len = max_len;
  o.gemv_max_tokens = 0;    // every step on the GEMMs ...
  o.decode_kernel = false;  // ... including one-token steps
  o.enforce_eager = true;
  o.fp8_weights = base == "fp8" || base == "fp8-fast" || base == "fp8-head";
  o.fp8_fast_accum = base == "fp8-fast";
  o.fp8_lm_head = base == "fp8-head" || base == "head8";
  o.fp8_lm_head_max_rows = int64_t{1} << 30;  // every head GEMM here on the FP8 head
  auto gpu = tern::cuda::DeviceModel::create(c, tern::cuda_host_weights(model), o);
  if (!gpu.is_ok()) return gpu.status();
  if (o.fp8_weights && !gpu.value()->fp8_tensor_core_gemms()) {
    return tern::unsupported(name + ": no FP8 tensor-core GEMM from cuBLASLt on this GPU");
  }
  if (o.fp8_lm_head && !gpu.value()->fp8_lm_head_note().empty()) {  // every step here is a GEMM
    return tern::unsupported(name + ": " + gpu.value()->fp8_lm_head_note());
  }
  Form f;
  f.name = name;
  f.gpu = std::move(gpu).value();
  f.table.resize(static_cast<size_t>(blocks));
  std::iota(f.table.begin(), f.table.end(), 0);
  f.vocab = static_cast<size_t>(c.vocab_size);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, configs = "fp8,fp8-fast,kv-fp8,fp8+kv-fp8";
  int tokens = 20, random_prompts = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return fail("usage: tern_gpu_quality --model DIR [--tokens 20] [--random N] [--configs LIST]");
    const std::string value = argv[++i];
    if (flag == "--model") dir = value;
    else if (flag == "--tokens") tokens = std::max(1, std::atoi(value.c_str()));
    else if (flag == "--random") random_prompts = std::max(0, std::atoi(value.c_str()));
    else if (flag == "--configs") configs = value;
    else return fail("unknown flag " + flag + " (--model, --tokens, --random, --configs)");
  }
  if (dir.empty()) return fail("usage: tern_gpu_quality --model DIR [--tokens 20] [--random N] [--configs LIST]");
  auto model = tern::Ernie45Model::load(dir, 4);
  if (!model.is_ok()) return fail(model.status().to_string());
  const tern::ModelConfig& c = model.value()->config();

  std::vector<std::vector<int32_t>> prompts;
  if (random_prompts > 0) {
    std::mt19937 rng(1);
    std::uniform_int_distribution<int> len(64, 256);
    std::uniform_int_distribution<int32_t> tok(c.vocab_size > 4000 ? 1000 : 16, static_cast<int32_t>(c.vocab_size - 1));
    for (int p = 0; p < random_prompts; ++p) {
      std::vector<int32_t> ids(static_cast<size_t>(len(rng)));
      for (int32_t& t : ids) t = tok(rng);
      prompts.push_back(std::move(ids));
    }
  } else {
    std::ifstream in(dir + "/golden.json");
    const nlohmann::json golden = nlohmann::json::parse(in, nullptr, false);
    if (golden.is_discarded() || !golden.contains("prompts")) {
      return fail(dir + "/golden.json has no prompts (--random N scores random prompts instead)");
    }
    for (const auto& p : golden["prompts"]) prompts.push_back(p["ids"].get<std::vector<int32_t>>());
  }
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const int64_t max_len = static_cast<int64_t>(longest) + tokens + 1;

  auto base = make_form("bf16", *model.value(), max_len);
  if (!base.is_ok()) return fail(base.status().to_string());
  std::vector<std::vector<int32_t>> conts, scored;
  std::vector<std::vector<float>> base_logits;
  for (const auto& p : prompts) {
    auto cont = base.value().greedy(p, tokens);
    if (!cont.is_ok()) return fail(cont.status().to_string());
    std::vector<int32_t> ids = p;
    ids.insert(ids.end(), cont.value().begin(), cont.value().end() - 1);  // the last token's next is not scored
    auto logits = base.value().all_logits(ids);
    if (!logits.is_ok()) return fail(logits.status().to_string());
    conts.push_back(std::move(cont).value());
    scored.push_back(std::move(ids));
    base_logits.push_back(std::move(logits).value());
  }
  base.value().gpu.reset();

  std::printf("%s: %zu %s prompts, %d greedy tokens each; every step on the GEMM path\n\n", dir.c_str(),
              prompts.size(), random_prompts > 0 ? "random" : "golden", tokens);
  std::printf("| form | positions | mean KL(bf16 || form) nats | top-1 | greedy |\n|---|---:|---:|---:|---:|\n");
  const size_t V = static_cast<size_t>(c.vocab_size);
  bool failed = false;
  for (const std::string& name : tern::bench::comma_list(configs)) {
    auto form = make_form(name, *model.value(), max_len);
    if (!form.is_ok()) {  // a form this GPU or model does not take: its row says why, the others still run
      std::printf("| %s | - | %s | | |\n", name.c_str(), form.status().to_string().c_str());
      failed = true;
      continue;
    }
    tern::bench::NextTokenStats stats;
    double greedy_sum = 0;
    for (size_t p = 0; p < prompts.size(); ++p) {
      auto cont = form.value().greedy(prompts[p], tokens);
      auto logits = form.value().all_logits(scored[p]);
      if (!cont.is_ok() || !logits.is_ok()) {
        return fail((cont.is_ok() ? logits.status() : cont.status()).to_string());
      }
      size_t agree = 0;
      while (agree < conts[p].size() && conts[p][agree] == cont.value()[agree]) ++agree;
      greedy_sum += static_cast<double>(agree) / static_cast<double>(tokens);
      stats.add(base_logits[p].data(), logits.value().data(), scored[p].size(), V);
    }
    std::printf("| %s | %lld | %.5f | %.3f | %.3f |\n", name.c_str(), static_cast<long long>(stats.positions),
                stats.mean_kl(), stats.top1(), greedy_sum / static_cast<double>(prompts.size()));
    std::fflush(stdout);
  }
  return failed ? 1 : 0;
}
