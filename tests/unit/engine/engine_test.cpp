// The engine end to end on the tiny HF-made model: batching, chunked prefill,
// preemption, prefix caching, n > 1, stop rules and cancellation must be
// invisible in the outputs and must never lose a KV block.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_client.h"
#include "engine/runner.h"
#include "model/ernie4_5/ernie4_5_model.h"
#include "runners/cpu_runner.h"
#include "runners/sequence_chunk.h"
#include "support/device_sampling_runner.h"
#include "support/ernie_tiny.h"
#include "support/requests.h"
#include "tokenizer/tokenizer.h"

namespace tern {
namespace {

using testing::DeviceSamplingCpuRunner;
using testing::greedy_request;

struct Fixture : testing::ErnieTiny {
  std::unique_ptr<Engine> make_engine(int64_t num_blocks, int64_t block_size = 16, int64_t max_tokens_per_step = 256,
                                      int64_t max_seqs = 64, bool prefix_caching = true) {
    const ModelConfig& c = model->config();
    int64_t bytes = num_blocks * PagedKvPool::bytes_per_block(c.num_layers, c.kv_dim(), block_size);
    auto runner = CpuRunner::create(*model, block_size, bytes);
    EXPECT_TRUE(runner.is_ok()) << runner.status().to_string();
    EngineConfig config;
    config.scheduler.max_num_seqs = max_seqs;
    config.scheduler.max_num_batched_tokens = max_tokens_per_step;
    config.scheduler.enable_prefix_caching = prefix_caching;
    config.max_model_len = 1024;
    config.eos_ids = tokenizer->default_stop_ids();
    return std::make_unique<Engine>(std::move(runner).value(), *tokenizer, config);
  }

  // Greedy continuation computed alone with the contiguous KV cache path.
  std::vector<int32_t> greedy_alone(const std::vector<int32_t>& prompt, int64_t steps) {
    KvCache cache = model->make_cache(static_cast<int64_t>(prompt.size()) + steps);
    std::vector<float> logits(static_cast<size_t>(model->config().vocab_size));
    EXPECT_TRUE(model->forward(prompt, cache, logits).is_ok());
    std::vector<int32_t> out;
    for (int64_t i = 0; i < steps; ++i) {
      out.push_back(argmax(logits));
      if (i + 1 < steps) {
        int32_t t[1] = {out.back()};
        EXPECT_TRUE(model->forward(t, cache, logits).is_ok());
      }
    }
    return out;
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t len) {
  std::uniform_int_distribution<int32_t> tok(20, 1000);  // plain pieces, no special tokens
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (auto& t : p) t = tok(rng);
  return p;
}

struct Collected {
  std::map<int, std::vector<int32_t>> tokens;  // by sequence index
  std::map<int, std::string> text;
  std::map<int, FinishReason> finish;
  bool finished = false;
  Status error;
  int events = 0;
};

Collected collect(RequestStream& stream) {
  Collected c;
  for (auto& e : stream.drain()) {
    ++c.events;
    for (auto& s : e.sequences) {
      c.tokens[s.index].insert(c.tokens[s.index].end(), s.token_ids.begin(), s.token_ids.end());
      c.text[s.index] += s.text;
      if (s.finish) c.finish[s.index] = *s.finish;
    }
    if (e.finished) c.finished = true;
    if (!e.error.is_ok()) c.error = e.error;
  }
  return c;
}

// An engine config for the tiny model: up to 16 sequences, 64 tokens a step.
EngineConfig small_config(const Fixture& f, int64_t max_model_len) {
  EngineConfig config;
  config.scheduler.max_num_seqs = 16;
  config.scheduler.max_num_batched_tokens = 64;
  config.max_model_len = max_model_len;
  config.eos_ids = f.tokenizer->default_stop_ids();
  return config;
}

void run_to_completion(Engine& engine) {
  for (int guard = 0; engine.has_work(); ++guard) {
    ASSERT_LT(guard, 100000) << "engine made no progress";
    engine.step();
  }
}

// --kv-cache-dtype fp8 on the CPU runner: the same bytes hold four times
// the fp32 blocks, and an engine over it serves greedy requests to the end
// (the fp8 pool's arithmetic is tested in model/forward_batch_test.cpp).
TEST(Engine, Fp8KvCacheHoldsFourTimesTheBlocks) {
  Fixture& f = fixture();
  const ModelConfig& c = f.model->config();
  RunnerOptions options;
  options.block_size = 16;
  options.kv_cache_bytes = 64 * PagedKvPool::bytes_per_block(c.num_layers, c.kv_dim(), 16);
  auto f32 = CpuRunner::create(*f.model, options);
  options.kv_cache_dtype = KvCacheDType::kFp8E4m3;
  auto fp8 = CpuRunner::create(*f.model, options);
  ASSERT_TRUE(f32.is_ok() && fp8.is_ok());
  EXPECT_EQ(f32.value()->num_kv_blocks(), 64);
  EXPECT_EQ(fp8.value()->num_kv_blocks(), 256);

  Engine engine(std::move(fp8).value(), *f.tokenizer, small_config(f, 512));
  std::mt19937 rng(5);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 3; ++i) {
    streams.push_back(std::make_shared<RequestStream>());
    ASSERT_TRUE(engine.add_request(greedy_request("f" + std::to_string(i), random_prompt(rng, 20 + 7 * i), 12),
                                   streams.back()).is_ok());
  }
  run_to_completion(engine);
  for (auto& s : streams) {
    Collected got = collect(*s);
    EXPECT_TRUE(got.finished && got.error.is_ok()) << got.error.to_string();
    EXPECT_EQ(got.tokens[0].size(), 12u);
  }
}

TEST(Engine, BatchingIsInvisible) {
  auto& f = fixture();
  auto engine = f.make_engine(/*num_blocks=*/512, /*block_size=*/16, /*max_tokens_per_step=*/96);
  std::mt19937 rng(1);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> lengths;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 32; ++i) {
    prompts.push_back(random_prompt(rng, 1 + static_cast<int64_t>(rng() % 70)));
    lengths.push_back(4 + static_cast<int64_t>(rng() % 20));
    streams.push_back(std::make_shared<RequestStream>());
    ASSERT_TRUE(engine->add_request(greedy_request("r" + std::to_string(i), prompts[i], lengths[i]), streams[i]).is_ok());
  }
  run_to_completion(*engine);
  for (int i = 0; i < 32; ++i) {
    Collected c = collect(*streams[i]);
    ASSERT_TRUE(c.finished);
    EXPECT_EQ(c.tokens[0], f.greedy_alone(prompts[i], lengths[i])) << "request " << i;
    EXPECT_EQ(c.finish[0], FinishReason::kLength);
  }
  EXPECT_EQ(engine->allocator().num_used(), 0);
}

TEST(Engine, PreemptionIsInvisible) {
  auto& f = fixture();
  // 12 blocks of 4 tokens: far less than 16 sequences need at once.
  auto engine = f.make_engine(/*num_blocks=*/12, /*block_size=*/4, /*max_tokens_per_step=*/64);
  std::mt19937 rng(2);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 16; ++i) {
    prompts.push_back(random_prompt(rng, 3 + static_cast<int64_t>(rng() % 20)));
    streams.push_back(std::make_shared<RequestStream>());
    ASSERT_TRUE(engine->add_request(greedy_request("p" + std::to_string(i), prompts[i], 16), streams[i]).is_ok());
  }
  run_to_completion(*engine);
  for (int i = 0; i < 16; ++i) {
    Collected c = collect(*streams[i]);
    EXPECT_EQ(c.tokens[0], f.greedy_alone(prompts[i], 16)) << "request " << i;
  }
  EXPECT_GT(engine->stats().num_preemptions, 5);
  EXPECT_EQ(engine->allocator().num_used(), 0);
}

TEST(Engine, PrefixCacheHitsGiveTheSameTokens) {
  auto& f = fixture();
  auto engine = f.make_engine(256, 4);
  std::mt19937 rng(3);
  auto shared = random_prompt(rng, 40);
  auto a = shared, b = shared;
  a.push_back(100);
  b.push_back(200);
  auto sa = std::make_shared<RequestStream>(), sb = std::make_shared<RequestStream>();
  ASSERT_TRUE(engine->add_request(greedy_request("a", a, 8), sa).is_ok());
  run_to_completion(*engine);
  ASSERT_TRUE(engine->add_request(greedy_request("b", b, 8), sb).is_ok());
  run_to_completion(*engine);
  EXPECT_EQ(collect(*sa).tokens[0], f.greedy_alone(a, 8));
  EXPECT_EQ(collect(*sb).tokens[0], f.greedy_alone(b, 8));
  EXPECT_GE(engine->stats().prefix_cache_hits, 40);  // all ten full blocks of the shared part
}

TEST(Engine, SeededSamplingIgnoresBatchComposition) {
  auto& f = fixture();
  auto sampled = [&](int companions) {
    auto engine = f.make_engine(512, 16);
    std::mt19937 rng(4);
    Request r;
    r.id = "seeded";
    r.prompt = random_prompt(rng, 12);
    r.params.temperature = 1.0;
    r.params.seed = 1234;
    r.params.max_tokens = 24;
    r.params.ignore_eos = true;
    auto s = std::make_shared<RequestStream>();
    for (int i = 0; i < companions; ++i) {
      Request other = r;
      other.id = "other" + std::to_string(i);
      other.params.seed.reset();
      other.prompt = random_prompt(rng, 5 + i);
      EXPECT_TRUE(engine->add_request(other, std::make_shared<RequestStream>()).is_ok());
    }
    EXPECT_TRUE(engine->add_request(r, s).is_ok());
    run_to_completion(*engine);
    return collect(*s).tokens[0];
  };
  auto alone = sampled(0);
  EXPECT_EQ(alone.size(), 24u);
  EXPECT_EQ(sampled(7), alone);
  EXPECT_EQ(sampled(20), alone);
}

// Penalised, biased greedy requests sampled "on the device" give exactly the
// host engine's tokens; logprobs requests and the first row of an n > 1
// request stay on the host.
TEST(Engine, DeviceSampledRowsGiveTheHostTokens) {
  auto& f = fixture();
  const ModelConfig& c = f.model->config();
  int sampled_rows = -1, host_rows = -1;  // the device run's, read before its runner goes
  auto run = [&](bool device) {
    std::unique_ptr<Runner> runner;
    DeviceSamplingCpuRunner* seen = nullptr;
    if (device) {
      auto wrapped = std::make_unique<DeviceSamplingCpuRunner>(*f.model, 256);
      seen = wrapped.get();
      runner = std::move(wrapped);
    } else {
      auto inner = CpuRunner::create(*f.model, 16, 256 * PagedKvPool::bytes_per_block(c.num_layers, c.kv_dim(), 16));
      EXPECT_TRUE(inner.is_ok());
      runner = std::move(inner).value();
    }
    Engine engine(std::move(runner), *f.tokenizer, small_config(f, 1024));
    std::mt19937 rng(21);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 6; ++i) {
      Request r = greedy_request("p" + std::to_string(i), random_prompt(rng, 5 + 9 * i), 12);
      r.params.repetition_penalty = 1.4;
      r.params.frequency_penalty = 0.5;
      r.params.presence_penalty = 0.25;
      r.params.logit_bias[20 + 7 * i] = 3.0;
      r.params.min_tokens = 4;
      streams.push_back(std::make_shared<RequestStream>());
      EXPECT_TRUE(engine.add_request(r, streams.back()).is_ok());
    }
    Request lp = greedy_request("logprobs", random_prompt(rng, 7), 5);
    lp.params.repetition_penalty = 1.2;
    lp.params.logprobs = 2;
    streams.push_back(std::make_shared<RequestStream>());
    EXPECT_TRUE(engine.add_request(lp, streams.back()).is_ok());
    Request n3 = greedy_request("n3", random_prompt(rng, 9), 6);
    n3.n = 3;
    n3.params.temperature = 1.0;
    n3.params.seed = 5;
    streams.push_back(std::make_shared<RequestStream>());
    EXPECT_TRUE(engine.add_request(n3, streams.back()).is_ok());
    run_to_completion(engine);
    EXPECT_EQ(engine.allocator().num_used(), 0);
    std::vector<std::vector<int32_t>> out;
    for (size_t i = 0; i + 1 < streams.size(); ++i) out.push_back(collect(*streams[i]).tokens[0]);
    if (seen != nullptr) sampled_rows = seen->sampled_rows, host_rows = seen->host_rows;
    return out;
  };
  const auto host = run(false);
  const auto device = run(true);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(device[i], host[i]) << "penalised request " << i;
  EXPECT_EQ(device[6], host[6]) << "logprobs request";
  // 6 x 12 penalised rows and the n = 3 request's later rows on the device;
  // the logprobs rows (5) and the n = 3 request's first row on the host.
  EXPECT_GE(sampled_rows, 6 * 12 + 3 * 5);
  EXPECT_EQ(host_rows, 5 + 1);
}

// Overlap scheduling is invisible in the outputs: the same requests (greedy,
// logit bias, min_tokens, penalties, stop strings and stop token ids hit
// mid-generation, logprobs, n = 3, lengths cut by max_model_len) give the
// same tokens, texts and finish reasons with steps overlapped as without,
// with a pool small enough to preempt, and with a request aborted while a
// step that names it is in flight; no KV block is lost either way.
TEST(Engine, OverlapSchedulingIsInvisible) {
  auto& f = fixture();
  std::mt19937 prompts_rng(33);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 12; ++i) prompts.push_back(random_prompt(prompts_rng, 3 + 7 * i));
  // A stop token and a stop string that greedy decoding reaches mid-way.
  const auto stop_run = f.greedy_alone(prompts[1], 12);
  const int32_t stop_token = stop_run[4];
  const std::string stop_text = f.tokenizer->decode(f.greedy_alone(prompts[2], 16));
  ASSERT_GE(stop_text.size(), 8u);
  std::string stop_string = stop_text.substr(stop_text.size() / 2, 3);
  while (!stop_string.empty() && (static_cast<unsigned char>(stop_string[0]) & 0xc0) == 0x80) stop_string.erase(0, 1);

  struct Run {
    std::vector<Collected> out;
    EngineStats stats;
    int fed = 0, host_rows = 0;
  };
  auto run = [&](bool overlap, int64_t num_blocks) {
    auto owned = std::make_unique<DeviceSamplingCpuRunner>(*f.model, num_blocks, overlap);
    DeviceSamplingCpuRunner* runner = owned.get();
    Engine engine(std::move(owned), *f.tokenizer, small_config(f, 96));
    std::vector<std::shared_ptr<RequestStream>> streams;
    auto add = [&](const Request& r) {
      streams.push_back(std::make_shared<RequestStream>());
      EXPECT_TRUE(engine.add_request(r, streams.back()).is_ok()) << r.id;
    };
    for (int i = 0; i < 12; ++i) {
      Request r = greedy_request("r" + std::to_string(i), prompts[static_cast<size_t>(i)], 5 + 4 * i);
      switch (i) {
        case 1: r.params.stop_token_ids = {stop_token}; break;
        case 2: r.params.stop = {stop_string}; break;
        case 3: r.params.logit_bias[40] = 2.5; break;
        case 4: r.params.min_tokens = 6; r.params.stop_token_ids = {f.greedy_alone(prompts[4], 3)[1]}; break;
        case 5: r.params.repetition_penalty = 1.3; r.params.frequency_penalty = 0.4; break;
        case 6: r.params.logprobs = 1; r.params.max_tokens = 3; break;  // its steps are not overlapped
        case 7: r.n = 3; r.params.temperature = 0.8; r.params.seed = 9; r.params.top_k = 1; break;
        case 8: r.params.temperature = 0.7; r.params.seed = 4; r.params.top_k = 1; break;
        default: break;  // 0, 9, 10, 11 plain; 10 and 11 run into max_model_len
      }
      add(r);
    }
    // Abort request 9 after a few steps: overlapped, a step naming it is then in flight.
    for (int i = 0; i < 6 && engine.has_work(); ++i) engine.step();
    engine.abort_request("r9");
    run_to_completion(engine);
    EXPECT_EQ(engine.allocator().num_used(), 0) << "overlap " << overlap;
    Run result;
    for (auto& st : streams) result.out.push_back(collect(*st));
    result.stats = engine.stats();
    result.fed = runner->fed_chunks;
    result.host_rows = runner->host_rows;
    return result;
  };
  for (int64_t blocks : {256, 14}) {
    const Run plain = run(false, blocks);
    const Run overlapped = run(true, blocks);
    EXPECT_EQ(plain.stats.num_overlapped_steps, 0);
    EXPECT_GT(overlapped.stats.num_overlapped_steps, 10) << blocks << " blocks";
    EXPECT_GT(overlapped.fed, 30) << blocks << " blocks";
    EXPECT_EQ(plain.fed, 0);
    if (blocks == 14) {
      EXPECT_GT(overlapped.stats.num_preemptions, 0) << "the small pool should preempt";
    }
    for (size_t i = 0; i < plain.out.size(); ++i) {
      const Collected& a = plain.out[i];
      const Collected& b = overlapped.out[i];
      EXPECT_TRUE(a.finished && b.finished) << "request " << i;
      EXPECT_TRUE(a.error.is_ok() && b.error.is_ok()) << "request " << i << ": " << b.error.to_string();
      if (i == 9) {
        EXPECT_EQ(b.finish.at(0), FinishReason::kAbort);
        continue;
      }
      EXPECT_EQ(a.tokens, b.tokens) << "request " << i << ", " << blocks << " blocks";
      EXPECT_EQ(a.text, b.text) << "request " << i;
      EXPECT_EQ(a.finish, b.finish) << "request " << i;
    }
    EXPECT_EQ(overlapped.out[1].finish.at(0), FinishReason::kStop);
    const auto first_stop = std::find(stop_run.begin(), stop_run.end(), stop_token) - stop_run.begin();
    EXPECT_EQ(overlapped.out[1].tokens.at(0).size(), static_cast<size_t>(first_stop + 1));
    EXPECT_EQ(overlapped.out[2].finish.at(0), FinishReason::kStop);
    EXPECT_EQ(overlapped.out[11].finish.at(0), FinishReason::kLength);
    EXPECT_EQ(overlapped.out[7].tokens.size(), 3u);
  }
}

// A sequence whose next step needs its tokens' values (penalties) is not
// held back by overlap: while it runs, steps are collected at once, so it
// takes a token every step and the run takes as many steps as serially.
TEST(Engine, OverlapNeverSkipsAStepOfAPenalisedSequence) {
  auto& f = fixture();
  std::mt19937 rng(35);
  const auto prompt_a = random_prompt(rng, 10), prompt_b = random_prompt(rng, 10);
  auto run = [&](bool overlap) {
    Engine engine(std::make_unique<DeviceSamplingCpuRunner>(*f.model, 64, overlap), *f.tokenizer,
                  small_config(f, 256));
    Request a = greedy_request("penalised", prompt_a, 12);
    a.params.repetition_penalty = 1.3;
    Request b = greedy_request("plain", prompt_b, 12);
    auto sa = std::make_shared<RequestStream>(), sb = std::make_shared<RequestStream>();
    EXPECT_TRUE(engine.add_request(a, sa).is_ok());
    EXPECT_TRUE(engine.add_request(b, sb).is_ok());
    run_to_completion(engine);
    return std::make_pair(engine.stats().num_steps, collect(*sa).tokens[0]);
  };
  const auto serial = run(false), overlapped = run(true);
  EXPECT_EQ(overlapped.second, serial.second);
  EXPECT_EQ(overlapped.first, serial.first) << "the penalised sequence skipped steps";
}

// A launch that fails while another step is in flight: that step is still
// collected (its tokens delivered), the failed step's requests end with the
// error, the rest go on, and no KV block is lost.
TEST(Engine, AFailedLaunchWithAStepInFlightEndsOnlyItsRequests) {
  auto& f = fixture();
  std::mt19937 rng(36);
  auto owned = std::make_unique<DeviceSamplingCpuRunner>(*f.model, 64, /*overlap=*/true);
  owned->fail_launch = 6;
  Engine engine(std::move(owned), *f.tokenizer, small_config(f, 256));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 3; ++i) {
    streams.push_back(std::make_shared<RequestStream>());
    ASSERT_TRUE(engine.add_request(greedy_request("f" + std::to_string(i), random_prompt(rng, 6), 12),
                                   streams.back()).is_ok());
  }
  run_to_completion(engine);
  EXPECT_EQ(engine.allocator().num_used(), 0);
  EXPECT_GT(engine.stats().num_overlapped_steps, 0);
  for (auto& s : streams) {
    const Collected c = collect(*s);
    EXPECT_TRUE(c.finished);
    EXPECT_FALSE(c.error.is_ok()) << "every request was in the failed step";
    EXPECT_EQ(c.finish.at(0), FinishReason::kError);
    EXPECT_GE(c.tokens.at(0).size(), 3u) << "the tokens of the steps before were delivered";
  }
  // A new request after the failure runs to the end.
  auto s = std::make_shared<RequestStream>();
  ASSERT_TRUE(engine.add_request(greedy_request("after", random_prompt(rng, 6), 5), s).is_ok());
  run_to_completion(engine);
  EXPECT_EQ(collect(*s).tokens.at(0).size(), 5u);
  EXPECT_EQ(engine.allocator().num_used(), 0);
}

TEST(Engine, NGreaterThanOneForksFromOnePrefill) {
  auto& f = fixture();
  auto engine = f.make_engine(256, 4);
  Request r;
  r.id = "n4";
  std::mt19937 rng(5);
  r.prompt = random_prompt(rng, 10);  // a partial last block: forks must copy it before writing
  r.n = 4;
  r.params.temperature = 1.0;
  r.params.seed = 99;
  r.params.max_tokens = 12;
  r.params.ignore_eos = true;
  auto s = std::make_shared<RequestStream>();
  ASSERT_TRUE(engine->add_request(r, s).is_ok());
  run_to_completion(*engine);
  Collected c = collect(*s);
  ASSERT_EQ(c.tokens.size(), 4u);
  std::set<std::vector<int32_t>> distinct;
  for (auto& [i, toks] : c.tokens) {
    EXPECT_EQ(toks.size(), 12u);
    distinct.insert(toks);
  }
  EXPECT_GT(distinct.size(), 1u);
  EXPECT_EQ(engine->allocator().num_used(), 0);
  EXPECT_EQ(engine->stats().prompt_tokens_total, 10);
}

TEST(Engine, StopStringsEndTheSequenceAndNeverAppear) {
  auto& f = fixture();
  // Find a string the greedy continuation will produce, then ask to stop on it.
  std::vector<int32_t> prompt = f.tokenizer->encode("你好");
  auto greedy = f.greedy_alone(prompt, 20);
  std::string full = f.tokenizer->decode(greedy);
  ASSERT_GT(full.size(), 6u);
  // Two whole characters from the middle (a client's stop string is valid UTF-8).
  auto is_cont = [&](size_t i) { return i < full.size() && (static_cast<unsigned char>(full[i]) & 0xc0) == 0x80; };
  size_t from = full.size() / 2;
  while (is_cont(from)) ++from;
  size_t to = from;
  for (int chars = 0; chars < 2 && to < full.size(); ++chars) {
    ++to;
    while (is_cont(to)) ++to;
  }
  std::string stop = full.substr(from, to - from);
  ASSERT_FALSE(stop.empty());
  auto engine = f.make_engine(128, 16);
  Request r = greedy_request("s", prompt, 20);
  r.params.stop = {stop};
  auto s = std::make_shared<RequestStream>();
  ASSERT_TRUE(engine->add_request(r, s).is_ok());
  run_to_completion(*engine);
  Collected c = collect(*s);
  EXPECT_EQ(c.finish[0], FinishReason::kStop);
  EXPECT_EQ(c.text[0].find(stop), std::string::npos);
  EXPECT_EQ(c.text[0], full.substr(0, full.find(stop)));
}

TEST(Engine, CancellingAThousandRequestsLeavesNoBlockInUse) {
  auto& f = fixture();
  auto engine = f.make_engine(64, 4, 128, 32);
  std::mt19937 rng(6);
  std::vector<std::string> live;
  int next = 0;
  for (int step = 0; step < 3000 && (next < 1000 || engine->has_work()); ++step) {
    // Add a few, cancel a few at random moments (queued, in prefill, decoding).
    for (int k = 0; k < 3 && next < 1000; ++k) {
      Request r = greedy_request("c" + std::to_string(next++), random_prompt(rng, 1 + rng() % 30),
                                 1 + static_cast<int64_t>(rng() % 30));
      live.push_back(r.id);
      ASSERT_TRUE(engine->add_request(r, std::make_shared<RequestStream>()).is_ok());
    }
    for (int k = 0; k < 3 && !live.empty(); ++k) {
      size_t i = rng() % live.size();
      engine->abort_request(live[i]);
      live.erase(live.begin() + static_cast<int64_t>(i));
    }
    engine->step();
  }
  for (auto& id : live) engine->abort_request(id);
  run_to_completion(*engine);
  EXPECT_FALSE(engine->has_work());
  EXPECT_EQ(engine->allocator().num_used(), 0);
  EXPECT_GT(engine->stats().finished_abort, 500);
}

TEST(Engine, PriorityOrdersWaitingRequests) {
  auto& f = fixture();
  // One sequence at a time: the order in which requests finish is the order they ran.
  auto engine = f.make_engine(64, 16, 256, /*max_seqs=*/1);
  std::mt19937 rng(8);
  std::vector<std::pair<std::string, int>> submitted = {{"late-low", 5}, {"urgent", -1}, {"normal", 0}, {"low", 5}};
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  for (auto& [id, priority] : submitted) {
    Request r = greedy_request(id, random_prompt(rng, 4), 3);
    r.priority = priority;
    streams[id] = std::make_shared<RequestStream>();
    ASSERT_TRUE(engine->add_request(r, streams[id]).is_ok());
  }
  std::vector<std::string> order;
  while (engine->has_work()) {
    engine->step();
    for (auto& [id, s] : streams)
      if (s->done() && std::find(order.begin(), order.end(), id) == order.end()) order.push_back(id);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"urgent", "normal", "late-low", "low"}));
}

// An engine with steps of up to 256 tokens, 32 while streams decode
// (decode_step_tokens), and `long_step_max_streams`; greedy requests of 40
// tokens added by id, each checked at the end against the tokens it gets alone.
struct StepBudgetRun {
  StepBudgetRun(int64_t long_step_max_streams, uint32_t seed) : f(fixture()), rng(seed) {
    EngineConfig config = small_config(f, 512);
    config.scheduler.max_num_batched_tokens = 256;
    config.scheduler.decode_step_tokens = 32;
    config.scheduler.long_step_max_streams = long_step_max_streams;
    const ModelConfig& c = f.model->config();
    auto runner = CpuRunner::create(*f.model, 16, 256 * PagedKvPool::bytes_per_block(c.num_layers, c.kv_dim(), 16));
    EXPECT_TRUE(runner.is_ok()) << runner.status().to_string();
    engine = std::make_unique<Engine>(std::move(runner).value(), *f.tokenizer, config);
  }
  void add(const std::string& id, int64_t prompt_len) {
    prompts[id] = random_prompt(rng, prompt_len);
    streams[id] = std::make_shared<RequestStream>();
    ASSERT_TRUE(engine->add_request(greedy_request(id, prompts[id], 40), streams[id]).is_ok());
  }
  int64_t step() {
    engine->step();
    return engine->stats().last_step_tokens;
  }
  void finish_and_check() {
    run_to_completion(*engine);
    for (auto& [id, stream] : streams) {
      Collected got = collect(*stream);
      EXPECT_EQ(got.tokens[0], f.greedy_alone(prompts[id], 40)) << id;
    }
  }
  Fixture& f;
  std::mt19937 rng;
  std::unique_ptr<Engine> engine;
  std::map<std::string, std::vector<int32_t>> prompts;
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
};

// --decode-step-tokens: a step that carries decoding streams holds at most
// that many tokens, unless the sequences waiting for prefill outnumber the
// streams: then up to max_num_batched_tokens. Either way the tokens are the
// ones each request gets alone.
TEST(Engine, DecodingStreamsBoundTheStepUntilOutnumbered) {
  StepBudgetRun run(/*long_step_max_streams=*/0, 21);
  // Nothing decodes yet: the whole budget.
  run.add("first", 10);
  EXPECT_EQ(run.step(), 10);
  // One stream decodes, one prompt waits: the step stays at 32 tokens (its token and 31 of the prompt).
  run.add("second", 200);
  EXPECT_EQ(run.step(), 32);
  // Three more prompts: four sequences need their prefill, one decodes: up to 256 again.
  for (const char* id : {"third", "fourth", "fifth"}) run.add(id, 100);
  EXPECT_EQ(run.step(), 256);
  run.finish_and_check();
}

// --long-step-max-streams: past that many decoding streams, a step keeps to
// decode_step_tokens even while the prompts waiting outnumber the streams
// (with no bound, the same steps take 256 tokens).
TEST(Engine, LongStepsHoldUpAtMostTheirStreams) {
  for (const int64_t bound : {int64_t{2}, int64_t{0}}) {
    SCOPED_TRACE("long_step_max_streams " + std::to_string(bound));
    StepBudgetRun run(bound, 22);
    // Two short prompts in one step, then both decode.
    run.add("a", 8);
    run.add("b", 8);
    EXPECT_EQ(run.step(), 16);
    // Two streams decode, eight prompts wait: within the bound, the whole budget.
    for (const char* id : {"c", "d", "e", "f", "g", "h", "i", "j"}) run.add(id, 100);
    EXPECT_EQ(run.step(), 256);
    // Four streams decode now (a, b and the two whole prompts) and six prompts need their prefill, more
    // than the streams; past the bound the step keeps to 32 tokens.
    EXPECT_EQ(run.step(), bound > 0 ? 32 : 256);
    run.finish_and_check();
  }
}

TEST(Engine, RejectsWhatCanNeverRun) {
  auto& f = fixture();
  auto engine = f.make_engine(4, 4);  // 16 tokens of KV in all
  auto s = std::make_shared<RequestStream>();
  Status too_big = engine->add_request(greedy_request("big", std::vector<int32_t>(10, 50), 20), s);
  EXPECT_EQ(too_big.code(), ErrorCode::kResourceExhausted);
  Status bad_id = engine->add_request(greedy_request("bad", {50, 999999}, 2), s);
  EXPECT_EQ(bad_id.code(), ErrorCode::kInvalidArgument);
  Status empty = engine->add_request(greedy_request("empty", {}, 2), s);
  EXPECT_EQ(empty.code(), ErrorCode::kInvalidArgument);
  EXPECT_FALSE(engine->has_work());
}

TEST(EngineClient, StreamsFromTheEngineThreadAndCancels) {
  auto& f = fixture();
  EngineClient client(f.make_engine(256, 16), /*max_queued_requests=*/8);
  std::mt19937 rng(7);
  auto prompt = random_prompt(rng, 9);
  auto stream = client.submit(greedy_request("t1", prompt, 10));
  ASSERT_TRUE(stream.is_ok());
  std::vector<int32_t> got;
  for (;;) {
    auto e = (*stream)->next(std::chrono::seconds(30));
    ASSERT_TRUE(e.has_value()) << "no event within 30 s";
    for (auto& s : e->sequences) got.insert(got.end(), s.token_ids.begin(), s.token_ids.end());
    if (e->finished) break;
  }
  EXPECT_EQ(got, f.greedy_alone(prompt, 10));

  auto long_one = client.submit(greedy_request("t2", prompt, 900));
  ASSERT_TRUE(long_one.is_ok());
  client.cancel("t2");
  bool aborted = false;
  for (int i = 0; i < 10000 && !aborted; ++i) {
    auto e = (*long_one)->next(std::chrono::seconds(30));
    ASSERT_TRUE(e.has_value());
    for (auto& s : e->sequences) aborted |= s.finish == FinishReason::kAbort;
    if (e->finished) break;
  }
  EXPECT_TRUE(aborted);
  for (int i = 0; i < 100 && client.stats().kv_cache_usage > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(client.stats().kv_cache_usage, 0.0);
  EXPECT_EQ(client.num_unfinished(), 0);
}

}  // namespace
}  // namespace tern
