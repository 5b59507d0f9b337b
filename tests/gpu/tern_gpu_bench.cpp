// tern_gpu_bench: decode throughput of cuda::DeviceModel alone (no engine,
// no sampling): B sequences prefill a P-token prompt, then run N decode
// steps of B tokens. Prints one line per batch size with the decode tok/s
// with logits copied to the host (what the Runner does today) and without
// (want_logits off: the GPU's own time minus the LM head), and the prefill
// time of the prompt at batch 1 (a TTFT floor).
// Usage: tern_gpu_bench --model DIR [--batch 1,64] [--prompt 256] [--steps 128]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/device_model.h"
#include "engine/cuda_runner.h"
#include "model/arch/ernie4_5.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at < s.size()) {
    const size_t comma = s.find(',', at);
    out.push_back(std::stoll(s.substr(at, comma - at)));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

int fail(const tern::Status& s) {
  std::fprintf(stderr, "tern_gpu_bench: %s\n", s.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir;
  std::vector<int64_t> batches = {1, 64};
  int64_t prompt = 256, steps = 128;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--model") model_dir = value;
    else if (flag == "--batch") batches = parse_list(value);
    else if (flag == "--prompt") prompt = std::stoll(value);
    else if (flag == "--steps") steps = std::stoll(value);
  }
  if (model_dir.empty()) {
    std::fprintf(stderr, "usage: tern_gpu_bench --model DIR [--batch 1,64] [--prompt 256] [--steps 128]\n");
    return 2;
  }
  const auto t_load = Clock::now();
  auto model = tern::Ernie45Model::load(model_dir, 4);
  if (!model.is_ok()) return fail(model.status());
  const tern::ModelConfig& c = model.value()->config();
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
  const int64_t bs = 16, per_seq = (prompt + steps + bs - 1) / bs + 1;
  tern::cuda::DeviceModelOptions o;
  o.block_size = bs;
  o.max_num_batched_tokens = std::max<int64_t>(2048, max_batch);
  o.kv_cache_bytes = max_batch * per_seq * c.num_layers * 2 * bs * c.kv_dim() * 2;
  const auto t_upload = Clock::now();
  auto gpu = tern::cuda::DeviceModel::create(c, tern::cuda_host_weights(*model.value()), o);
  if (!gpu.is_ok()) return fail(gpu.status());
  const double upload_s = seconds_since(t_upload), load_s = seconds_since(t_load);
  const tern::cuda::DeviceMemoryUse mem = gpu.value()->memory_use();
  std::printf("model %s: load+upload %.2f s (upload %.2f s); GPU memory: weights %.0f MiB, workspace %.0f MiB, "
              "KV pool %.0f MiB\n",
              model_dir.c_str(), load_s, upload_s, mem.weight_bytes / 1048576.0, mem.workspace_bytes / 1048576.0,
              mem.kv_pool_bytes / 1048576.0);

  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> tok(3, static_cast<int32_t>(c.vocab_size - 1));
  for (const int64_t B : batches) {
    std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(B)), tables(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      tokens[static_cast<size_t>(b)].resize(static_cast<size_t>(prompt + steps));
      for (auto& t : tokens[static_cast<size_t>(b)]) t = tok(rng);
      for (int64_t k = 0; k < per_seq; ++k) tables[static_cast<size_t>(b)].push_back(static_cast<int32_t>(b * per_seq + k));
    }
    std::vector<float> logits;
    // Prefill, as many prompts per step as the token budget allows; twice,
    // timing the second (the first loads kernels and picks GEMM algorithms).
    double prefill_s = 0;
    for (int rep = 0; rep < 2; ++rep) {
      prefill_s = 0;
      for (int64_t first = 0; first < B;) {
        std::vector<tern::SequenceChunk> batch;
        int64_t used = 0;
        for (; first < B && used + prompt <= o.max_num_batched_tokens; ++first, used += prompt) {
          const auto& seq = tokens[static_cast<size_t>(first)];
          batch.push_back({std::span<const int32_t>(seq).first(static_cast<size_t>(prompt)), 0,
                           tables[static_cast<size_t>(first)], true});
        }
        logits.resize(batch.size() * static_cast<size_t>(c.vocab_size));
        const auto t = Clock::now();
        tern::Status s = gpu.value()->forward_batch(batch, logits);
        if (!s.is_ok()) return fail(s);
        prefill_s += seconds_since(t);
      }
    }
    // Decode: steps/2 steps with logits to the host, then steps/2 without (positions
    // continue, so the second run sees slightly longer contexts).
    double decode_s[2] = {0, 0};
    const int64_t half = steps / 2;
    for (int pass = 0; pass < 2; ++pass) {
      const bool want = pass == 0;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t pos = prompt + pass * half + i;
        std::vector<tern::SequenceChunk> batch;
        for (int64_t b = 0; b < B; ++b) {
          batch.push_back({std::span<const int32_t>(tokens[static_cast<size_t>(b)]).subspan(static_cast<size_t>(pos), 1),
                           pos, tables[static_cast<size_t>(b)], want});
        }
        logits.resize(want ? static_cast<size_t>(B * c.vocab_size) : 0);
        const auto t = Clock::now();
        tern::Status s = gpu.value()->forward_batch(batch, logits);
        if (!s.is_ok()) return fail(s);
        if (i >= 2) decode_s[pass] += seconds_since(t);  // the first steps warm up
      }
    }
    const double timed = static_cast<double>(half - 2);
    std::printf("batch %3ld: prefill %ld x %ld tokens %.2f ms; decode %.0f tok/s (%.3f ms/step) with logits to host, "
                "%.0f tok/s (%.3f ms/step) without\n",
                static_cast<long>(B), static_cast<long>(B), static_cast<long>(prompt), prefill_s * 1e3,
                B * timed / decode_s[0], decode_s[0] / timed * 1e3, B * timed / decode_s[1], decode_s[1] / timed * 1e3);
  }
  return 0;
}
