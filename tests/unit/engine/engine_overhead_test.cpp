// The engine's host-side cost per step, with the forward pass taken out: a
// NullRunner (--device null's) answers every step at once with one plain
// piece, so Engine::step() time is all scheduling, post-processing and
// publishing. At batch 256 this work runs
// serially with the GPU, so it must stay small next to the decode kernel.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/runner.h"
#include "runners/null_runner.h"
#include "tokenizer/tokenizer.h"

namespace tern {
namespace {

const std::string kModelDir = std::string(TERN_TEST_DATA_DIR) + "/ernie-tiny";

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

TEST(EngineOverhead, DecodeStepAtBatch256) {
  // TERN_OVERHEAD_SEQS / TERN_OVERHEAD_TOKENS shrink the run for profiling.
  const int num_seqs = env_int("TERN_OVERHEAD_SEQS", 256);
  const int max_tokens = env_int("TERN_OVERHEAD_TOKENS", 200);
  const int prompt_len = 300;
  const int64_t block_size = 16;

  auto tok = Tokenizer::load(kModelDir);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  Tokenizer tokenizer = std::move(tok).value();

  const int64_t blocks_per_seq = (prompt_len + max_tokens + block_size - 1) / block_size;
  auto runner = std::make_unique<NullRunner>(tokenizer.vocab_size(), num_seqs * blocks_per_seq + 64, block_size,
                                             /*token=*/500, /*step_us=*/0);
  EngineConfig config;
  config.scheduler.max_num_seqs = num_seqs;
  config.scheduler.max_num_batched_tokens = 16384;
  config.scheduler.enable_prefix_caching = true;
  config.max_model_len = 4096;
  config.eos_ids = tokenizer.default_stop_ids();
  Engine engine(std::move(runner), tokenizer, config);

  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> piece(20, 1000);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < num_seqs; ++i) {
    Request r;
    r.id = "req-" + std::to_string(i);
    r.prompt.resize(prompt_len);
    for (auto& t : r.prompt) t = piece(rng);
    r.params.temperature = 0;
    r.params.max_tokens = max_tokens;
    r.params.ignore_eos = true;
    streams.push_back(std::make_shared<RequestStream>());
    ASSERT_TRUE(engine.add_request(std::move(r), streams.back()).is_ok());
  }

  std::vector<int64_t> got_tokens(static_cast<size_t>(num_seqs), 0);
  std::vector<int> finished(static_cast<size_t>(num_seqs), 0);
  std::vector<bool> length_finish(static_cast<size_t>(num_seqs), false);
  double decode_us = 0;
  int64_t decode_steps = 0;
  int64_t steps = 0;
  while (engine.has_work() && steps < 100000) {
    auto t0 = std::chrono::steady_clock::now();
    engine.step();
    auto t1 = std::chrono::steady_clock::now();
    ++steps;
    EngineStats s = engine.stats();
    // Steady-state decode: every sequence decodes one token this step.
    if (s.last_step_seqs == num_seqs && s.last_step_tokens == num_seqs) {
      decode_us += std::chrono::duration<double, std::micro>(t1 - t0).count();
      ++decode_steps;
    }
    for (size_t i = 0; i < streams.size(); ++i) {
      for (RequestOutput& e : streams[i]->drain()) {
        for (const SequenceOutput& so : e.sequences) {
          got_tokens[i] += static_cast<int64_t>(so.token_ids.size());
          if (so.finish) length_finish[i] = *so.finish == FinishReason::kLength;
        }
        if (e.finished) ++finished[i];
      }
    }
  }
  for (int i = 0; i < num_seqs; ++i) {
    EXPECT_EQ(got_tokens[static_cast<size_t>(i)], max_tokens) << "request " << i;
    EXPECT_EQ(finished[static_cast<size_t>(i)], 1) << "request " << i;
    EXPECT_TRUE(length_finish[static_cast<size_t>(i)]) << "request " << i;
  }
  EXPECT_EQ(engine.allocator().num_available(), engine.allocator().num_blocks());
  ASSERT_GT(decode_steps, 0);
  double per_step = decode_us / static_cast<double>(decode_steps);
  std::printf("[overhead] batch %d: %lld decode steps, %.1f us/step, %.3f us/seq (%lld steps total)\n", num_seqs,
              static_cast<long long>(decode_steps), per_step, per_step / num_seqs, static_cast<long long>(steps));
}

}  // namespace
}  // namespace tern
