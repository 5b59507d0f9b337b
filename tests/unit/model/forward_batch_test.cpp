// Ernie45Model::forward_batch over a PagedKvPool against each sequence run
// alone through the KvCache path: many sequences of different lengths in one
// step, scattered blocks of several sizes, chunked prefill mixed with
// decodes, copy on write after a fork, and bad batches that must fail before
// touching the pool. Per-token arithmetic does not depend on how tokens are
// batched, so the logits must agree to the bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "model/ernie4_5/ernie4_5_model.h"
#include "support/tiny_model.h"

namespace tern {
namespace {

using Logits = std::vector<float>;

// One sequence of a test: every token it will run, its block table, how far
// the batched run got, and the logits the batch produced for it, keyed by the
// position of the token they follow.
struct TestSeq {
  std::vector<int32_t> tokens;
  int64_t prompt_len = 0;
  std::vector<int32_t> blocks;
  int64_t done = 0;
  std::map<int64_t, Logits> logits;
};

// `n` tokens of sequence `seq` in a step; `want` asks for their last logits.
struct Work {
  size_t seq;
  int64_t n;
  bool want;
};

std::vector<int32_t> random_tokens(std::mt19937& rng, int64_t vocab, int64_t n) {
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = d(rng);
  return ids;
}

// Gives each sequence enough blocks for all its tokens, from a shuffled list
// of block ids so no table is contiguous or ordered; returns the pool size
// needed (with a few spare blocks that nobody uses).
int64_t assign_blocks(std::vector<TestSeq>& seqs, int64_t block_size, std::mt19937& rng) {
  int64_t total = 3;
  for (const TestSeq& s : seqs) total += (static_cast<int64_t>(s.tokens.size()) + block_size - 1) / block_size;
  std::vector<int32_t> ids(static_cast<size_t>(total));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  size_t next = 0;
  for (TestSeq& s : seqs) {
    const int64_t n = (static_cast<int64_t>(s.tokens.size()) + block_size - 1) / block_size;
    s.blocks.assign(ids.begin() + static_cast<long>(next), ids.begin() + static_cast<long>(next + size_t(n)));
    next += static_cast<size_t>(n);
  }
  return total;
}

// NaN in every row, so reading a slot that was never written shows.
void poison(PagedKvPool& pool) {
  std::vector<int32_t> all(static_cast<size_t>(pool.num_blocks()));
  std::iota(all.begin(), all.end(), 0);
  for (int64_t l = 0; l < pool.num_layers(); ++l) {
    for (int64_t pos = 0; pos < pool.num_blocks() * pool.block_size(); ++pos) {
      std::fill_n(pool.key_row(l, all, pos), pool.kv_dim(), NAN);
      std::fill_n(pool.value_row(l, all, pos), pool.kv_dim(), NAN);
    }
  }
}

// Runs one step through forward_batch and files the logits under their sequences.
void run_step(Ernie45Model& model, PagedKvPool& pool, std::vector<TestSeq>& seqs, const std::vector<Work>& step) {
  const auto vocab = static_cast<size_t>(model.config().vocab_size);
  std::vector<SequenceChunk> batch;
  size_t want = 0;
  for (const Work& w : step) {
    TestSeq& s = seqs[w.seq];
    ASSERT_LE(s.done + w.n, static_cast<int64_t>(s.tokens.size()));
    SequenceChunk c;
    c.tokens = std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(s.done), static_cast<size_t>(w.n));
    c.start_pos = s.done;
    c.block_table = s.blocks;
    c.want_logits = w.want;
    batch.push_back(c);
    want += w.want ? 1 : 0;
  }
  Logits logits(want * vocab);
  Status st = model.forward_batch(batch, pool, logits);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  size_t row = 0;
  for (const Work& w : step) {
    TestSeq& s = seqs[w.seq];
    s.done += w.n;
    if (!w.want) continue;
    s.logits[s.done - 1] = Logits(logits.begin() + long(row * vocab), logits.begin() + long((row + 1) * vocab));
    ++row;
  }
}

::testing::AssertionResult same_bits(const Logits& got, const float* want) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], 4) != 0) {
      return ::testing::AssertionFailure() << "logit " << i << ": " << got[i] << " vs " << want[i]
                                           << " (relative " << std::fabs(got[i] - want[i]) / std::fabs(want[i])
                                           << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Every logits row the batch recorded for `s` against `s` run alone through a
// KvCache: the prompt in one forward_all, then one token per forward().
void expect_matches_solo(Ernie45Model& model, const TestSeq& s, const std::string& label) {
  ASSERT_FALSE(s.logits.empty()) << label;
  const auto vocab = static_cast<size_t>(model.config().vocab_size);
  KvCache cache = model.make_cache(s.done);
  Logits all(static_cast<size_t>(s.prompt_len) * vocab);
  ASSERT_TRUE(model.forward_all(std::span(s.tokens).first(size_t(s.prompt_len)), cache, all).is_ok());
  std::map<int64_t, Logits> solo;
  for (int64_t p = 0; p < s.prompt_len; ++p) {
    solo[p] = Logits(all.begin() + long(size_t(p) * vocab), all.begin() + long(size_t(p + 1) * vocab));
  }
  for (int64_t p = s.prompt_len; p < s.done; ++p) {
    Logits one(vocab);
    ASSERT_TRUE(model.forward(std::span(s.tokens).subspan(size_t(p), 1), cache, one).is_ok());
    solo[p] = one;
  }
  for (const auto& [pos, got] : s.logits) {
    ASSERT_TRUE(solo.count(pos)) << label;
    EXPECT_TRUE(same_bits(got, solo[pos].data())) << label << " at position " << pos;
  }
}

// The models: tiny random ones written here (tied and untied head), and the
// HF-made tiny model (16 query heads over 2 kv heads).
class ForwardBatch : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string dir;
    if (GetParam() == "random" || GetParam() == "random-untied") {
      test::TinySpec spec;
      spec.tie = GetParam() == "random";
      random_dir_ = std::make_unique<test::TinyModelDir>(spec, 11);
      dir = random_dir_->path();
    } else {
      dir = std::string(TERN_TEST_DATA_DIR) + "/" + GetParam();
    }
    auto model = Ernie45Model::load(dir, 2);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    model_ = std::move(model).value();
  }
  int64_t vocab() const { return model_->config().vocab_size; }

  std::unique_ptr<test::TinyModelDir> random_dir_;
  std::unique_ptr<Ernie45Model> model_;
};

TEST_P(ForwardBatch, ManySequencesInOneBatchMatchEachRunAlone) {
  const int64_t prompt_lens[] = {1, 70, 3, 16, 17, 33, 5, 64, 2, 11};
  const int64_t decode_len = 8;
  for (int64_t block_size : {16, 1, 5}) {
    SCOPED_TRACE("block_size " + std::to_string(block_size));
    std::mt19937 rng(static_cast<uint32_t>(100 + block_size));
    std::vector<TestSeq> seqs;
    for (int64_t len : prompt_lens) {
      TestSeq s;
      s.prompt_len = len;
      s.tokens = random_tokens(rng, vocab(), len + decode_len);
      seqs.push_back(s);
    }
    PagedKvPool pool = model_->make_pool(assign_blocks(seqs, block_size, rng), block_size);
    poison(pool);

    std::vector<Work> prefill;
    for (size_t i = 0; i < seqs.size(); ++i) prefill.push_back({i, seqs[i].prompt_len, true});
    ASSERT_NO_FATAL_FAILURE(run_step(*model_, pool, seqs, prefill));
    // Decode steps where sequences skip turns, so they drift apart in length.
    for (int step = 0; step < 12; ++step) {
      std::vector<Work> decode;
      for (size_t i = 0; i < seqs.size(); ++i) {
        const bool has_tokens = seqs[i].done < static_cast<int64_t>(seqs[i].tokens.size());
        if (has_tokens && (i + size_t(step)) % 4 != 3) decode.push_back({i, 1, true});
      }
      if (decode.empty()) break;
      ASSERT_NO_FATAL_FAILURE(run_step(*model_, pool, seqs, decode));
    }
    for (size_t i = 0; i < seqs.size(); ++i) {
      EXPECT_GT(seqs[i].done, seqs[i].prompt_len + 4);
      expect_matches_solo(*model_, seqs[i], "sequence " + std::to_string(i));
    }
  }
}

TEST_P(ForwardBatch, ChunkedPrefillMixedWithDecodesMatchesOneShot) {
  std::mt19937 rng(21);
  // 0: a 70-token prompt in chunks of 13; 1, 2: decoding all along;
  // 3: a prompt that arrives at step 2 and runs in one piece.
  const int64_t prompt_lens[] = {70, 9, 40, 25};
  std::vector<TestSeq> seqs;
  for (int64_t len : prompt_lens) {
    TestSeq s;
    s.prompt_len = len;
    s.tokens = random_tokens(rng, vocab(), len + 10);
    seqs.push_back(s);
  }
  PagedKvPool pool = model_->make_pool(assign_blocks(seqs, 16, rng), 16);
  poison(pool);

  ASSERT_NO_FATAL_FAILURE(run_step(*model_, pool, seqs, {{1, 9, true}, {0, 13, false}, {2, 40, true}}));
  for (int step = 1; step < 9; ++step) {
    std::vector<Work> work = {{1, 1, true}};
    const int64_t left = seqs[0].prompt_len - seqs[0].done;
    if (left > 0) {
      // Chunk 2 also asks for logits: they must equal the one-shot prefill's row 38.
      work.push_back({0, std::min<int64_t>(13, left), left <= 13 || step == 2});
    } else {
      work.push_back({0, 1, true});
    }
    if (step == 2) work.push_back({3, 25, true});
    if (step > 2) work.push_back({3, 1, true});
    work.push_back({2, 1, true});
    ASSERT_NO_FATAL_FAILURE(run_step(*model_, pool, seqs, work));
  }
  ASSERT_TRUE(seqs[0].logits.count(38));
  ASSERT_TRUE(seqs[0].logits.count(69)) << "the prompt's last chunk gives the first sampled token's logits";
  EXPECT_EQ(seqs[0].logits.size(), 2u + 3u);  // chunks 2 and 5, then three decodes
  for (size_t i = 0; i < seqs.size(); ++i) expect_matches_solo(*model_, seqs[i], "sequence " + std::to_string(i));
}

TEST_P(ForwardBatch, CopyBlockThenDivergingContinuationsMatchIndependentRuns) {
  std::mt19937 rng(31);
  const int64_t block_size = 8, prompt_len = 21;  // the prompt ends 5 slots into its third block
  const std::vector<int32_t> prompt = random_tokens(rng, vocab(), prompt_len);
  TestSeq parent, child;
  parent.prompt_len = child.prompt_len = prompt_len;
  parent.tokens = child.tokens = prompt;
  for (int32_t t : random_tokens(rng, vocab(), 12)) parent.tokens.push_back(t);
  for (int32_t t : random_tokens(rng, vocab(), 12)) child.tokens.push_back(t);
  ASSERT_NE(parent.tokens[prompt_len], child.tokens[prompt_len]);
  parent.blocks = {9, 4, 6, 1, 7};
  std::vector<TestSeq> seqs = {parent};
  PagedKvPool pool = model_->make_pool(10, block_size);
  poison(pool);
  ASSERT_NO_FATAL_FAILURE(run_step(*model_, pool, seqs, {{0, prompt_len, true}}));

  // Fork: the child shares the two full blocks and gets a copy of the partial one.
  child.blocks = {9, 4, 3, 0, 8};
  pool.copy_block(6, 3);
  child.done = prompt_len;
  seqs.push_back(child);
  for (int step = 0; step < 12; ++step) {
    ASSERT_NO_FATAL_FAILURE(run_step(*model_, pool, seqs, {{1, 1, true}, {0, 1, true}}));
  }
  const Logits& p = seqs[0].logits.at(prompt_len + 3);
  const Logits& c = seqs[1].logits.at(prompt_len + 3);
  EXPECT_NE(0, std::memcmp(p.data(), c.data(), p.size() * 4)) << "the continuations should differ";
  expect_matches_solo(*model_, seqs[0], "parent");
  expect_matches_solo(*model_, seqs[1], "child");
}

TEST_P(ForwardBatch, BadBatchesFailBeforeTouchingThePool) {
  std::mt19937 rng(41);
  const int64_t block_size = 4;
  TestSeq s;
  s.prompt_len = 6;
  s.tokens = random_tokens(rng, vocab(), 9);
  s.blocks = {7, 2, 5};
  std::vector<TestSeq> seqs = {s};
  PagedKvPool pool = model_->make_pool(12, block_size);
  poison(pool);
  ASSERT_NO_FATAL_FAILURE(run_step(*model_, pool, seqs, {{0, 6, true}}));
  const std::vector<float> before(pool.storage().begin(), pool.storage().end());

  const std::vector<int32_t> good = {3};
  const std::vector<int32_t> four = {1, 2, 3, 4};
  const std::vector<int32_t> bad_id = {1, -1};
  const std::vector<int32_t> too_big = {static_cast<int32_t>(vocab())};
  const std::vector<int32_t> table = {7, 2, 5};
  const std::vector<int32_t> short_table = {7};
  const std::vector<int32_t> past_pool = {7, 12};
  const std::vector<int32_t> negative_block = {7, -1};
  const std::vector<int32_t> overlapping = {5};  // seq's slot 8 is block 5, offset 0
  const SequenceChunk ok{good, 6, table, true};
  const auto v = static_cast<size_t>(vocab());
  struct Case {
    std::string name;
    std::vector<SequenceChunk> batch;
    size_t logits_size;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"empty batch", {}, 0, "empty batch"},
      {"no tokens", {ok, SequenceChunk{{}, 0, table, false}}, v, "chunk 1: no tokens"},
      {"negative id after a good chunk", {ok, SequenceChunk{bad_id, 0, table, false}}, v, "token id -1 at index 1"},
      {"id past the vocabulary", {SequenceChunk{too_big, 6, table, true}}, v, "outside the vocabulary"},
      {"negative start", {SequenceChunk{good, -1, table, true}}, v, "start_pos -1"},
      {"start overflows", {SequenceChunk{good, std::numeric_limits<int64_t>::max(), table, true}}, v, "start_pos"},
      {"table too short", {SequenceChunk{good, 6, short_table, true}}, v, "need 2"},
      {"block past the pool", {SequenceChunk{good, 6, past_pool, true}}, v, "block 12, outside the pool [0, 12)"},
      {"negative block", {SequenceChunk{good, 6, negative_block, true}}, v, "block -1"},
      {"logits one short", {ok}, v - 1, "expected 1 x"},
      {"logits one long", {ok}, v + 1, "expected 1 x"},
      {"logits nobody wants", {SequenceChunk{good, 6, table, false}}, v, "expected 0 x"},
      {"two chunks write one slot", {SequenceChunk{four, 6, table, false}, SequenceChunk{four, 0, overlapping, true}},
       v, "written twice"},
  };
  for (const Case& c : cases) {
    Logits logits(c.logits_size, 12345.0f);
    Status st = model_->forward_batch(c.batch, pool, logits);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << c.name << ": " << st.to_string();
    EXPECT_NE(st.message().find(c.message), std::string::npos) << c.name << ": " << st.to_string();
    EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float x) { return x == 12345.0f; })) << c.name;
    ASSERT_EQ(0, std::memcmp(before.data(), pool.storage().data(), before.size() * 4)) << c.name;
  }
  const int64_t layers = model_->config().num_layers, kv_dim = model_->config().kv_dim();
  for (auto [l, d] : {std::pair{layers + 1, kv_dim}, std::pair{layers, kv_dim + 1}}) {
    PagedKvPool other(l, d, 12, block_size);
    Logits logits(v);
    Status st = model_->forward_batch(std::vector<SequenceChunk>{ok}, other, logits);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find("does not match the model"), std::string::npos) << st.to_string();
  }

  // The pool still holds exactly the prompt: decoding on gives the solo logits.
  for (int step = 0; step < 3; ++step) ASSERT_NO_FATAL_FAILURE(run_step(*model_, pool, seqs, {{0, 1, true}}));
  expect_matches_solo(*model_, seqs[0], "after the failures");
}

// --kv-cache-dtype fp8: the same steps over an fp8 pool store e4m3 K/V (the
// logits move: the pool is not fp32 in disguise) and stay close to the fp32
// pool's: the next-token distributions within a bounded KL divergence, and
// the same rows computed batched or with each sequence alone in its own pool.
TEST_P(ForwardBatch, Fp8PoolIsReadAndStaysCloseToFp32) {
  const int64_t prompt_lens[] = {1, 23, 16, 37};
  const int64_t block_size = 5;
  std::mt19937 rng(31);
  std::vector<TestSeq> base;
  for (int64_t len : prompt_lens) {
    TestSeq s;
    s.prompt_len = len;
    s.tokens = random_tokens(rng, vocab(), len + 6);
    base.push_back(s);
  }
  const int64_t blocks = assign_blocks(base, block_size, rng);
  auto run = [&](KvCacheDType dtype, std::vector<TestSeq>& seqs, const std::vector<size_t>& which) {
    PagedKvPool pool = model_->make_pool(blocks, block_size, dtype);
    std::vector<Work> prefill;
    for (size_t i : which) prefill.push_back({i, seqs[i].prompt_len, true});
    ASSERT_NO_FATAL_FAILURE(run_step(*model_, pool, seqs, prefill));
    for (int step = 0; step < 6; ++step) {
      std::vector<Work> decode;
      for (size_t i : which) decode.push_back({i, 1, true});
      ASSERT_NO_FATAL_FAILURE(run_step(*model_, pool, seqs, decode));
    }
  };
  const std::vector<size_t> all = {0, 1, 2, 3};
  std::vector<TestSeq> f32 = base, fp8 = base;
  ASSERT_NO_FATAL_FAILURE(run(KvCacheDType::kAuto, f32, all));
  ASSERT_NO_FATAL_FAILURE(run(KvCacheDType::kFp8E4m3, fp8, all));
  int rows_moved = 0, rows = 0;
  double worst_kl = 0, sum_kl = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    ASSERT_EQ(f32[i].logits.size(), fp8[i].logits.size());
    for (const auto& [pos, want] : f32[i].logits) {
      const Logits& got = fp8[i].logits.at(pos);
      rows_moved += std::memcmp(got.data(), want.data(), want.size() * 4) != 0 ? 1 : 0;
      // KL(p_f32 || p_fp8) of the softmaxes, in double.
      const double mw = *std::max_element(want.begin(), want.end()), mg = *std::max_element(got.begin(), got.end());
      double zw = 0, zg = 0;
      for (size_t v = 0; v < want.size(); ++v) {
        zw += std::exp(want[v] - mw);
        zg += std::exp(got[v] - mg);
      }
      double kl = 0;
      for (size_t v = 0; v < want.size(); ++v) {
        const double lw = want[v] - mw - std::log(zw), lg = got[v] - mg - std::log(zg);
        kl += std::exp(lw) * (lw - lg);
      }
      worst_kl = std::max(worst_kl, kl);
      sum_kl += kl;
      ++rows;
    }
  }
  std::printf("fp8 vs fp32 pool: mean KL %.3g, worst %.3g over %d rows\n", sum_kl / rows, worst_kl, rows);
  EXPECT_GT(rows_moved, 0) << "an fp8 pool gave the fp32 pool's logits to the bit";
  // The tiny models' K/V stay within +-5 (no saturation), but their random
  // weights make sharp distributions: e4m3's 3 mantissa bits (relative error
  // up to 1/16) move them measurably. docs/benchmarks.md has the demo model's.
  EXPECT_LT(sum_kl / rows, 0.1);
  EXPECT_LT(worst_kl, 0.5);
  // Batching does not change an fp8 row either.
  for (size_t i : all) {
    std::vector<TestSeq> alone = base;
    ASSERT_NO_FATAL_FAILURE(run(KvCacheDType::kFp8E4m3, alone, {i}));
    for (const auto& [pos, want] : fp8[i].logits) EXPECT_TRUE(same_bits(alone[i].logits.at(pos), want.data())) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ForwardBatch,
                         ::testing::Values("random", "random-untied", "ernie-tiny", "ernie-tiny-untied"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace tern
