// `tern bench`: requests run to completion through the engine, no HTTP.
// offline: many requests submitted at once (the nano-vllm / mini-sglang
// offline table). conc: the serve benchmarks' conc-N workload (prompts
// 50-500 tokens, 128 out, 4N requests) with the engine keeping N sequences
// running, a closed loop of N streams without the server and client, so a
// conc-N figure through HTTP can be split into engine and HTTP. Both report
// request and token throughput and where step time went. Random prompts of
// plain tokens, EOS ignored so outputs have the asked length; greedy unless
// --temperature (with --top-p / --top-k) asks for sampling. pp-tg
// (bench_pp_tg.cpp): llama-bench's pp and tg tests on the model alone.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <vector>

#include "base/logging.h"
#include "cli/commands.h"
#include "cli/number_checks.h"
#include "cli/percentile.h"
#include "engine/request_stream.h"

namespace tern::cli {

void add_bench_command(CLI::App& app, BenchOptions& o) {
  auto* cmd = app.add_subcommand("bench", "Measure the engine's throughput and time to first token without HTTP; "
                                          "scenario 'offline': N requests at once, 'conc': a closed loop of "
                                          "--concurrency streams (first tokens timed from each request's "
                                          "admission), 'pp-tg': llama-bench's prompt (-p) and generation (-n) "
                                          "tests on the CPU model alone, -r runs each");
  add_engine_options(*cmd, o.engine);
  cmd->add_option("scenario", o.scenario, "offline | conc | pp-tg")
      ->check(CLI::IsMember({"offline", "conc", "pp-tg"}))->capture_default_str();
  cmd->add_option("-p,--n-prompt", o.n_prompt,
                  "pp-tg: prompt tokens run as one forward into an empty cache (0: skip the pp test)")
      ->check(at_least(0))->capture_default_str();
  cmd->add_option("-n,--n-gen", o.n_gen,
                  "pp-tg: tokens generated one forward at a time from an empty cache (0: skip the tg test)")
      ->check(at_least(0))->capture_default_str();
  cmd->add_option("-r,--repetitions", o.repetitions, "pp-tg: timed runs of each test, after one warm-up")
      ->check(at_least(1))->capture_default_str();
  cmd->add_option("--concurrency", o.concurrency,
                  "conc: sequences kept running (sets --max-num-seqs); its defaults: 4 x this many requests "
                  "(at least 32), prompts 50-500 tokens, 128 output tokens")
      ->check(at_least(1))->capture_default_str();
  cmd->add_option("--num-requests", o.num_requests, "Requests to run")->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--input-min", o.input_min, "Shortest prompt (tokens)")->capture_default_str();
  cmd->add_option("--input-max", o.input_max, "Longest prompt (tokens)")->capture_default_str();
  cmd->add_option("--output-min", o.output_min, "Fewest output tokens")->capture_default_str();
  cmd->add_option("--output-max", o.output_max, "Most output tokens")->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the random lengths and prompts")->capture_default_str();
  cmd->add_option("--temperature", o.temperature, "Sampling temperature of every request (0: greedy)")
      ->check(between(0.0, 2.0))->capture_default_str();
  cmd->add_option("--top-p", o.top_p, "top_p of every request")->check(between(0.0, 1.0))->capture_default_str();
  cmd->add_option("--top-k", o.top_k, "top_k of every request (0: off)")->check(at_least(0))
      ->capture_default_str();
  cmd->add_option("--json-out", o.json_out, "Also write the results as JSON to this file");
  cmd->add_option("--log-level", o.log_level, "trace|debug|info|warn|error")->capture_default_str();
  // conc's workload where the options were not given; its concurrency is the engine's sequence limit.
  cmd->parse_complete_callback([cmd, &o] {
    // A flag the scenario would not use is refused, not ignored.
    const auto refuse = [cmd, &o](std::initializer_list<const char*> names, const std::string& why) {
      for (const char* name : names) {
        if (cmd->count(name) > 0) throw CLI::ValidationError(name, "bench " + o.scenario + " does not use it: " + why);
      }
    };
    if (o.scenario == "pp-tg") {
      refuse({"--concurrency", "--num-requests", "--input-min", "--input-max", "--output-min", "--output-max",
              "--temperature", "--top-p", "--top-k", "--max-model-len", "--max-num-seqs",
              "--max-num-batched-tokens", "--decode-step-tokens", "--block-size", "--kv-cache-memory",
              "--gpu-memory-utilization", "--enable-prefix-caching", "--enforce-eager", "--async-scheduling", "--decode-kernel",
              "--max-logprobs"},
             "pp-tg runs the model alone (greedy, one prompt or one token per forward), not the engine");
      return;
    }
    refuse({"--n-prompt", "--n-gen", "--repetitions"}, "these are pp-tg's");
    if (o.scenario != "conc") return;
    if (cmd->count("--max-num-seqs") > 0 && o.engine.run.max_num_seqs != o.concurrency) {
      throw CLI::ValidationError("--max-num-seqs",
                                 "bench conc keeps --concurrency sequences running; give --concurrency alone");
    }
    o.engine.run.max_num_seqs = o.concurrency;
    const auto unless_given = [cmd](const char* name, int64_t& value, int64_t conc_default) {
      if (cmd->count(name) == 0) value = conc_default;
    };
    unless_given("--num-requests", o.num_requests, std::max<int64_t>(4 * o.concurrency, 32));
    unless_given("--input-min", o.input_min, 50);
    unless_given("--input-max", o.input_max, 500);
    unless_given("--output-min", o.output_min, 128);
    unless_given("--output-max", o.output_max, 128);
  });
}

namespace {

// p50 / p90 / p99 (percentile.h) and the mean of `ms`; zeros when empty.
nlohmann::json percentiles(const std::vector<double>& ms) {
  double sum = 0;
  for (double v : ms) sum += v;
  return {{"p50", percentile(ms, 0.50)},
          {"p90", percentile(ms, 0.90)},
          {"p99", percentile(ms, 0.99)},
          {"mean", ms.empty() ? 0.0 : sum / static_cast<double>(ms.size())}};
}

}  // namespace

int run_bench(const BenchOptions& o) {
  if (o.scenario == "pp-tg") return run_bench_pp_tg(o);
  configure_logging(LogFormat::kText, o.log_level);
  if (o.input_min < 1 || o.input_max < o.input_min || o.output_min < 1 || o.output_max < o.output_min) {
    std::fprintf(stderr, "tern bench: need 1 <= --input-min <= --input-max and 1 <= --output-min <= --output-max\n");
    return 1;
  }
  auto loaded = load_engine(o.engine);
  if (!loaded.is_ok()) {
    std::fprintf(stderr, "tern bench: %s\n", loaded.status().to_string().c_str());
    return 1;
  }
  LoadedEngine& le = *loaded;
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int64_t> in_len(o.input_min, o.input_max), out_len(o.output_min, o.output_max);
  int32_t vocab = le.tokenizer->vocab_size();
  std::uniform_int_distribution<int32_t> token(3, std::max<int32_t>(4, vocab - 1));

  std::vector<std::shared_ptr<RequestStream>> streams;
  int64_t prompt_tokens = 0, asked_output = 0;
  for (int64_t i = 0; i < o.num_requests; ++i) {
    Request r;
    r.id = "bench-" + std::to_string(i);
    r.prompt.resize(static_cast<size_t>(std::min(in_len(rng), le.max_model_len - 1)));
    for (auto& t : r.prompt) t = token(rng);
    r.params.temperature = o.temperature;
    r.params.top_p = o.top_p;
    r.params.top_k = o.top_k;
    r.params.seed = o.seed + static_cast<uint64_t>(i);
    r.params.ignore_eos = true;
    r.params.max_tokens = std::min(out_len(rng), le.max_model_len - static_cast<int64_t>(r.prompt.size()));
    prompt_tokens += static_cast<int64_t>(r.prompt.size());
    asked_output += r.params.max_tokens;
    streams.push_back(std::make_shared<RequestStream>());
    Status st = le.engine->add_request(std::move(r), streams.back());
    if (!st.is_ok()) {
      std::fprintf(stderr, "tern bench: %s\n", st.to_string().c_str());
      return 1;
    }
  }

  auto start = std::chrono::steady_clock::now();
  double step_ms_total = 0, prefill_ms = 0, decode_ms = 0;
  int64_t steps = 0, max_batch = 0;
  // Per request: arrival (all at the start) to its first token, and its first
  // step to its first token (what a closed-loop client sees: conc admits a
  // request when a stream frees, so its wait before that is not its own).
  std::vector<double> ttft_ms, admitted_ttft_ms;
  while (le.engine->has_work()) {
    le.engine->step();
    EngineStats s = le.engine->stats();
    step_ms_total += s.last_step_ms;
    // A step counts as decode when every sequence in it computes one token.
    (s.last_step_tokens == s.last_step_seqs ? decode_ms : prefill_ms) += s.last_step_ms;
    max_batch = std::max(max_batch, s.last_step_seqs);
    ++steps;
    for (auto& st : streams) {
      for (const RequestOutput& out : st->drain()) {
        if (!out.finished || out.ttft_ms <= 0) continue;
        ttft_ms.push_back(out.ttft_ms);
        admitted_ttft_ms.push_back(out.ttft_ms - out.queue_ms);
      }
    }
  }
  double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EngineStats s = le.engine->stats();

  const std::string label = o.scenario == "conc" ? "conc-" + std::to_string(o.concurrency) : o.scenario;
  nlohmann::json j = {
      {"scenario", label}, {"requests", o.num_requests}, {"prompt_tokens", prompt_tokens},
      {"output_tokens", s.generation_tokens_total}, {"wall_s", wall_s},
      {"requests_per_s", o.num_requests / wall_s}, {"output_tokens_per_s", s.generation_tokens_total / wall_s},
      {"total_tokens_per_s", (prompt_tokens + s.generation_tokens_total) / wall_s}, {"steps", steps},
      {"max_batch_seqs", max_batch}, {"preemptions", s.num_preemptions},
      {"overlapped_steps", s.num_overlapped_steps},
      {"step_ms_mean", steps ? step_ms_total / steps : 0}, {"prefill_steps_ms", prefill_ms},
      {"decode_steps_ms", decode_ms}, {"threads", le.model->num_threads()},
      {"max_num_seqs", o.engine.run.max_num_seqs}, {"max_num_batched_tokens", le.max_num_batched_tokens},
      {"decode_step_tokens", o.engine.decode_step_tokens},
      {"long_step_max_streams", o.engine.long_step_max_streams},
      {"temperature", o.temperature}, {"top_p", o.top_p}, {"top_k", o.top_k},
      {"ttft_ms", percentiles(ttft_ms)}, {"ttft_after_admission_ms", percentiles(admitted_ttft_ms)},
      {"spec_draft_tokens", s.spec_draft_tokens}, {"spec_accepted_tokens", s.spec_accepted_tokens}};
  std::printf("%s: %lld requests, %lld prompt + %lld output tokens in %.2f s\n", label.c_str(),
              static_cast<long long>(o.num_requests), static_cast<long long>(prompt_tokens),
              static_cast<long long>(s.generation_tokens_total), wall_s);
  std::printf("  %.2f req/s, %.1f output tok/s, %.1f total tok/s; %lld steps (mean %.1f ms), max batch %lld, "
              "%lld preemptions, %lld overlapped; time in mixed/prefill steps %.1f s, pure decode steps %.1f s\n",
              o.num_requests / wall_s, s.generation_tokens_total / wall_s,
              (prompt_tokens + s.generation_tokens_total) / wall_s, static_cast<long long>(steps),
              steps ? step_ms_total / steps : 0.0, static_cast<long long>(max_batch),
              static_cast<long long>(s.num_preemptions), static_cast<long long>(s.num_overlapped_steps),
              prefill_ms / 1000, decode_ms / 1000);
  if (s.spec_draft_tokens > 0) {
    std::printf("  speculative decoding: %lld drafts in %lld sequence steps, %lld accepted (%.0f%%)\n",
                static_cast<long long>(s.spec_draft_tokens), static_cast<long long>(s.spec_drafts),
                static_cast<long long>(s.spec_accepted_tokens),
                100.0 * static_cast<double>(s.spec_accepted_tokens) / static_cast<double>(s.spec_draft_tokens));
  }
  const nlohmann::json& first = j[o.scenario == "conc" ? "ttft_after_admission_ms" : "ttft_ms"];
  std::printf("  time to first token%s: p50 %.1f ms, p90 %.1f ms, p99 %.1f ms\n",
              o.scenario == "conc" ? " (from admission)" : "", first["p50"].get<double>(), first["p90"].get<double>(),
              first["p99"].get<double>());
  if (!o.json_out.empty()) {
    std::ofstream(o.json_out) << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace tern::cli
