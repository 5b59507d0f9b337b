// The engine on the CUDA runner against the engine on the CPU runner: the
// same greedy tokens, device sampling, prompt logprobs and overlapped
// scheduling (the model itself against the CPU reference: model_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "gpu_model_util.h"
#include "gpu_test_util.h"
#include "model/ernie4_5/cuda/device_model.h"
#include "model/ernie4_5/ernie4_5_model.h"
#include "runners/cpu_runner.h"
#include "runners/cuda_runner.h"
#include "support/requests.h"
#include "support/tiny_model.h"
#include "tokenizer/tokenizer.h"

namespace tern {
namespace {

using testing::greedy_request;

// ---- The engine on the CUDA runner against the engine on the CPU runner.

std::vector<std::vector<int32_t>> run_engine_requests(std::unique_ptr<Runner> runner, const Tokenizer& tokenizer,
                                                      const std::vector<Request>& requests, bool overlap = true,
                                                      EngineStats* stats = nullptr,
                                                      const SpeculativeConfig& speculative = {});

std::vector<std::vector<int32_t>> run_engine(std::unique_ptr<Runner> runner, const Tokenizer& tokenizer,
                                             const std::vector<std::vector<int32_t>>& prompts,
                                             const std::vector<int64_t>& lengths) {
  std::vector<Request> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    requests.push_back(greedy_request("r" + std::to_string(i), prompts[i], lengths[i]));
  }
  return run_engine_requests(std::move(runner), tokenizer, requests);
}

// The requests through one engine (steps of up to 64 tokens, 64 sequences)
// to the end: each stream's outputs, every one without error, and no KV
// block left in use.
std::vector<std::deque<RequestOutput>> run_engine_outputs(std::unique_ptr<Runner> runner, const Tokenizer& tokenizer,
                                                          const std::vector<Request>& requests, bool overlap = true,
                                                          EngineStats* stats = nullptr,
                                                          const SpeculativeConfig& speculative = {}) {
  EngineConfig config;
  config.overlap = overlap;
  config.speculative = speculative;
  config.scheduler.max_num_seqs = 64;
  config.scheduler.max_num_batched_tokens = 64;
  config.max_model_len = 1024;
  config.eos_ids = tokenizer.default_stop_ids();
  Engine engine(std::move(runner), tokenizer, config);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Request& request : requests) {
    streams.push_back(std::make_shared<RequestStream>());
    Status s = engine.add_request(request, streams.back());
    EXPECT_TRUE(s.is_ok()) << s.to_string();
  }
  for (int guard = 0; engine.has_work() && guard < 100000; ++guard) engine.step();
  EXPECT_EQ(engine.allocator().num_used(), 0);
  if (stats != nullptr) *stats = engine.stats();
  std::vector<std::deque<RequestOutput>> out;
  for (auto& stream : streams) {
    out.push_back(stream->drain());
    for (const RequestOutput& e : out.back()) EXPECT_TRUE(e.error.is_ok()) << e.error.to_string();
  }
  return out;
}

std::vector<std::vector<int32_t>> run_engine_requests(std::unique_ptr<Runner> runner, const Tokenizer& tokenizer,
                                                      const std::vector<Request>& requests, bool overlap,
                                                      EngineStats* stats, const SpeculativeConfig& speculative) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& outputs : run_engine_outputs(std::move(runner), tokenizer, requests, overlap, stats, speculative)) {
    std::vector<int32_t> tokens;
    for (const RequestOutput& e : outputs) {
      for (const auto& s : e.sequences) tokens.insert(tokens.end(), s.token_ids.begin(), s.token_ids.end());
    }
    out.push_back(tokens);
  }
  return out;
}

// A CUDA runner for a tiny model: 256 KV blocks of 16 positions.
std::unique_ptr<Runner> tiny_cuda_runner(Ernie45Model& cpu, int64_t max_num_batched_tokens) {
  const ModelConfig& c = cpu.config();
  const int64_t bs = 16, blocks = 256;
  auto r = make_cuda_runner(cpu, bs, blocks * c.num_layers * 2 * bs * c.kv_dim() * 2, max_num_batched_tokens);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? std::move(r).value() : nullptr;
}

// ernie-tiny's CPU model and tokenizer, the engine tests' model.
struct ErnieTiny {
  std::unique_ptr<Ernie45Model> cpu;
  std::unique_ptr<Tokenizer> tok;
};
void load_ernie_tiny(ErnieTiny& tiny) {
  const std::string dir = std::string(TERN_TEST_DATA_DIR) + "/ernie-tiny";
  tiny.cpu = load_cpu(dir);
  ASSERT_NE(tiny.cpu, nullptr);
  auto tok = Tokenizer::load(dir);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  tiny.tok = std::make_unique<Tokenizer>(std::move(tok).value());
}

// Where two greedy runs of `prompt` first differ (want[k] != got[k]), the
// fp32 reference must see a near-tie: 0.5, twice the largest logit error
// measured against fp32 on this model (0.25). Returns whether they differ.
bool expect_near_tie(Ernie45Model& cpu, const std::vector<int32_t>& prompt, const std::vector<int32_t>& want,
                     const std::vector<int32_t>& got, const std::string& what) {
  size_t k = 0;
  while (k < want.size() && k < got.size() && got[k] == want[k]) ++k;
  if (k == want.size() || k == got.size()) return false;
  std::vector<int32_t> prefix = prompt;
  prefix.insert(prefix.end(), want.begin(), want.begin() + static_cast<long>(k));
  KvCache cache = cpu.make_cache(static_cast<int64_t>(prefix.size()));
  std::vector<float> ref(static_cast<size_t>(cpu.config().vocab_size));
  EXPECT_TRUE(cpu.forward(prefix, cache, ref).is_ok());
  const double gap = ref[static_cast<size_t>(want[k])] - ref[static_cast<size_t>(got[k])];
  EXPECT_LT(gap, 0.5) << what << " token " << k << ": chose " << got[k] << ", " << gap << " below the fp32 best "
                      << want[k];
  std::printf("[engine] %s differs at token %zu of %zu: fp32 gap %.3f\n", what.c_str(), k, want.size(), gap);
  return true;
}

// Greedy requests through the engine on both runners, over one model (with
// q4_0: quantized on the host first, the GPU's layers as int4 weights).
void engine_matches_cpu_runner(bool q4_0) {
  ErnieTiny tiny;
  ASSERT_NO_FATAL_FAILURE(load_ernie_tiny(tiny));
  Ernie45Model* cpu = tiny.cpu.get();
  const Tokenizer& tok = *tiny.tok;
  if (q4_0) {
    ASSERT_TRUE(cpu->quantize(QuantMix::kQ4_0).is_ok());
  }
  const ModelConfig& c = cpu->config();
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> lengths;
  std::uniform_int_distribution<int32_t> tok_d(20, 1000);
  for (int i = 0; i < 16; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(1 + rng() % 150));
    for (auto& t : p) t = tok_d(rng);
    prompts.push_back(p);
    lengths.push_back(4 + static_cast<int64_t>(rng() % 20));
  }
  const int64_t bs = 16, blocks = 256;
  const int64_t bytes_cpu = blocks * PagedKvPool::bytes_per_block(c.num_layers, c.kv_dim(), bs);
  auto cpu_runner = CpuRunner::create(*cpu, bs, bytes_cpu);
  ASSERT_TRUE(cpu_runner.is_ok());
  auto gpu_runner = make_cuda_runner(*cpu, bs, blocks * c.num_layers * 2 * bs * c.kv_dim() * 2, 64);
  ASSERT_TRUE(gpu_runner.is_ok()) << gpu_runner.status().to_string();
  EXPECT_EQ(gpu_runner.value()->num_kv_blocks(), blocks);
  auto want = run_engine(std::move(cpu_runner).value(), tok, prompts, lengths);
  auto got = run_engine(std::move(gpu_runner).value(), tok, prompts, lengths);

  int identical = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(got[i].size(), static_cast<size_t>(lengths[i])) << "request " << i;
    ASSERT_EQ(want[i].size(), static_cast<size_t>(lengths[i])) << "request " << i;
    identical += expect_near_tie(*cpu, prompts[i], want[i], got[i], "request " + std::to_string(i)) ? 0 : 1;
  }
  std::printf("[engine%s] %d of %zu greedy requests identical on the CUDA and CPU runners\n", q4_0 ? " q4_0" : "",
              identical, prompts.size());
}

TEST(GpuModel, EngineOnCudaRunnerMatchesCpuRunner) { engine_matches_cpu_runner(false); }

TEST(GpuModel, EngineOnInt4WeightsMatchesCpuRunner) { engine_matches_cpu_runner(true); }

// Sampling on the device through the engine: seeded requests repeat their
// tokens, in one batch and in a new engine. (Penalised greedy rows are
// checked exactly against the host sampler in check_device_picks.)
TEST(GpuModel, EngineSamplesOnTheDevice) {
  ErnieTiny tiny;
  ASSERT_NO_FATAL_FAILURE(load_ernie_tiny(tiny));
  Ernie45Model* cpu = tiny.cpu.get();
  const Tokenizer& tok = *tiny.tok;
  auto gpu = [&] { return tiny_cuda_runner(*cpu, 64); };
  std::mt19937 rng(12);
  std::uniform_int_distribution<int32_t> tok_d(20, 1000);
  auto prompt = [&](size_t n) {
    std::vector<int32_t> p(n);
    for (auto& t : p) t = tok_d(rng);
    return p;
  };

  // Seeded sampling: two copies of each request in one batch draw the same tokens; other seeds differ.
  std::vector<Request> sampled;
  for (int i = 0; i < 4; ++i) {
    Request r = greedy_request("s" + std::to_string(i), prompt(20 + 10 * static_cast<size_t>(i)), 24);
    r.params.temperature = 0.9;
    r.params.top_p = 0.95;
    r.params.top_k = 40;
    r.params.min_p = 0.01;
    r.params.seed = 1000 + static_cast<uint64_t>(i % 2);
    sampled.push_back(r);
    r.id += "-copy";
    sampled.push_back(r);
  }
  const auto draws = run_engine_requests(gpu(), tok, sampled);
  for (size_t i = 0; i < sampled.size(); i += 2) {
    ASSERT_EQ(draws[i].size(), 24u);
    EXPECT_EQ(draws[i], draws[i + 1]) << "seeded request " << i / 2 << " and its copy";
  }
  const auto again = run_engine_requests(gpu(), tok, sampled);
  EXPECT_EQ(again, draws) << "the same seeded requests in a new engine";

}

// The prompt's log-probabilities (vLLM's prompt_logprobs) through the
// engine on the CUDA runner against the CPU runner: prompts chunked over
// several steps beside plain greedy requests, prompt-only requests
// (max_tokens 0) and ones that go on generating; each prompt token's
// log-probability within twice the largest logit error of this model in
// bf16 (0.25), its rank and top entries' counts as on the CPU.
TEST(GpuModel, PromptLogprobsMatchCpuRunner) {
  ErnieTiny tiny;
  ASSERT_NO_FATAL_FAILURE(load_ernie_tiny(tiny));
  Ernie45Model* cpu = tiny.cpu.get();
  const Tokenizer& tok = *tiny.tok;
  const ModelConfig& c = cpu->config();
  std::mt19937 rng(21);
  std::uniform_int_distribution<int32_t> tok_d(20, 1000);
  std::vector<Request> requests;
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(1 + rng() % 150));
    for (auto& t : p) t = tok_d(rng);
    Request r = greedy_request("r" + std::to_string(i), p, i % 3 == 0 ? 0 : 6);
    if (i % 4 != 3) r.params.prompt_logprobs = i % 2 == 0 ? 0 : 3;
    requests.push_back(std::move(r));
  }
  auto run = [&](std::unique_ptr<Runner> runner) {
    std::vector<std::pair<std::vector<SampleResult>, size_t>> out;  // prompt logprobs, tokens generated
    for (const auto& outputs : run_engine_outputs(std::move(runner), tok, requests)) {
      std::vector<SampleResult> scores;
      size_t generated = 0;
      for (const RequestOutput& e : outputs) {
        scores.insert(scores.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
        for (const auto& s : e.sequences) generated += s.token_ids.size();
      }
      out.emplace_back(std::move(scores), generated);
    }
    return out;
  };
  const int64_t bs = 16, blocks = 256;
  auto cpu_runner = CpuRunner::create(*cpu, bs, blocks * PagedKvPool::bytes_per_block(c.num_layers, c.kv_dim(), bs));
  ASSERT_TRUE(cpu_runner.is_ok());
  const auto want = run(std::move(cpu_runner).value());
  const auto got = run(tiny_cuda_runner(*cpu, 64));
  double worst = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const Request& r = requests[i];
    const size_t scored = r.params.prompt_logprobs ? r.prompt.size() - 1 : 0;
    ASSERT_EQ(want[i].first.size(), scored) << "request " << i << " on the CPU";
    ASSERT_EQ(got[i].first.size(), scored) << "request " << i;
    EXPECT_EQ(got[i].second, static_cast<size_t>(r.params.max_tokens)) << "request " << i;
    for (size_t k = 0; k < scored; ++k) {
      const SampleResult& g = got[i].first[k];
      const SampleResult& w = want[i].first[k];
      EXPECT_EQ(g.token, r.prompt[k + 1]) << "request " << i << " prompt token " << k + 1;
      EXPECT_EQ(g.top.size(), w.top.size()) << "request " << i << " prompt token " << k + 1;
      EXPECT_GE(g.rank, 1);
      worst = std::max(worst, static_cast<double>(std::abs(g.logprob - w.logprob)));
      EXPECT_NEAR(g.logprob, w.logprob, 0.5) << "request " << i << " prompt token " << k + 1;
    }
  }
  std::printf("[prompt logprobs] %zu requests, worst |GPU - CPU| log-probability %.3f\n", requests.size(), worst);
}

// Overlap scheduling (step n + 1 launched before step n is collected, its
// new tokens fed on the device) gives the tokens of serial steps: greedy
// and seeded sampled requests in one batch, one of them stopping on a token
// mid-way (its extra computed token dropped). Equal prompt and output
// lengths keep every step's batch in the same decode bucket either way,
// so the kernels see the same shapes and the results are bit-identical.
TEST(GpuModel, OverlapSchedulingGivesTheSerialTokens) {
  ErnieTiny tiny;
  ASSERT_NO_FATAL_FAILURE(load_ernie_tiny(tiny));
  Ernie45Model* cpu = tiny.cpu.get();
  const Tokenizer& tok = *tiny.tok;
  auto gpu = [&] { return tiny_cuda_runner(*cpu, 256); };
  std::mt19937 rng(44);
  std::uniform_int_distribution<int32_t> tok_d(20, 1000);
  std::vector<Request> requests;
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> p(24);
    for (auto& t : p) t = tok_d(rng);
    Request r = greedy_request("o" + std::to_string(i), p, 20);
    if (i >= 4) {
      r.params.temperature = 0.8;
      r.params.top_p = 0.9;
      r.params.seed = 70 + static_cast<uint64_t>(i);
    }
    requests.push_back(r);
  }
  EngineStats serial_stats, overlap_stats;
  const auto first = run_engine_requests(gpu(), tok, requests, false, &serial_stats);
  ASSERT_EQ(first[1].size(), 20u);
  requests[1].params.stop_token_ids = {first[1][6]};
  const auto stop_at = std::find(first[1].begin(), first[1].end(), first[1][6]) - first[1].begin();
  const auto serial = run_engine_requests(gpu(), tok, requests, false, &serial_stats);
  const auto overlapped = run_engine_requests(gpu(), tok, requests, true, &overlap_stats);
  EXPECT_EQ(serial_stats.num_overlapped_steps, 0);
  EXPECT_GE(overlap_stats.num_overlapped_steps, 15);
  EXPECT_EQ(serial[1].size(), static_cast<size_t>(stop_at + 1));
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(overlapped[i], serial[i]) << "request " << i;
  std::printf("[overlap] %lld of %lld steps overlapped; 8 requests' tokens equal the serial run's\n",
              static_cast<long long>(overlap_stats.num_overlapped_steps),
              static_cast<long long>(overlap_stats.num_steps));
}

// Speculative decoding by prompt lookup on the CUDA runner: greedy drafts'
// rows picked on the device (Runner::picks_scored_rows), seeded ones
// sampled on the host from their rows' logits; the tokens are those of the
// same engine without drafts (a first difference only at an fp32 near-tie:
// a step with drafts runs the multi-token kernels where the one without
// ran the one-token ones), drafts are accepted, and no block leaks.
TEST(GpuModel, SpeculativeDraftsGiveTheTokensWithoutThem) {
  ErnieTiny tiny;
  ASSERT_NO_FATAL_FAILURE(load_ernie_tiny(tiny));
  Ernie45Model* cpu = tiny.cpu.get();
  auto gpu = [&] { return tiny_cuda_runner(*cpu, 256); };
  std::mt19937 rng(45);
  std::uniform_int_distribution<int32_t> tok_d(20, 1000);
  std::vector<Request> requests;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> snippet(4 + rng() % 4), p;
    for (auto& t : snippet) t = tok_d(rng);
    for (int r = 0; r < 4; ++r) p.insert(p.end(), snippet.begin(), snippet.end());
    Request r = greedy_request("s" + std::to_string(i), p, 40);
    if (i % 3 == 2) {
      r.params.temperature = 0.8;
      r.params.seed = 90 + static_cast<uint64_t>(i);
    }
    requests.push_back(r);
  }
  const SpeculativeConfig spec{.num_tokens = 4, .lookup_min = 1, .max_seqs = 8};
  EngineStats plain_stats, spec_stats;
  const auto plain = run_engine_requests(gpu(), *tiny.tok, requests, true, &plain_stats);
  const auto drafted = run_engine_requests(gpu(), *tiny.tok, requests, true, &spec_stats, spec);
  int identical = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_EQ(drafted[i].size(), 40u) << "request " << i;
    if (requests[i].params.temperature > 0) {  // a near-tie's other token changes every draw after it
      identical += drafted[i] == plain[i] ? 1 : 0;
      continue;
    }
    identical += expect_near_tie(*cpu, requests[i].prompt, plain[i], drafted[i], "request " + std::to_string(i))
                     ? 0 : 1;
  }
  EXPECT_GT(spec_stats.spec_accepted_tokens, 0);
  // The batch's steps are its slowest request's: a seeded one keeps few drafts. The greedy requests alone
  // (their prompts repeat, so their outputs soon do) finish in fewer steps with drafts.
  std::vector<Request> greedy;
  for (const Request& r : requests) {
    if (r.params.temperature > 0) continue;
    greedy.push_back(r);
  }
  EngineStats greedy_plain, greedy_spec;
  run_engine_requests(gpu(), *tiny.tok, greedy, true, &greedy_plain);
  run_engine_requests(gpu(), *tiny.tok, greedy, true, &greedy_spec, spec);
  EXPECT_LT(greedy_spec.num_steps, greedy_plain.num_steps);
  std::printf("[speculation] %d of %zu requests identical; %lld of %lld drafts accepted; %lld steps against %lld "
              "(the greedy requests alone: %lld against %lld)\n",
              identical, requests.size(), static_cast<long long>(spec_stats.spec_accepted_tokens),
              static_cast<long long>(spec_stats.spec_draft_tokens), static_cast<long long>(spec_stats.num_steps),
              static_cast<long long>(plain_stats.num_steps), static_cast<long long>(greedy_spec.num_steps),
              static_cast<long long>(greedy_plain.num_steps));
}

}  // namespace
}  // namespace tern
