// BlockAllocator: pool accounting, ref counts, LRU eviction of cached
// blocks, and the prefix cache's verification (salt, colliding hashes,
// parent chain) and counters.
#include "kv/block_allocator.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace tern {
namespace {

constexpr int32_t kBs = 4;

std::vector<int32_t> seq(int32_t first, int32_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::span<const int32_t> chunk(const std::vector<int32_t>& t, int i) {
  return std::span<const int32_t>(t).subspan(i * kBs, kBs);
}

// Allocates and registers one block per full chunk of `tokens`, like a
// sequence that computed its prompt; returns the blocks (ref 1 each).
std::vector<BlockId> cache_prompt(BlockAllocator& a, const std::vector<int32_t>& tokens, std::string_view salt) {
  const int n = static_cast<int>(tokens.size()) / kBs;
  auto blocks = a.allocate(n);
  EXPECT_TRUE(blocks.is_ok()) << blocks.status().to_string();
  PrefixKey key;
  for (int i = 0; i < n; ++i) {
    auto k = a.register_full_block((*blocks)[i], key, chunk(tokens, i), salt);
    EXPECT_TRUE(k.is_ok());
    key = *k;
  }
  return *blocks;
}

void release(BlockAllocator& a, const std::vector<BlockId>& blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) ASSERT_TRUE(a.decref(*it).is_ok());
}

TEST(BlockAllocator, AllocatesEveryBlockOnceThenReportsExhaustion) {
  BlockAllocator a(5, kBs);
  auto got = a.allocate(5);
  ASSERT_TRUE(got.is_ok());
  std::vector<BlockId> sorted = *got;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<BlockId>{0, 1, 2, 3, 4}));
  EXPECT_EQ(a.num_used(), 5);
  EXPECT_DOUBLE_EQ(a.usage(), 1.0);
  auto more = a.allocate(1);
  ASSERT_FALSE(more.is_ok());
  EXPECT_EQ(more.status().code(), ErrorCode::kResourceExhausted);
  release(a, *got);
  EXPECT_EQ(a.num_free(), 5);
  EXPECT_EQ(a.num_used(), 0);
}

TEST(BlockAllocator, AllocationIsAllOrNothing) {
  BlockAllocator a(4, kBs);
  auto first = a.allocate(3);
  ASSERT_TRUE(first.is_ok());
  EXPECT_FALSE(a.allocate(2).is_ok());
  EXPECT_EQ(a.num_free(), 1);  // the failed call took nothing
  EXPECT_TRUE(a.allocate(1).is_ok());
}

TEST(BlockAllocator, RefCountsShareAndRejectDoubleFree) {
  BlockAllocator a(2, kBs);
  BlockId b = (*a.allocate(1))[0];
  ASSERT_TRUE(a.incref(b).is_ok());
  EXPECT_EQ(a.ref_count(b), 2);
  ASSERT_TRUE(a.decref(b).is_ok());
  EXPECT_EQ(a.num_free(), 1);  // still held once
  ASSERT_TRUE(a.decref(b).is_ok());
  EXPECT_EQ(a.num_free(), 2);
  EXPECT_EQ(a.decref(b).code(), ErrorCode::kInvalidArgument);  // double free
  EXPECT_EQ(a.incref(b).code(), ErrorCode::kInvalidArgument);  // resurrecting a free block
  EXPECT_EQ(a.decref(-1).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(a.decref(2).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(a.num_free(), 2);
}

TEST(BlockAllocator, PrefixHitLeavesTheLastTokenToCompute) {
  BlockAllocator a(8, kBs);
  auto prompt = seq(100, 8);  // exactly two full blocks
  release(a, cache_prompt(a, prompt, ""));
  EXPECT_EQ(a.num_evictable(), 2);

  // Same 8 tokens: only the first block, so token 7 is recomputed in a private block.
  PrefixMatch m = a.match_prefix(prompt, "");
  EXPECT_EQ(m.num_tokens, 4);
  ASSERT_EQ(m.blocks.size(), 1u);
  EXPECT_EQ(a.ref_count(m.blocks[0]), 1);
  EXPECT_EQ(a.num_evictable(), 1);
  release(a, m.blocks);

  // One more token: both blocks hit.
  auto longer = prompt;
  longer.push_back(7);
  m = a.match_prefix(longer, "");
  EXPECT_EQ(m.num_tokens, 8);
  EXPECT_EQ(a.prefix_cache_queries(), 8 + 9);
  EXPECT_EQ(a.prefix_cache_hits(), 4 + 8);
  release(a, m.blocks);

  EXPECT_EQ(a.match_prefix(std::vector<int32_t>{}, "").num_tokens, 0);
  EXPECT_EQ(a.match_prefix(seq(100, 3), "").num_tokens, 0);  // no full block
}

TEST(BlockAllocator, SaltKeepsTenantsApart) {
  BlockAllocator a(8, kBs);
  auto prompt = seq(1, 9);
  release(a, cache_prompt(a, prompt, "tenant-a"));
  EXPECT_EQ(a.match_prefix(prompt, "tenant-b").num_tokens, 0);
  EXPECT_EQ(a.match_prefix(prompt, "").num_tokens, 0);
  PrefixMatch m = a.match_prefix(prompt, "tenant-a");
  EXPECT_EQ(m.num_tokens, 8);
  release(a, m.blocks);
}

TEST(BlockAllocator, ConstantHashNeverServesOtherContent) {
  BlockAllocator a(8, kBs, true, [](uint64_t, std::span<const int32_t>, std::string_view) { return 42ULL; });
  auto x = seq(1, 5), y = seq(50, 5);
  release(a, cache_prompt(a, x, ""));
  EXPECT_EQ(a.match_prefix(y, "").num_tokens, 0);  // same hash, other tokens
  auto other = cache_prompt(a, y, "");              // collides: the first entry keeps the slot
  EXPECT_FALSE(a.is_cached(other[0]));
  release(a, other);
  PrefixMatch m = a.match_prefix(x, "");
  EXPECT_EQ(m.num_tokens, 4);
  release(a, m.blocks);
}

TEST(BlockAllocator, ChildOfAnotherParentIsNotServed) {
  // The hash ignores the parent, so [P1][T] and [P2][T] collide on block 2.
  BlockAllocator a(16, kBs, true, [](uint64_t, std::span<const int32_t> t, std::string_view s) {
    return default_block_hash(0, t, s);
  });
  auto p2_t = seq(10, 4);
  auto t = seq(90, 4);
  p2_t.insert(p2_t.end(), t.begin(), t.end());
  p2_t.push_back(0);
  auto p1_t = seq(20, 4);
  p1_t.insert(p1_t.end(), t.begin(), t.end());
  p1_t.push_back(0);
  release(a, cache_prompt(a, p2_t, ""));
  release(a, cache_prompt(a, seq(20, 5), ""));  // P1 alone is cached too
  PrefixMatch m = a.match_prefix(p1_t, "");
  EXPECT_EQ(m.num_tokens, 4);  // P1 only: T was cached under P2
  release(a, m.blocks);
}

TEST(BlockAllocator, ChildOfACollidingParentIsNotServed) {
  // Parents with equal token sums collide. [P2][T] is cached, P2 is evicted
  // and P1 takes its hash; a check of the parent's hash alone would now
  // serve P2's child T after P1.
  BlockAllocator a(2, kBs, true, [](uint64_t parent, std::span<const int32_t> t, std::string_view) {
    return parent * 1000003ULL + std::accumulate(t.begin(), t.end(), 0ULL);
  });
  std::vector<int32_t> p1 = {1, 2, 3, 4}, p2 = {4, 3, 2, 1}, t = {7, 7, 7, 7};
  auto blocks = *a.allocate(2);
  PrefixKey k2 = *a.register_full_block(blocks[0], {}, p2, "");
  ASSERT_TRUE(a.register_full_block(blocks[1], k2, t, "").is_ok());
  ASSERT_TRUE(a.decref(blocks[0]).is_ok());  // P2 first: it is evicted before T
  ASSERT_TRUE(a.decref(blocks[1]).is_ok());
  auto b1 = *a.allocate(1);
  ASSERT_EQ(b1[0], blocks[0]);
  PrefixKey k1 = *a.register_full_block(b1[0], {}, p1, "");
  EXPECT_EQ(k1.hash, k2.hash);
  release(a, b1);

  std::vector<int32_t> query = p1;
  query.insert(query.end(), t.begin(), t.end());
  query.push_back(0);
  PrefixMatch m = a.match_prefix(query, "");
  EXPECT_EQ(m.num_tokens, 4);  // P1 only
  release(a, m.blocks);
}

TEST(BlockAllocator, ChildOfABlockThatLostACollisionIsNotCached) {
  // P2 collides with cached P1 when it is registered, so P2 is not cached;
  // its child T must not be linked under P1 either.
  BlockAllocator a(4, kBs, true, [](uint64_t parent, std::span<const int32_t> t, std::string_view) {
    return parent * 1000003ULL + std::accumulate(t.begin(), t.end(), 0ULL);
  });
  std::vector<int32_t> p1 = {1, 2, 3, 4}, p2 = {4, 3, 2, 1}, t = {7, 7, 7, 7};
  auto b1 = *a.allocate(1);
  ASSERT_TRUE(a.register_full_block(b1[0], {}, p1, "").is_ok());
  auto b2 = *a.allocate(2);
  PrefixKey k2 = *a.register_full_block(b2[0], {}, p2, "");
  EXPECT_FALSE(a.is_cached(b2[0]));
  EXPECT_EQ(k2.serial, PrefixKey::kUncached);
  ASSERT_TRUE(a.register_full_block(b2[1], k2, t, "").is_ok());
  EXPECT_FALSE(a.is_cached(b2[1]));
  release(a, b2);
  release(a, b1);

  std::vector<int32_t> query = p1;
  query.insert(query.end(), t.begin(), t.end());
  query.push_back(0);
  PrefixMatch m = a.match_prefix(query, "");
  EXPECT_EQ(m.num_tokens, 4);  // P1 only: T was computed after P2
  release(a, m.blocks);
}

TEST(BlockAllocator, DuplicateBlockLinksToTheExistingEntry) {
  BlockAllocator a(8, kBs);
  auto prompt = seq(1, 9);
  auto first = cache_prompt(a, prompt, "");   // one sequence computes and caches it ...
  auto second = cache_prompt(a, prompt, "");  // ... another computed the same prompt meanwhile
  EXPECT_FALSE(a.is_cached(second[0]));
  EXPECT_FALSE(a.is_cached(second[1]));
  release(a, second);
  EXPECT_EQ(a.num_free(), 6);  // duplicates go straight back to the free list
  release(a, first);
  PrefixMatch m = a.match_prefix(prompt, "");
  EXPECT_EQ(m.blocks, first);
  release(a, m.blocks);
}

TEST(BlockAllocator, DuplicateParentStillLetsChildrenBeCached) {
  BlockAllocator a(8, kBs);
  auto prompt = seq(1, 9);
  auto first = cache_prompt(a, seq(1, 4), "");  // only the first block is cached
  auto second = cache_prompt(a, prompt, "");    // duplicate first block, new second block
  EXPECT_FALSE(a.is_cached(second[0]));
  EXPECT_TRUE(a.is_cached(second[1]));
  release(a, second);
  release(a, first);
  PrefixMatch m = a.match_prefix(prompt, "");
  EXPECT_EQ(m.blocks, (std::vector<BlockId>{first[0], second[1]}));
  release(a, m.blocks);
}

TEST(BlockAllocator, ReRegisteringWithOtherContentIsRefused) {
  BlockAllocator a(2, kBs);
  auto b = *a.allocate(1);
  PrefixKey k = *a.register_full_block(b[0], {}, seq(0, 4), "");
  EXPECT_EQ(a.register_full_block(b[0], {}, seq(0, 4), "")->serial, k.serial);  // a fork publishing it again
  EXPECT_EQ(a.register_full_block(b[0], {}, seq(1, 4), "")->serial, PrefixKey::kUncached);
  EXPECT_EQ(a.register_full_block(b[0], {}, seq(0, 4), "x")->serial, PrefixKey::kUncached);
  release(a, b);
}

TEST(BlockAllocator, EvictsLeastRecentlyUsedFirst) {
  BlockAllocator a(3, kBs);
  auto pa = seq(0, 5), pb = seq(10, 5), pc = seq(20, 5);
  auto ba = cache_prompt(a, pa, ""), bb = cache_prompt(a, pb, ""), bc = cache_prompt(a, pc, "");
  release(a, ba);
  release(a, bb);
  release(a, bc);
  // A hit on A makes it the most recently used: order is now B, C, A.
  PrefixMatch ma = a.match_prefix(pa, "");
  ASSERT_EQ(ma.num_tokens, 4);
  release(a, ma.blocks);
  EXPECT_EQ(a.num_free(), 0);
  EXPECT_EQ(a.num_evictable(), 3);

  auto one = a.allocate(1);
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ((*one)[0], bb[0]);
  EXPECT_EQ(a.num_evictions(), 1);
  EXPECT_EQ(a.match_prefix(pb, "").num_tokens, 0);  // its entry is gone
  auto two = a.allocate(1);
  EXPECT_EQ((*two)[0], bc[0]);
  PrefixMatch still = a.match_prefix(pa, "");
  EXPECT_EQ(still.num_tokens, 4);
  EXPECT_FALSE(a.allocate(1).is_ok());  // A is in use again: nothing left to evict
  release(a, still.blocks);
  release(a, *one);
  release(a, *two);
  EXPECT_EQ(a.num_available(), 3);
}

TEST(BlockAllocator, FreeBlocksAreTakenBeforeEvictingCachedOnes) {
  BlockAllocator a(4, kBs);
  auto p = seq(0, 5);
  release(a, cache_prompt(a, p, ""));
  auto got = a.allocate(3);
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(a.num_evictions(), 0);
  PrefixMatch m = a.match_prefix(p, "");
  EXPECT_EQ(m.num_tokens, 4);
  release(a, m.blocks);
  release(a, *got);
}

TEST(BlockAllocator, DisabledPrefixCachingNeverHits) {
  BlockAllocator a(4, kBs, /*enable_prefix_caching=*/false);
  auto p = seq(0, 5);
  auto blocks = cache_prompt(a, p, "");
  EXPECT_FALSE(a.is_cached(blocks[0]));
  release(a, blocks);
  EXPECT_EQ(a.num_free(), 4);
  EXPECT_EQ(a.match_prefix(p, "").num_tokens, 0);
  EXPECT_EQ(a.prefix_cache_queries(), 0);
}

TEST(BlockAllocator, ResetPrefixCacheDropsOnlyUnusedEntries) {
  BlockAllocator a(4, kBs);
  auto p = seq(0, 5), q = seq(40, 5);
  release(a, cache_prompt(a, p, ""));
  auto held = cache_prompt(a, q, "");
  EXPECT_EQ(a.reset_prefix_cache(), 1);
  EXPECT_EQ(a.num_free(), 3);
  EXPECT_EQ(a.match_prefix(p, "").num_tokens, 0);
  PrefixMatch m = a.match_prefix(q, "");
  EXPECT_EQ(m.num_tokens, 4);
  release(a, m.blocks);
  release(a, held);
}

TEST(BlockAllocator, RegisterRejectsBadArguments) {
  BlockAllocator a(2, kBs);
  auto b = (*a.allocate(1))[0];
  EXPECT_FALSE(a.register_full_block(b, {}, seq(0, 3), "").is_ok());
  EXPECT_FALSE(a.register_full_block(1, {}, seq(0, 4), "").is_ok());  // not live
  EXPECT_FALSE(a.allocate(-1).is_ok());
}

}  // namespace
}  // namespace tern
