// Speculative decoding by prompt lookup: the drafts' proposal, the config's
// parsing, and the engine with drafts against the engine without them on
// the tiny model. Drafts must be invisible in every output (tokens, text,
// logprobs, finish reasons, seeded draws) and must never leak a KV block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/speculation.h"
#include "model/ernie4_5/ernie4_5_model.h"
#include "runners/cpu_runner.h"
#include "support/device_sampling_runner.h"
#include "support/ernie_tiny.h"
#include "tokenizer/tokenizer.h"

namespace tern {
namespace {

TEST(NgramDrafts, TakesWhatFollowedTheLatestLongestMatch) {
  SpeculativeConfig c{.num_tokens = 3, .lookup_min = 2, .lookup_max = 3};
  // The suffix 7 8 9 occurred at 1 (followed by 1 2 3) and at 6 (followed by 4 5): the latest wins.
  const std::vector<int32_t> t{0, 7, 8, 9, 1, 2, 7, 8, 9, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(propose_ngram_drafts(t, c, 3), (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(propose_ngram_drafts(t, c, 1), (std::vector<int32_t>{4}));
  EXPECT_TRUE(propose_ngram_drafts(t, c, 0).empty());
  // Only a 2-token match (8 9): the 3-token suffix 5 8 9 never occurred before.
  const std::vector<int32_t> u{8, 9, 1, 2, 5, 8, 9};
  EXPECT_EQ(propose_ngram_drafts(u, c, 3), (std::vector<int32_t>{1, 2, 5}));
  // Past the end of the tokens the drafts go on as the loop they are in.
  const std::vector<int32_t> v{3, 4, 3, 4};
  EXPECT_EQ(propose_ngram_drafts(v, c, 3), (std::vector<int32_t>{3, 4, 3}));
  EXPECT_EQ(propose_ngram_drafts(std::vector<int32_t>{9, 9, 9}, c, 3), (std::vector<int32_t>{9, 9, 9}));
  EXPECT_EQ(propose_ngram_drafts(std::vector<int32_t>{1, 5, 6, 7, 5, 6}, c, 3), (std::vector<int32_t>{7, 5, 6}));
  // No match of at least lookup_min tokens; too short a sequence.
  EXPECT_TRUE(propose_ngram_drafts(std::vector<int32_t>{1, 2, 3, 4, 5, 3}, c, 3).empty());
  EXPECT_TRUE(propose_ngram_drafts(std::vector<int32_t>{1}, c, 3).empty());
  c.lookup_min = 1;
  EXPECT_EQ(propose_ngram_drafts(std::vector<int32_t>{1, 2, 3, 4, 5, 3}, c, 3), (std::vector<int32_t>{4, 5, 3}));
}

TEST(SpeculativeConfig, ParsesVllmJsonAndRefusesTheRest) {
  auto c = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 3})");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->num_tokens, 5);
  EXPECT_EQ(c->lookup_max, 3);
  EXPECT_EQ(c->lookup_min, 2);
  EXPECT_EQ(c->max_seqs, 4);
  EXPECT_FALSE(c->max_seqs_given);
  // Unnamed, disable_by_batch_size is the device's: 1 on a GPU (one sequence's drafts run in the decode kernel).
  EXPECT_EQ(with_device_default(*c, true).max_seqs, kSpeculativeMaxSeqsGpu);
  EXPECT_EQ(with_device_default(*c, false).max_seqs, kSpeculativeMaxSeqs);
  c = parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 1, "disable_by_batch_size": 9})");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->lookup_min, 1);
  EXPECT_EQ(c->max_seqs, 9);
  EXPECT_EQ(with_device_default(*c, true).max_seqs, 9) << "named, it holds on every device";
  const std::vector<std::pair<std::string, std::string>> bad{
      {"not json", "JSON object"},
      {"[1]", "JSON object"},
      {R"({"num_speculative_tokens": 4})", "method is required"},
      {R"({"method": "eagle", "num_speculative_tokens": 4})", "ngram"},
      {R"({"method": "ngram"})", "num_speculative_tokens"},
      {R"({"method": "ngram", "num_speculative_tokens": 0})", "num_speculative_tokens"},
      {R"({"method": "ngram", "num_speculative_tokens": 17})", "1 to 16"},
      {R"({"method": "ngram", "num_speculative_tokens": 2.5})", "integer"},
      {R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 5})", "min <= max"},
      {R"({"method": "ngram", "num_speculative_tokens": 4, "model": "x"})", "unknown key 'model'"},
  };
  for (const auto& [text, says] : bad) {
    auto r = parse_speculative_config(text);
    ASSERT_FALSE(r.is_ok()) << text;
    EXPECT_NE(r.status().message().find(says), std::string::npos) << text << ": " << r.status().to_string();
  }
}

testing::ErnieTiny& tiny() {
  static testing::ErnieTiny m;
  return m;
}

// The CPU runner, but picking the argmax of every row of a greedy
// sequence's drafts itself, as the CUDA runner does on the device
// (Runner::picks_scored_rows): those rows leave the logits for scored_picks.
class PickingRunner final : public Runner {
 public:
  explicit PickingRunner(std::unique_ptr<Runner> inner) : inner_(std::move(inner)) {}
  Status execute(const StepPlan& plan, StepOutput& out) override {
    TERN_RETURN_IF_ERROR(inner_->execute(plan, out));
    const auto vocab = static_cast<size_t>(vocab_size());
    StepOutput kept;
    size_t want = 0, row = 0, scored = 0;
    for (const ScheduledChunk& c : plan.chunks) {
      // The CPU runner picks no row itself: each want_logits chunk has its row in out.logits.
      const auto keep_row = [&] {
        kept.tokens.push_back(out.tokens[want++]);
        const auto from = out.logits.begin() + static_cast<int64_t>(vocab * row++);
        kept.logits.insert(kept.logits.end(), from, from + static_cast<int64_t>(vocab));
      };
      if (!c.all_logits) {
        if (c.want_logits) keep_row();
        continue;
      }
      const float* rows = out.prompt_logits.data() + scored * vocab;
      scored += static_cast<size_t>(c.num_tokens);
      if (!c.device_greedy) {
        kept.prompt_logits.insert(kept.prompt_logits.end(), rows, rows + static_cast<size_t>(c.num_tokens) * vocab);
        if (c.want_logits) keep_row();
        continue;
      }
      for (int64_t i = 0; i < c.num_tokens; ++i) {
        const float* r = rows + static_cast<size_t>(i) * vocab;
        kept.scored_picks.push_back(static_cast<int32_t>(std::max_element(r, r + vocab) - r));
        ++picked_rows;
      }
      if (!c.want_logits) continue;
      kept.tokens.push_back(kept.scored_picks.back());
      ++want;
      ++row;
    }
    out = std::move(kept);
    return Status::ok();
  }
  int64_t vocab_size() const override { return inner_->vocab_size(); }
  int64_t num_kv_blocks() const override { return inner_->num_kv_blocks(); }
  int64_t block_size() const override { return inner_->block_size(); }
  bool scores_prompts() const override { return true; }
  bool picks_scored_rows() const override { return true; }
  int64_t picked_rows = 0;

 private:
  std::unique_ptr<Runner> inner_;
};

// An engine over `runner` for the tiny model: 16 sequences, steps of 64 tokens, 512 positions.
std::unique_ptr<Engine> engine_over(std::unique_ptr<Runner> runner, const SpeculativeConfig& spec,
                                    bool prefix_caching = true) {
  EngineConfig config;
  config.scheduler.max_num_seqs = 16;
  config.scheduler.max_num_batched_tokens = 64;
  config.scheduler.enable_prefix_caching = prefix_caching;
  config.max_model_len = 512;
  config.eos_ids = tiny().tokenizer->default_stop_ids();
  config.speculative = spec;
  return std::make_unique<Engine>(std::move(runner), *tiny().tokenizer, config);
}

std::unique_ptr<Engine> make_engine(const SpeculativeConfig& spec, int64_t num_blocks, int64_t block_size,
                                    bool prefix_caching = true, PickingRunner** picking = nullptr) {
  testing::ErnieTiny& m = tiny();
  const ModelConfig& c = m.model->config();
  auto cpu = CpuRunner::create(*m.model, block_size,
                               num_blocks * PagedKvPool::bytes_per_block(c.num_layers, c.kv_dim(), block_size));
  EXPECT_TRUE(cpu.is_ok()) << cpu.status().to_string();
  std::unique_ptr<Runner> runner = std::move(cpu).value();
  if (picking != nullptr) {
    auto wrapped = std::make_unique<PickingRunner>(std::move(runner));
    *picking = wrapped.get();
    runner = std::move(wrapped);
  }
  return engine_over(std::move(runner), spec, prefix_caching);
}

// What a request's stream carried, event by event merged per sequence.
struct Outcome {
  std::map<int, std::vector<int32_t>> tokens;
  std::map<int, std::vector<float>> logprobs;
  std::map<int, std::string> text;
  std::map<int, int> finish;
  std::map<int, std::string> stop_reason;
  bool finished = false;
  bool operator==(const Outcome&) const = default;
};

Outcome drain(RequestStream& stream) {
  Outcome o;
  for (auto& e : stream.drain()) {
    for (auto& s : e.sequences) {
      o.tokens[s.index].insert(o.tokens[s.index].end(), s.token_ids.begin(), s.token_ids.end());
      for (const SampleResult& r : s.logprobs) o.logprobs[s.index].push_back(r.logprob);
      o.text[s.index] += s.text;
      if (s.finish) {
        o.finish[s.index] = static_cast<int>(*s.finish);
        o.stop_reason[s.index] = s.stop_reason;
      }
    }
    o.finished = o.finished || e.finished;
  }
  return o;
}

// Prompts that repeat themselves (a snippet over and over, then a tail), so
// that lookups find matches, and requests of every kind over them.
std::vector<Request> mixed_requests(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(20, 1000);
  std::vector<Request> out;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> snippet(3 + rng() % 6), prompt;
    for (auto& t : snippet) t = tok(rng);
    for (int r = 0; r < 2 + static_cast<int>(rng() % 4); ++r) prompt.insert(prompt.end(), snippet.begin(), snippet.end());
    for (uint32_t k = rng() % 5; k > 0; --k) prompt.push_back(tok(rng));
    Request q;
    q.id = "s" + std::to_string(i);
    q.prompt = prompt;
    SamplingParams& p = q.params;
    p.max_tokens = 1 + static_cast<int64_t>(rng() % 48);
    p.ignore_eos = rng() % 2 == 0;
    switch (i % 6) {
      case 0: p.temperature = 0; break;
      case 1: p.temperature = 0; p.logprobs = 2; break;
      case 2: p.temperature = 0.9; p.top_p = 0.9; p.seed = 100 + i; break;
      case 3: p.temperature = 0.7; p.seed = 200 + i; p.repetition_penalty = 1.2; p.logprobs = 1; break;
      case 4: p.temperature = 0; p.min_tokens = std::min<int64_t>(3, p.max_tokens); p.stop_token_ids = {snippet[1]}; break;
      case 5: p.temperature = 1.0; p.seed = 300 + i; q.n = 2; break;
    }
    out.push_back(std::move(q));
  }
  return out;
}

struct Served {
  std::vector<Outcome> outcomes;
  EngineStats stats;
};

// The requests through `engine` to the end: what each stream carried, and the engine's counters.
Served serve_on(Engine& engine, const std::vector<Request>& requests);

// The requests through an engine made for them, gone when this returns.
Served serve(const SpeculativeConfig& spec, const std::vector<Request>& requests, int64_t num_blocks,
          int64_t block_size, bool prefix_caching = true) {
  return serve_on(*make_engine(spec, num_blocks, block_size, prefix_caching), requests);
}

Served serve_on(Engine& e, const std::vector<Request>& requests) {
  Engine* engine = &e;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Request& r : requests) {
    streams.push_back(std::make_shared<RequestStream>());
    const Status added = engine->add_request(r, streams.back());
    EXPECT_TRUE(added.is_ok()) << r.id << ": " << added.to_string();
  }
  for (int guard = 0; engine->has_work(); ++guard) {
    EXPECT_LT(guard, 100000) << "engine made no progress";
    if (guard >= 100000) break;
    engine->step();
  }
  Served run;
  for (auto& s : streams) run.outcomes.push_back(drain(*s));
  run.stats = engine->stats();
  EXPECT_EQ(engine->allocator().num_used(), 0) << "a KV block leaked";
  return run;
}

void expect_same(const Served& off, const Served& on, const std::vector<Request>& requests) {
  ASSERT_EQ(off.outcomes.size(), on.outcomes.size());
  for (size_t i = 0; i < off.outcomes.size(); ++i) {
    EXPECT_TRUE(off.outcomes[i].finished && on.outcomes[i].finished) << requests[i].id;
    EXPECT_EQ(off.outcomes[i].tokens, on.outcomes[i].tokens) << requests[i].id;
    EXPECT_EQ(off.outcomes[i].text, on.outcomes[i].text) << requests[i].id;
    EXPECT_EQ(off.outcomes[i].finish, on.outcomes[i].finish) << requests[i].id;
    EXPECT_EQ(off.outcomes[i].stop_reason, on.outcomes[i].stop_reason) << requests[i].id;
    EXPECT_EQ(off.outcomes[i].logprobs.size(), on.outcomes[i].logprobs.size()) << requests[i].id;
    for (const auto& [index, values] : off.outcomes[i].logprobs) {
      const auto it = on.outcomes[i].logprobs.find(index);
      ASSERT_NE(it, on.outcomes[i].logprobs.end());
      ASSERT_EQ(values.size(), it->second.size());
      for (size_t k = 0; k < values.size(); ++k) EXPECT_NEAR(values[k], it->second[k], 1e-4f) << requests[i].id;
    }
  }
}

// Greedy, seeded sampling with penalties, logprobs, stop ids, min_tokens,
// n = 2 and max_tokens from 1: the same outputs with drafts as without, and
// drafts were proposed and accepted along the way.
TEST(Speculation, OutputsAreThoseWithoutDrafts) {
  const auto requests = mixed_requests(24, 7);
  const Served off = serve(SpeculativeConfig{}, requests, 512, 16);
  const Served on = serve(SpeculativeConfig{.num_tokens = 4, .max_seqs = 16}, requests, 512, 16);
  expect_same(off, on, requests);
  std::printf("drafts %lld, draft tokens %lld, accepted %lld; steps %lld with drafts, %lld without\n",
              static_cast<long long>(on.stats.spec_drafts), static_cast<long long>(on.stats.spec_draft_tokens),
              static_cast<long long>(on.stats.spec_accepted_tokens), static_cast<long long>(on.stats.num_steps),
              static_cast<long long>(off.stats.num_steps));
  EXPECT_EQ(off.stats.spec_draft_tokens, 0);
  EXPECT_GT(on.stats.spec_drafts, 0);
  EXPECT_GT(on.stats.spec_accepted_tokens, 0);
  EXPECT_LE(on.stats.spec_accepted_tokens, on.stats.spec_draft_tokens);
  EXPECT_LT(on.stats.num_steps, off.stats.num_steps) << "accepted drafts should save steps";
  EXPECT_EQ(on.stats.generation_tokens_total, off.stats.generation_tokens_total);
}

// A pool far too small for the batch (preemption with drafts in the step),
// blocks of 4 tokens (drafts crossing into new blocks, then given back),
// one token a sequence at a time, and lookups of single tokens.
TEST(Speculation, DraftsSurvivePreemptionAndSmallBlocks) {
  const auto requests = mixed_requests(16, 11);
  const SpeculativeConfig spec{.num_tokens = 6, .lookup_min = 1, .lookup_max = 3, .max_seqs = 16};
  const Served off = serve(SpeculativeConfig{}, requests, 24, 4);
  const Served on = serve(spec, requests, 24, 4);
  expect_same(off, on, requests);
  EXPECT_GT(on.stats.num_preemptions, 0);
  EXPECT_GT(on.stats.spec_accepted_tokens, 0);
  const Served uncached = serve(spec, requests, 24, 4, /*prefix_caching=*/false);
  expect_same(off, uncached, requests);
}

// The same prompts twice over, so the second wave starts from the prefix
// cache the first (with its rejected drafts) left behind.
TEST(Speculation, PrefixCacheHoldsOnlyAcceptedTokens) {
  auto requests = mixed_requests(8, 3);
  const size_t first = requests.size();
  for (size_t i = 0; i < first; ++i) {
    Request again = requests[i];
    again.id += "-again";
    requests.push_back(again);
  }
  const SpeculativeConfig spec{.num_tokens = 4, .lookup_min = 1, .max_seqs = 16};
  auto engine = make_engine(spec, 256, 4);
  std::vector<Outcome> outcomes;
  for (size_t wave = 0; wave < 2; ++wave) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = wave * first; i < (wave + 1) * first; ++i) {
      streams.push_back(std::make_shared<RequestStream>());
      ASSERT_TRUE(engine->add_request(requests[i], streams.back()).is_ok());
    }
    while (engine->has_work()) engine->step();
    for (auto& s : streams) outcomes.push_back(drain(*s));
  }
  EXPECT_GT(engine->stats().prefix_cache_hits, 0);
  EXPECT_EQ(engine->allocator().num_used(), 0);
  const Served off = serve(SpeculativeConfig{}, requests, 256, 4);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(outcomes[i].tokens, off.outcomes[i].tokens) << requests[i].id;
    EXPECT_EQ(outcomes[i].finish, off.outcomes[i].finish) << requests[i].id;
  }
}

// A runner that picks greedy drafts' rows itself (the CUDA runner's
// argmax on the device) gives the outputs of one that returns their logits.
TEST(Speculation, RowsPickedByTheRunnerGiveTheSameOutputs) {
  const auto requests = mixed_requests(24, 13);
  const SpeculativeConfig spec{.num_tokens = 4, .lookup_min = 1, .max_seqs = 16};
  const Served off = serve(SpeculativeConfig{}, requests, 512, 16);
  PickingRunner* picking = nullptr;
  const auto engine = make_engine(spec, 512, 16, true, &picking);  // the runner lives as long as its engine
  const Served on = serve_on(*engine, requests);
  expect_same(off, on, requests);
  ASSERT_NE(picking, nullptr);
  EXPECT_GT(picking->picked_rows, 0);
  EXPECT_GT(on.stats.spec_accepted_tokens, 0);
  PickingRunner* small = nullptr;
  expect_same(serve(SpeculativeConfig{}, requests, 24, 4),
              serve_on(*make_engine(spec, 24, 4, true, &small), requests), requests);
}

// One sequence step by step: after a step that rejected a draft, the next
// verifies at most twice the drafts that step kept (at least one); never
// more than N.
TEST(Speculation, DraftsFollowWhatTheLastStepKept) {
  const SpeculativeConfig spec{.num_tokens = 6, .lookup_min = 1, .max_seqs = 4};
  int64_t steps_with_drafts = 0, steps_after_a_rejection = 0;
  for (const Request& r : mixed_requests(12, 17)) {
    if (r.n > 1) continue;
    auto engine = make_engine(spec, 256, 16);
    auto stream = std::make_shared<RequestStream>();
    ASSERT_TRUE(engine->add_request(r, stream).is_ok());
    int64_t last_drafts = 0, last_kept = 0;
    for (int guard = 0; engine->has_work() && guard < 1000; ++guard) {
      const EngineStats before = engine->stats();
      engine->step();
      const EngineStats after = engine->stats();
      const int64_t drafts = after.spec_draft_tokens - before.spec_draft_tokens;
      const int64_t kept = after.spec_accepted_tokens - before.spec_accepted_tokens;
      if (drafts == 0) continue;
      ++steps_with_drafts;
      EXPECT_LE(drafts, spec.num_tokens) << r.id;
      if (last_drafts > 0 && last_kept < last_drafts) {
        ++steps_after_a_rejection;
        EXPECT_LE(drafts, std::max<int64_t>(1, 2 * last_kept)) << r.id << " after " << last_kept << " of "
                                                               << last_drafts;
      }
      last_drafts = drafts;
      last_kept = kept;
    }
    EXPECT_FALSE(engine->has_work());
  }
  EXPECT_GT(steps_with_drafts, 0);
  EXPECT_GT(steps_after_a_rejection, 0);
}

// A runner that overlaps steps, samples on its device and picks greedy
// drafts' rows there (the CUDA runner's protocol, spoken by a CPU model):
// greedy requests of every kind give the tokens of the same runner without
// drafts and of the plain CPU runner; steps overlap while more sequences
// decode than drafts are proposed for, and not once drafts may come.
TEST(Speculation, OverlappingDeviceRunnerGivesTheSameTokens) {
  std::vector<Request> requests;
  for (Request r : mixed_requests(24, 19)) {
    // Greedy (the fake device's draws are argmaxes), and mostly plain, whose steps may overlap: logprobs, penalties
    // and min_tokens keep a step's rows on the host or its next step waiting for them.
    r.params.temperature = 0;
    if (r.id != "s1" && r.id != "s3") {
      r.params.logprobs.reset();
      r.params.repetition_penalty = 1.0;
      r.params.min_tokens = 0;
    }
    requests.push_back(r);
  }
  const SpeculativeConfig spec{.num_tokens = 4, .lookup_min = 1, .max_seqs = 6};
  const auto device = [](bool scores) {
    return std::make_unique<testing::DeviceSamplingCpuRunner>(*tiny().model, 512, /*overlap=*/true, scores);
  };
  const Served host = serve(SpeculativeConfig{}, requests, 512, 16);
  const Served plain = serve_on(*engine_over(device(false), SpeculativeConfig{}), requests);
  auto owned = device(true);
  testing::DeviceSamplingCpuRunner* runner = owned.get();
  auto engine = engine_over(std::move(owned), spec);
  const Served drafted = serve_on(*engine, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(plain.outcomes[i].tokens, host.outcomes[i].tokens) << requests[i].id;
    EXPECT_EQ(drafted.outcomes[i].tokens, host.outcomes[i].tokens) << requests[i].id;
    EXPECT_EQ(drafted.outcomes[i].finish, host.outcomes[i].finish) << requests[i].id;
    EXPECT_EQ(drafted.outcomes[i].text, host.outcomes[i].text) << requests[i].id;
  }
  EXPECT_GT(plain.stats.num_overlapped_steps, 0);
  EXPECT_GT(drafted.stats.num_overlapped_steps, 0);
  EXPECT_GT(drafted.stats.spec_accepted_tokens, 0);
  EXPECT_GT(runner->scored_picks, 0);  // greedy drafts' rows picked by the runner
  EXPECT_GT(runner->host_rows, 0);     // the logprobs requests' drafts' rows sampled on the host
}

// One sequence whose text does not repeat (random prompt tokens, matches of
// 3 or more): after a lookup finds nothing, its next steps overlap as
// without speculation, a few at a time between lookups.
TEST(Speculation, StepsOverlapWhereNothingRepeats) {
  std::mt19937 rng(23);
  std::uniform_int_distribution<int32_t> tok(20, 1000);
  std::vector<int32_t> prompt(40);
  for (auto& t : prompt) t = tok(rng);
  Request r;
  r.id = "plain";
  r.prompt = prompt;
  r.params.temperature = 0;
  r.params.max_tokens = 40;
  r.params.ignore_eos = true;
  const SpeculativeConfig spec{.num_tokens = 4, .lookup_min = 3, .lookup_max = 4, .max_seqs = 4};
  const auto device = [] {
    return std::make_unique<testing::DeviceSamplingCpuRunner>(*tiny().model, 128, /*overlap=*/true, true);
  };
  const Served plain = serve_on(*engine_over(device(), SpeculativeConfig{}), {r});
  const Served drafted = serve_on(*engine_over(device(), spec), {r});
  EXPECT_EQ(drafted.outcomes[0].tokens, plain.outcomes[0].tokens);
  EXPECT_GT(plain.stats.num_overlapped_steps, 30);
  EXPECT_GT(drafted.stats.num_overlapped_steps, plain.stats.num_overlapped_steps / 2)
      << drafted.stats.spec_drafts << " steps with drafts";
}

// Past disable_by_batch_size decoding sequences no drafts are proposed.
TEST(Speculation, StopsProposingPastItsBatchSize) {
  const auto requests = mixed_requests(12, 5);
  const Served on = serve(SpeculativeConfig{.num_tokens = 4, .max_seqs = 1}, requests, 512, 16);
  const Served off = serve(SpeculativeConfig{}, requests, 512, 16);
  expect_same(off, on, requests);
  // The 12 requests are admitted together: drafts come only once all but one have finished.
  EXPECT_LT(on.stats.spec_drafts, off.stats.num_steps / 2);
}

}  // namespace
}  // namespace tern
