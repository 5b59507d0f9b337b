// tern_fp8_quality: how far --quantization fp8 moves a model, on the CPU
// reference forward with the FP8 values the GPU kernels compute with
// (Ernie45Model::quantize_fp8), twice: W8A16, activations as the reference
// keeps them (the GPU's GEMV, persistent-kernel and dequantized-GEMM math),
// and W8A8, each layer matrix's input rounded to e4m3 per token as the FP8
// tensor-core GEMMs do (set_fp8_activations). For each prompt
// of the model's golden.json (its token ids): the bf16 model's greedy
// continuation of --tokens tokens, then over prompt + continuation, at
// every position, KL(bf16 || fp8) of the next-token distributions (nats)
// and whether the most likely tokens agree (top-1); and greedy agreement:
// the share of the fp8 model's own greedy tokens produced before its first
// difference from bf16's. Then both again with the LM head in FP8 too
// (quantize_fp8(true), "+ FP8 head"): what an FP8 vocabulary projection would
// cost, since the GPU forms keep the head in bf16.
// Usage: tern_fp8_quality --model DIR [--tokens 20]
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "model/ernie4_5/ernie4_5_model.h"
#include "next_token_stats.h"

namespace {

using tern::Ernie45Model;

using tern::bench::argmax;

// Greedy tokens after `prompt`.
std::vector<int32_t> greedy(Ernie45Model& m, const std::vector<int32_t>& prompt, int tokens) {
  const auto V = static_cast<size_t>(m.config().vocab_size);
  tern::KvCache cache = m.make_cache(static_cast<int64_t>(prompt.size()) + tokens + 1);
  std::vector<float> logits(V);
  std::vector<int32_t> out;
  if (!m.forward(prompt, cache, logits).is_ok()) return out;
  for (int i = 0; i < tokens; ++i) {
    out.push_back(argmax(logits.data(), V));
    if (!m.forward({&out.back(), 1}, cache, logits).is_ok()) break;
  }
  return out;
}

std::vector<float> all_logits(Ernie45Model& m, const std::vector<int32_t>& ids) {
  const auto V = static_cast<size_t>(m.config().vocab_size);
  tern::KvCache cache = m.make_cache(static_cast<int64_t>(ids.size()));
  std::vector<float> logits(ids.size() * V);
  if (!m.forward_all(ids, cache, logits).is_ok()) logits.clear();
  return logits;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int tokens = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--model") dir = argv[i + 1];
    else if (flag == "--tokens") tokens = std::max(1, std::atoi(argv[i + 1]));
  }
  if (dir.empty()) {
    std::fprintf(stderr, "usage: tern_fp8_quality --model DIR [--tokens 20]\n");
    return 2;
  }
  auto base = Ernie45Model::load(dir, 0);
  if (!base.is_ok()) {
    std::fprintf(stderr, "tern_fp8_quality: %s\n", base.status().to_string().c_str());
    return 1;
  }
  std::ifstream in(dir + "/golden.json");
  const nlohmann::json golden = nlohmann::json::parse(in, nullptr, false);
  if (golden.is_discarded() || !golden.contains("prompts")) {
    std::fprintf(stderr, "tern_fp8_quality: %s/golden.json has no prompts\n", dir.c_str());
    return 1;
  }
  const auto V = static_cast<size_t>(base.value()->config().vocab_size);
  // bf16's side, once: per prompt its greedy continuation, the scored ids (prompt + continuation but the
  // last token, whose next is not scored) and the logits over them.
  std::vector<std::vector<int32_t>> conts, scored;
  std::vector<std::vector<float>> base_logits;
  for (const auto& p : golden["prompts"]) {
    std::vector<int32_t> ids = p["ids"].get<std::vector<int32_t>>();
    conts.push_back(greedy(*base.value(), ids, tokens));
    ids.insert(ids.end(), conts.back().begin(), conts.back().end() - 1);
    base_logits.push_back(all_logits(*base.value(), ids));
    if (base_logits.back().empty()) return 1;
    scored.push_back(std::move(ids));
  }
  for (const bool head : {false, true}) {
    auto fp8 = Ernie45Model::load(dir, 0);
    tern::Status s = fp8.is_ok() ? fp8.value()->quantize_fp8(head) : fp8.status();
    if (!s.is_ok()) {
      std::fprintf(stderr, "tern_fp8_quality: %s\n", s.to_string().c_str());
      return 1;
    }
    // W8A16 (GEMV, persistent kernel, dequantized GEMMs), then W8A8 (the tensor-core GEMMs).
    for (const bool w8a8 : {false, true}) {
      fp8.value()->set_fp8_activations(w8a8);
      tern::bench::NextTokenStats stats;
      double greedy_sum = 0;
      const auto prompts = static_cast<int64_t>(scored.size());
      size_t i = 0;
      for (const auto& p : golden["prompts"]) {
        const std::vector<int32_t>& cont = conts[i];
        const std::vector<int32_t> cont8 = greedy(*fp8.value(), p["ids"].get<std::vector<int32_t>>(), tokens);
        size_t agree = 0;
        while (agree < cont.size() && agree < cont8.size() && cont[agree] == cont8[agree]) ++agree;
        greedy_sum += static_cast<double>(agree) / static_cast<double>(tokens);
        const std::vector<float> b = all_logits(*fp8.value(), scored[i]);
        if (b.empty()) return 1;
        stats.add(base_logits[i].data(), b.data(), scored[i].size(), V);
        ++i;
      }
      std::printf("%s %s%s: %ld prompts, %ld positions: mean KL(bf16 || fp8) %.5f nats, top-1 %.3f, greedy %.3f "
                  "(%d tokens)\n",
                  dir.c_str(), w8a8 ? "W8A8" : "W8A16", head ? " + FP8 head" : "", static_cast<long>(prompts),
                  static_cast<long>(stats.positions), stats.mean_kl(), stats.top1(),
                  greedy_sum / static_cast<double>(prompts), tokens);
    }
  }
  return 0;
}
