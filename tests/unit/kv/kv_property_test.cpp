// Property test of the KV bookkeeping: thousands of random operations
// (admit with prefix match, grow, fork, preempt and recompute, finish,
// cache reset) against a shadow model of the device pool, checked after
// every step. Runs with honest and deliberately colliding block hashes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kv/block_allocator.h"
#include "kv/block_table.h"

namespace tern {
namespace {

constexpr int32_t kBs = 4;
constexpr int32_t kNumBlocks = 32;
constexpr size_t kMaxSeqs = 12;

struct NamedHasher {
  const char* name;
  BlockHasher fn;
};

std::vector<NamedHasher> hashers() {
  return {
      {"default", default_block_hash},
      {"constant", [](uint64_t, std::span<const int32_t>, std::string_view) { return 42ULL; }},
      {"parent_blind",
       [](uint64_t, std::span<const int32_t> t, std::string_view s) { return default_block_hash(0, t, s); }},
      {"salt_blind", [](uint64_t p, std::span<const int32_t> t, std::string_view) { return default_block_hash(p, t, ""); }},
      {"mod5",
       [](uint64_t p, std::span<const int32_t> t, std::string_view s) {
         return (p * 31 + std::accumulate(t.begin(), t.end(), 0ULL) + s.size()) % 5;
       }},
  };
}

struct SimSeq {
  BlockTable table;
  std::vector<int32_t> tokens;  // every token whose KV is written: tokens.size() == table.num_tokens()
  std::vector<uint64_t> kv;     // kv[p]: fingerprint of tokens[0..p], what position p's KV depends on
  std::string salt;
};

// The shadow KV of a position: a function of the token and everything
// before it (independent of the block hash under test).
uint64_t kv_of(uint64_t previous, int32_t token) {
  return default_block_hash(previous, std::span<const int32_t>(&token, 1), "kv");
}

// The shadow: what each device slot holds, and which tenant wrote it.
class Sim {
 public:
  // `vocab` small makes equal blocks under different parents common.
  Sim(BlockHasher hasher, uint64_t seed, int vocab)
      : alloc_(kNumBlocks, kBs, true, std::move(hasher)), rng_(seed), vocab_(vocab) {
    device_.assign(kNumBlocks, std::vector<uint64_t>(kBs, 0));
    writer_salt_.assign(kNumBlocks, "");
    for (int d = 0; d < 3; ++d) {
      std::vector<int32_t> doc(6 * kBs);
      for (auto& t : doc) t = uniform(0, vocab_ - 1);
      docs_.push_back(doc);
    }
  }

  void step() {
    const int op = uniform(0, 99);
    if (seqs_.empty() || (op < 25 && seqs_.size() < kMaxSeqs)) return admit();
    SimSeq& s = seqs_[uniform(0, static_cast<int>(seqs_.size()) - 1)];
    if (op < 60) return append(s);
    if (op < 70 && seqs_.size() < kMaxSeqs) {
      seqs_.push_back({s.table.fork(), s.tokens, s.kv, s.salt});  // may reallocate: `s` is not used after
      return;
    }
    if (op < 78) return preempt(s);
    if (op < 98) return finish(s);
    alloc_.reset_prefix_cache();
  }

  // Every invariant the engine relies on, recomputed from the live tables.
  void check() {
    std::vector<int32_t> refs(kNumBlocks, 0);
    for (const SimSeq& s : seqs_) {
      ASSERT_EQ(static_cast<int64_t>(s.tokens.size()), s.table.num_tokens());
      ASSERT_EQ(static_cast<int64_t>(s.table.blocks().size()), (s.table.num_tokens() + kBs - 1) / kBs);
      std::vector<BlockId> mine(s.table.blocks().begin(), s.table.blocks().end());
      std::sort(mine.begin(), mine.end());
      ASSERT_TRUE(std::adjacent_find(mine.begin(), mine.end()) == mine.end()) << "a block twice in one table";
      for (BlockId b : mine) {
        ASSERT_TRUE(b >= 0 && b < kNumBlocks);
        ++refs[b];
      }
      ASSERT_EQ(s.kv.size(), s.tokens.size());
      for (size_t pos = 0; pos < s.tokens.size(); ++pos) {
        Slot slot = s.table.slot_of(static_cast<int64_t>(pos));
        ASSERT_EQ(device_[slot.block][slot.offset], s.kv[pos]) << "KV of position " << pos << " overwritten";
      }
    }
    int32_t used = 0, evictable = 0, free = 0;
    for (BlockId b = 0; b < kNumBlocks; ++b) {
      ASSERT_EQ(alloc_.ref_count(b), refs[b]) << "block " << b;
      if (refs[b] > 0) {
        ++used;
      } else if (alloc_.is_cached(b)) {
        ++evictable;
      } else {
        ++free;
      }
    }
    ASSERT_EQ(alloc_.num_used(), used);
    ASSERT_EQ(alloc_.num_evictable(), evictable);
    ASSERT_EQ(alloc_.num_free(), free);
    ASSERT_EQ(used + evictable + free, kNumBlocks);
  }

  void finish_all() { seqs_.clear(); }

  BlockAllocator& alloc() { return alloc_; }
  int64_t copies() const { return copies_; }
  int64_t exhausted() const { return exhausted_; }

 private:
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  std::vector<int32_t> random_tokens(int n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = uniform(0, vocab_ - 1);
    return t;
  }

  void admit() {
    const auto& doc = docs_[uniform(0, static_cast<int>(docs_.size()) - 1)];
    std::vector<int32_t> prompt(doc.begin(), doc.begin() + uniform(0, static_cast<int>(doc.size())));
    auto tail = random_tokens(uniform(1, 2 * kBs));
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    static const char* kSalts[] = {"", "tenant-a", "tenant-b"};
    SimSeq s{BlockTable(alloc_, kSalts[uniform(0, 2)]), {}, {}, ""};
    s.salt = s.table.cache_salt();
    if (start(s, prompt)) seqs_.push_back(std::move(s));
  }

  // Adopts the cached prefix of `prompt`, then computes the rest.
  bool start(SimSeq& s, const std::vector<int32_t>& prompt) {
    auto covered = s.table.match_prefix(prompt);
    EXPECT_TRUE(covered.is_ok());
    EXPECT_EQ(*covered % kBs, 0);
    EXPECT_LT(*covered, static_cast<int64_t>(prompt.size())) << "the last prompt token must be computed";
    uint64_t kv = 0;
    for (int64_t pos = 0; pos < *covered; ++pos) {
      kv = kv_of(kv, prompt[pos]);
      Slot slot = s.table.slot_of(pos);
      EXPECT_EQ(device_[slot.block][slot.offset], kv) << "prefix hit with other tokens or context";
      EXPECT_EQ(writer_salt_[slot.block], s.salt) << "prefix hit across tenants";
      s.kv.push_back(kv);
    }
    s.tokens.assign(prompt.begin(), prompt.begin() + *covered);
    return write(s, std::span<const int32_t>(prompt).subspan(*covered));
  }

  void append(SimSeq& s) {
    if (!write(s, random_tokens(uniform(1, 2 * kBs)))) preempt(s);
  }

  // Recompute later, as the scheduler does when blocks run out; drops the
  // sequence when even that does not fit.
  void preempt(SimSeq& s) {
    std::vector<int32_t> tokens = s.tokens;
    s.table.release();
    EXPECT_TRUE(s.table.blocks().empty());
    s.tokens.clear();
    s.kv.clear();
    if (!start(s, tokens)) finish(s);
  }

  void finish(SimSeq& s) {
    if (&s != &seqs_.back()) std::swap(s, seqs_.back());  // moves tables as the engine's containers do
    seqs_.pop_back();
  }

  // One forward pass: grow (copy on write), write the new tokens' KV,
  // publish the full blocks. False, with nothing changed, on exhaustion.
  bool write(SimSeq& s, std::span<const int32_t> fresh) {
    const std::vector<BlockId> before(s.table.blocks().begin(), s.table.blocks().end());
    const int32_t free_before = alloc_.num_free(), evictable_before = alloc_.num_evictable();
    const int64_t total = static_cast<int64_t>(s.tokens.size() + fresh.size());
    const int64_t needed = s.table.blocks_needed(total);
    auto copies = s.table.ensure_capacity(total);
    if (!copies.is_ok()) {
      ++exhausted_;
      EXPECT_EQ(copies.status().code(), ErrorCode::kResourceExhausted);
      EXPECT_GT(needed, free_before + evictable_before);
      EXPECT_EQ(std::vector<BlockId>(s.table.blocks().begin(), s.table.blocks().end()), before);
      EXPECT_EQ(s.table.num_tokens(), static_cast<int64_t>(s.tokens.size()));
      EXPECT_EQ(alloc_.num_free(), free_before);
      EXPECT_EQ(alloc_.num_evictable(), evictable_before);
      return false;
    }
    for (const BlockCopy& c : *copies) {
      ++copies_;
      EXPECT_GT(alloc_.ref_count(c.src), 0) << "copy from a freed block";
      device_[c.dst] = device_[c.src];
      writer_salt_[c.dst] = writer_salt_[c.src];
    }
    for (int32_t tok : fresh) {
      Slot slot = s.table.slot_of(static_cast<int64_t>(s.tokens.size()));
      EXPECT_EQ(alloc_.ref_count(slot.block), 1) << "write into a shared block";
      EXPECT_FALSE(alloc_.is_cached(slot.block)) << "write into a cached block";
      const uint64_t kv = kv_of(s.kv.empty() ? 0 : s.kv.back(), tok);
      device_[slot.block][slot.offset] = kv;
      writer_salt_[slot.block] = s.salt;
      s.tokens.push_back(tok);
      s.kv.push_back(kv);
    }
    if (uniform(0, 4) > 0) s.table.register_full_blocks(s.tokens);  // sometimes a step late
    return true;
  }

  BlockAllocator alloc_;
  std::mt19937_64 rng_;
  int vocab_;
  std::vector<std::vector<uint64_t>> device_;
  std::vector<std::string> writer_salt_;
  std::vector<std::vector<int32_t>> docs_;
  std::vector<SimSeq> seqs_;  // after alloc_: destroyed first
  int64_t copies_ = 0;
  int64_t exhausted_ = 0;
};

class KvProperty : public ::testing::TestWithParam<int> {};

TEST_P(KvProperty, RandomOperationsKeepEveryInvariant) {
  const NamedHasher hasher = hashers()[GetParam()];
  SCOPED_TRACE(hasher.name);
  int64_t queries = 0, hits = 0, copies = 0, exhausted = 0, evictions = 0;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    Sim sim(hasher.fn, seed * 7919 + GetParam(), seed == 3 ? 3 : 50);
    for (int step = 0; step < 4000; ++step) {
      sim.step();
      sim.check();
      if (HasFailure()) FAIL() << "seed " << seed << " step " << step;
    }
    sim.finish_all();
    sim.check();
    EXPECT_EQ(sim.alloc().num_used(), 0);
    EXPECT_EQ(sim.alloc().num_free() + sim.alloc().num_evictable(), kNumBlocks);
    sim.alloc().reset_prefix_cache();
    EXPECT_EQ(sim.alloc().num_free(), kNumBlocks) << "free count back to the total";
    queries += sim.alloc().prefix_cache_queries();
    hits += sim.alloc().prefix_cache_hits();
    copies += sim.copies();
    exhausted += sim.exhausted();
    evictions += sim.alloc().num_evictions();
  }
  // The run must have exercised what it claims to check.
  EXPECT_GT(hits, 0);
  EXPECT_LT(hits, queries);
  EXPECT_GT(copies, 0);
  EXPECT_GT(exhausted, 0);
  EXPECT_GT(evictions, 0);
  std::printf("[ %s ] queries %ld hits %ld copies %ld exhausted %ld evictions %ld\n", hasher.name,
              static_cast<long>(queries), static_cast<long>(hits), static_cast<long>(copies),
              static_cast<long>(exhausted), static_cast<long>(evictions));
}

INSTANTIATE_TEST_SUITE_P(Hashers, KvProperty, ::testing::Range(0, 5), [](const auto& info) {
  return std::string(hashers()[info.param].name);
});

}  // namespace
}  // namespace tern
