// BlockTable: all-or-nothing growth, slot mapping, RAII release, forks with
// copy on write, and prefix adoption / publication through a table.
#include "kv/block_table.h"

#include <gtest/gtest.h>

#include <numeric>
#include <optional>
#include <vector>

namespace tern {
namespace {

constexpr int32_t kBs = 4;

std::vector<int32_t> seq(int32_t first, int32_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(BlockTable, GrowsBlockByBlockAndMapsSlots) {
  BlockAllocator a(8, kBs);
  BlockTable t(a);
  auto copies = t.ensure_capacity(5);
  ASSERT_TRUE(copies.is_ok());
  EXPECT_TRUE(copies->empty());
  EXPECT_EQ(t.num_tokens(), 5);
  ASSERT_EQ(t.blocks().size(), 2u);
  EXPECT_EQ(t.capacity(), 8);
  ASSERT_TRUE(t.ensure_capacity(8).is_ok());  // fits in the partial block
  EXPECT_EQ(t.blocks().size(), 2u);
  ASSERT_TRUE(t.ensure_capacity(3).is_ok());  // never shrinks
  EXPECT_EQ(t.num_tokens(), 8);
  ASSERT_TRUE(t.ensure_capacity(9).is_ok());
  ASSERT_EQ(t.blocks().size(), 3u);
  for (int64_t pos = 0; pos < 9; ++pos) {
    Slot s = t.slot_of(pos);
    EXPECT_EQ(s.block, t.blocks()[pos / kBs]);
    EXPECT_EQ(s.offset, pos % kBs);
  }
  EXPECT_EQ(a.num_used(), 3);
}

// Rejected speculative drafts: the slots past the kept tokens go, and with
// them the blocks no kept token uses; growth afterwards starts from there.
TEST(BlockTable, TruncateGivesBackTheBlocksPastTheKeptTokens) {
  BlockAllocator a(8, kBs);
  BlockTable t(a);
  ASSERT_TRUE(t.ensure_capacity(11).is_ok());
  ASSERT_EQ(t.blocks().size(), 3u);
  const BlockId first = t.blocks()[0], second = t.blocks()[1];
  t.truncate(12);  // past the end: nothing
  EXPECT_EQ(t.num_tokens(), 11);
  t.truncate(6);
  EXPECT_EQ(t.num_tokens(), 6);
  ASSERT_EQ(t.blocks().size(), 2u);
  EXPECT_EQ(t.blocks()[0], first);
  EXPECT_EQ(t.blocks()[1], second);
  EXPECT_EQ(a.num_used(), 2);
  t.truncate(4);  // on a block boundary
  EXPECT_EQ(t.blocks().size(), 1u);
  EXPECT_EQ(a.num_used(), 1);
  ASSERT_TRUE(t.ensure_capacity(9).is_ok());
  EXPECT_EQ(t.blocks().size(), 3u);
  EXPECT_EQ(t.slot_of(8).offset, 0);
  t.truncate(0);
  EXPECT_TRUE(t.blocks().empty());
  EXPECT_EQ(a.num_used(), 0);
}

TEST(BlockTable, GrowthIsAllOrNothing) {
  BlockAllocator a(4, kBs);
  BlockTable big(a), small(a);
  ASSERT_TRUE(big.ensure_capacity(10).is_ok());  // 3 blocks
  ASSERT_TRUE(small.ensure_capacity(2).is_ok());
  const std::vector<BlockId> before(small.blocks().begin(), small.blocks().end());
  auto r = small.ensure_capacity(12);  // needs 2 more, 0 left
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(small.num_tokens(), 2);
  EXPECT_EQ(std::vector<BlockId>(small.blocks().begin(), small.blocks().end()), before);
  EXPECT_EQ(a.num_used(), 4);
  big.release();
  EXPECT_TRUE(small.ensure_capacity(12).is_ok());
}

TEST(BlockTable, DestructorAndMoveReturnEveryBlock) {
  BlockAllocator a(6, kBs);
  {
    BlockTable t(a);
    ASSERT_TRUE(t.ensure_capacity(9).is_ok());
    BlockTable moved(std::move(t));
    EXPECT_TRUE(t.blocks().empty());  // NOLINT: a moved-from table is empty
    EXPECT_EQ(moved.num_tokens(), 9);
    BlockTable other(a);
    ASSERT_TRUE(other.ensure_capacity(4).is_ok());
    EXPECT_EQ(a.num_used(), 4);
    other = std::move(moved);  // frees other's own block first
    EXPECT_EQ(a.num_used(), 3);
    std::vector<BlockTable> many;
    for (int i = 0; i < 3; ++i) {
      many.emplace_back(a);
      ASSERT_TRUE(many.back().ensure_capacity(1).is_ok());
    }
    EXPECT_EQ(a.num_free(), 0);
  }
  EXPECT_EQ(a.num_free(), 6);
}

TEST(BlockTable, UnboundTableFailsCleanly) {
  BlockTable t;
  EXPECT_FALSE(t.ensure_capacity(1).is_ok());
  EXPECT_FALSE(t.match_prefix(seq(0, 9)).is_ok());
  EXPECT_TRUE(t.fork().blocks().empty());
  t.release();
}

TEST(BlockTable, ForkCopiesTheSharedPartialBlockOnWrite) {
  BlockAllocator a(8, kBs);
  BlockTable parent(a);
  ASSERT_TRUE(parent.ensure_capacity(6).is_ok());  // one full block, one partial
  BlockTable child = parent.fork();
  EXPECT_EQ(child.num_tokens(), 6);
  for (BlockId b : parent.blocks()) EXPECT_EQ(a.ref_count(b), 2);
  EXPECT_EQ(child.blocks_needed(7), 1);

  const BlockId full = parent.blocks()[0], partial = parent.blocks()[1];
  auto copies = child.ensure_capacity(7);
  ASSERT_TRUE(copies.is_ok());
  ASSERT_EQ(copies->size(), 1u);
  EXPECT_EQ((*copies)[0].src, partial);
  EXPECT_EQ((*copies)[0].dst, child.blocks()[1]);
  EXPECT_NE(child.blocks()[1], partial);
  EXPECT_EQ(child.blocks()[0], full);  // full blocks stay shared
  EXPECT_EQ(a.ref_count(full), 2);
  EXPECT_EQ(a.ref_count(partial), 1);

  // The parent is now the sole owner: it writes in place.
  copies = parent.ensure_capacity(8);
  ASSERT_TRUE(copies.is_ok());
  EXPECT_TRUE(copies->empty());
  EXPECT_EQ(parent.blocks()[1], partial);
}

TEST(BlockTable, ForkAtABlockBoundaryNeedsNoCopy) {
  BlockAllocator a(8, kBs);
  BlockTable parent(a);
  ASSERT_TRUE(parent.ensure_capacity(8).is_ok());
  BlockTable child = parent.fork();
  auto copies = child.ensure_capacity(9);
  ASSERT_TRUE(copies.is_ok());
  EXPECT_TRUE(copies->empty());
  EXPECT_EQ(a.num_used(), 3);
}

TEST(BlockTable, CopyOnWriteIsAllOrNothing) {
  BlockAllocator a(3, kBs);
  BlockTable parent(a);
  ASSERT_TRUE(parent.ensure_capacity(6).is_ok());
  BlockTable child = parent.fork();
  EXPECT_EQ(child.blocks_needed(9), 2);  // copy + one new block, only one free
  auto r = child.ensure_capacity(9);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(child.blocks()[1], parent.blocks()[1]);  // still shared
  EXPECT_EQ(a.ref_count(parent.blocks()[1]), 2);
  EXPECT_EQ(child.num_tokens(), 6);
  EXPECT_EQ(a.num_free(), 1);
}

TEST(BlockTable, PublishedPromptIsAdoptedByTheNextRequest) {
  BlockAllocator a(8, kBs);
  auto prompt = seq(10, 10);
  {
    BlockTable first(a, "salt");
    EXPECT_EQ(*first.match_prefix(prompt), 0);
    ASSERT_TRUE(first.ensure_capacity(10).is_ok());
    first.register_full_blocks(std::span<const int32_t>(prompt).first(5));  // one block computed so far
    EXPECT_TRUE(a.is_cached(first.blocks()[0]));
    EXPECT_FALSE(a.is_cached(first.blocks()[1]));
    first.register_full_blocks(prompt);
    EXPECT_TRUE(a.is_cached(first.blocks()[1]));
    EXPECT_FALSE(a.is_cached(first.blocks()[2]));  // partial
  }
  EXPECT_EQ(a.num_evictable(), 2);
  BlockTable second(a, "salt");
  EXPECT_EQ(*second.match_prefix(prompt), 8);
  EXPECT_EQ(second.num_tokens(), 8);
  EXPECT_FALSE(second.match_prefix(prompt).is_ok());  // only on an empty table
  ASSERT_TRUE(second.ensure_capacity(10).is_ok());
  EXPECT_EQ(a.num_used(), 3);
  BlockTable other_tenant(a, "other");
  EXPECT_EQ(*other_tenant.match_prefix(prompt), 0);
}

TEST(BlockTable, ChainContinuesAfterAnAdoptedPrefix) {
  BlockAllocator a(8, kBs);
  auto prompt = seq(0, 13);
  {
    BlockTable t(a);
    ASSERT_TRUE(t.ensure_capacity(5).is_ok());
    t.register_full_blocks(std::span<const int32_t>(prompt).first(5));
  }
  {
    BlockTable t(a);
    EXPECT_EQ(*t.match_prefix(prompt), 4);
    ASSERT_TRUE(t.ensure_capacity(13).is_ok());
    t.register_full_blocks(prompt);  // blocks 1 and 2 join the chain after block 0
  }
  BlockTable t(a);
  EXPECT_EQ(*t.match_prefix(prompt), 12);
}

TEST(BlockTable, ForkedSequencesPublishTheirOwnContinuations) {
  BlockAllocator a(16, kBs);
  auto prompt = seq(0, 6);
  BlockTable parent(a);
  ASSERT_TRUE(parent.ensure_capacity(6).is_ok());
  parent.register_full_blocks(prompt);
  BlockTable child = parent.fork();
  auto p_tokens = prompt, c_tokens = prompt;
  for (int i = 0; i < 6; ++i) {
    p_tokens.push_back(100 + i);
    c_tokens.push_back(200 + i);
  }
  ASSERT_TRUE(parent.ensure_capacity(12).is_ok());
  ASSERT_TRUE(child.ensure_capacity(12).is_ok());
  parent.register_full_blocks(p_tokens);
  child.register_full_blocks(c_tokens);
  for (const auto* tokens : {&p_tokens, &c_tokens}) {
    auto query = *tokens;
    query.push_back(0);
    BlockTable t(a);
    EXPECT_EQ(*t.match_prefix(query), 12);
  }
  EXPECT_EQ(parent.blocks()[0], child.blocks()[0]);
  EXPECT_NE(parent.blocks()[1], child.blocks()[1]);
}

TEST(BlockTable, ReleaseEvictsTheTailBeforeTheHead) {
  BlockAllocator a(3, kBs);
  auto prompt = seq(0, 9);
  {
    BlockTable t(a);
    ASSERT_TRUE(t.ensure_capacity(8).is_ok());
    t.register_full_blocks(prompt);
  }
  BlockTable filler(a);
  ASSERT_TRUE(filler.ensure_capacity(8).is_ok());  // the free block, then one eviction
  EXPECT_EQ(a.num_evictions(), 1);
  BlockTable t(a);
  EXPECT_EQ(*t.match_prefix(prompt), 4);  // the head survived: a shorter prefix still hits
}

}  // namespace
}  // namespace tern
