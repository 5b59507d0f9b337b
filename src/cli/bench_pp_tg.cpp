// `tern bench pp-tg`: llama-bench's two tests on the model alone, so its
// figures compare with `llama-bench -p P -n N -t T -r R` line by line. pp: one
// forward of P random tokens into an empty cache (logits of the last token,
// as llama_decode gives). tg: N one-token forwards starting from an empty
// cache, each token random (llama-bench samples nothing either). Each test
// runs once to warm up, then R times; tokens/s per run, mean and sample
// stddev over the runs, as llama-bench reports them, and where each test's
// time went (Ernie45Model's ForwardProfile). No engine, scheduler
// or sampler: what is timed is Ernie45Model::forward on a KvCache.
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>

#include "base/logging.h"
#include "setup/engine_setup.h"
#include "setup/model_source.h"
#include "cli/commands.h"
#include "formats/dtype.h"
#include "tern_git_commit.h"

namespace tern::cli {
namespace {

struct RunStats {
  std::vector<double> tokens_per_s;  // one per timed run
  double mean = 0;
  double stddev = 0;  // sample stddev (n - 1), 0 for one run
};

RunStats summarize(std::vector<double> samples) {
  RunStats s;
  s.tokens_per_s = std::move(samples);
  const auto n = static_cast<double>(s.tokens_per_s.size());
  if (n == 0) return s;
  s.mean = std::accumulate(s.tokens_per_s.begin(), s.tokens_per_s.end(), 0.0) / n;
  if (n > 1) {
    double sq = 0;
    for (double v : s.tokens_per_s) sq += (v - s.mean) * (v - s.mean);
    s.stddev = std::sqrt(sq / (n - 1));
  }
  return s;
}

// Runs `test` (which does `tokens` tokens of work) once unmeasured, then
// `reps` times measured; `reset` runs before each, outside the timing.
Result<RunStats> time_test(int64_t tokens, int64_t reps, const std::function<void()>& reset,
                           const std::function<Status()>& test) {
  std::vector<double> samples;
  for (int64_t r = 0; r <= reps; ++r) {
    reset();
    auto start = std::chrono::steady_clock::now();
    TERN_RETURN_IF_ERROR(test());
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r > 0) samples.push_back(static_cast<double>(tokens) / s);
  }
  return summarize(std::move(samples));
}

}  // namespace

int run_bench_pp_tg(const BenchOptions& o) {
  configure_logging(LogFormat::kText, o.log_level);
  if (o.n_prompt < 0 || o.n_gen < 0 || o.n_prompt + o.n_gen == 0 || o.repetitions < 1) {
    std::fprintf(stderr, "tern bench pp-tg: need -p >= 0, -n >= 0, not both 0, and -r >= 1\n");
    return 1;
  }
  if (o.engine.device == "cuda" || o.engine.device == "null") {
    std::fprintf(stderr, "tern bench pp-tg: runs the CPU forward only (--device cpu); "
                         "on the GPU, or with --device null, use bench offline / conc\n");
    return 1;
  }
  if (o.engine.kv_cache_dtype != "auto") {
    std::fprintf(stderr, "tern bench pp-tg: times the model over its contiguous fp32 cache; --kv-cache-dtype %s "
                         "applies to the engine's paged cache (bench offline / conc)\n",
                 o.engine.kv_cache_dtype.c_str());
    return 1;
  }
  const cpu::KernelSet* kernels = cpu::kernel_set_named(o.engine.cpu_kernels);
  if (kernels == nullptr) {
    std::fprintf(stderr, "tern bench pp-tg: unknown --cpu-kernels '%s'\n", o.engine.cpu_kernels.c_str());
    return 1;
  }
  auto source = resolve_model_source(o.engine.model);
  if (!source.is_ok()) {
    std::fprintf(stderr, "tern bench pp-tg: %s\n", source.status().to_string().c_str());
    return 1;
  }
  auto loaded = Ernie45Model::load(source->path, o.engine.threads, *kernels);
  if (!loaded.is_ok()) {
    std::fprintf(stderr, "tern bench pp-tg: %s\n", loaded.status().to_string().c_str());
    return 1;
  }
  Ernie45Model& model = **loaded;
  RunnerOptions unused;
  if (Status q = apply_quantization(model, source->path, o.engine.quantization, "cpu", unused); !q.is_ok()) {
    std::fprintf(stderr, "tern bench pp-tg: %s\n", q.to_string().c_str());
    return 1;
  }
  const ModelConfig& cfg = model.config();
  const int64_t capacity = std::max(o.n_prompt, o.n_gen);
  if (capacity > cfg.max_position_embeddings) {
    std::fprintf(stderr, "tern bench pp-tg: %lld tokens exceed the model's %lld positions\n",
                 static_cast<long long>(capacity), static_cast<long long>(cfg.max_position_embeddings));
    return 1;
  }

  KvCache cache = model.make_cache(capacity);
  std::vector<float> logits(static_cast<size_t>(cfg.vocab_size));
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(cfg.vocab_size - 1));
  const auto clear = [&cache] { cache.clear(); };

  RunStats pp, tg;
  ForwardProfile pp_split, tg_split;
  if (o.n_prompt > 0) {
    model.reset_profile();
    std::vector<int32_t> prompt(static_cast<size_t>(o.n_prompt));
    for (auto& t : prompt) t = token(rng);
    auto r = time_test(o.n_prompt, o.repetitions, clear, [&] { return model.forward(prompt, cache, logits); });
    if (!r.is_ok()) {
      std::fprintf(stderr, "tern bench pp-tg: %s\n", r.status().to_string().c_str());
      return 1;
    }
    pp = *r;
    pp_split = model.profile();
  }
  if (o.n_gen > 0) {
    model.reset_profile();
    auto r = time_test(o.n_gen, o.repetitions, clear, [&]() -> Status {
      for (int64_t i = 0; i < o.n_gen; ++i) {
        const int32_t t = token(rng);
        TERN_RETURN_IF_ERROR(model.forward(std::span<const int32_t>(&t, 1), cache, logits));
      }
      return Status::ok();
    });
    if (!r.is_ok()) {
      std::fprintf(stderr, "tern bench pp-tg: %s\n", r.status().to_string().c_str());
      return 1;
    }
    tg = *r;
    tg_split = model.profile();
  }

  const std::string weights(dtype_name(model.layer_weights()[0].q.dtype));
  const std::string name = std::filesystem::path(o.engine.model).lexically_normal().filename().string();
  std::printf("model %s (%s weights), cpu, %d threads, %s kernels, commit %s, %lld runs after 1 warm-up\n",
              name.c_str(), weights.c_str(), model.num_threads(), kernels->name, TERN_GIT_COMMIT,
              static_cast<long long>(o.repetitions));
  std::printf("| test   |              t/s |\n|--------|------------------|\n");
  const auto row = [](const char* test, int64_t n, const RunStats& s) {
    std::printf("| %s%-4lld | %8.2f ± %6.2f |\n", test, static_cast<long long>(n), s.mean, s.stddev);
  };
  if (o.n_prompt > 0) row("pp", o.n_prompt, pp);
  if (o.n_gen > 0) row("tg", o.n_gen, tg);
  const auto split = [](const char* test, const ForwardProfile& p) {
    const double total = p.linear_s + p.attention_s + p.lm_head_s + p.other_s;
    if (total <= 0) return;
    std::printf("%s time (all runs): linear %.0f%%, attention %.0f%%, LM head %.0f%%, other %.0f%%\n", test,
                100 * p.linear_s / total, 100 * p.attention_s / total, 100 * p.lm_head_s / total,
                100 * p.other_s / total);
  };
  if (o.n_prompt > 0) split("pp", pp_split);
  if (o.n_gen > 0) split("tg", tg_split);
  const auto split_json = [](const ForwardProfile& p) {
    return nlohmann::json{{"linear_s", p.linear_s},
                          {"attention_s", p.attention_s},
                          {"lm_head_s", p.lm_head_s},
                          {"other_s", p.other_s},
                          {"forward_calls", p.calls}};
  };

  if (!o.json_out.empty()) {
    nlohmann::json j = {{"scenario", "pp-tg"},
                        {"model", o.engine.model},
                        {"model_name", name},
                        {"weights_dtype", weights},
                        {"quantization", o.engine.quantization},
                        {"device", "cpu"},
                        {"cpu_kernels", kernels->name},
                        {"threads", model.num_threads()},
                        {"commit", TERN_GIT_COMMIT},
                        {"n_prompt", o.n_prompt},
                        {"n_gen", o.n_gen},
                        {"repetitions", o.repetitions},
                        {"pp_tokens_per_s", pp.mean},
                        {"pp_tokens_per_s_stddev", pp.stddev},
                        {"pp_samples_tokens_per_s", pp.tokens_per_s},
                        {"tg_tokens_per_s", tg.mean},
                        {"tg_tokens_per_s_stddev", tg.stddev},
                        {"tg_samples_tokens_per_s", tg.tokens_per_s},
                        {"pp_time_split", split_json(pp_split)},
                        {"tg_time_split", split_json(tg_split)}};
    std::ofstream(o.json_out) << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace tern::cli
