// The decode kernel's split of a context's keys over the blocks of a kv
// head (backend/cuda/key_splits.h): every split has keys, together they
// cover the context, and the block count stays inside the grid's share;
// and the decode attention's split count for a batch.
#include "backend/cuda/key_splits.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace tern::cuda {
namespace {

TEST(KeySplits, EverySplitHasKeysAndTheyCoverTheContext) {
  // (pass, unit): the tensor-core form (128 keys a pass in 8-key chunks) and the CUDA-core one (32-key tiles).
  const int forms[][2] = {{128, 8}, {32, 32}};
  for (const auto& form : forms) {
    const int pass = form[0], unit = form[1];
    for (int max_splits = 1; max_splits <= 32; ++max_splits) {
      for (int ctx = 1; ctx <= 20000; ctx += ctx < 600 ? 1 : 37) {
        const KeySplits k = key_splits(ctx, pass, unit, max_splits);
        SCOPED_TRACE("ctx " + std::to_string(ctx) + " pass " + std::to_string(pass) + " max_splits " +
                     std::to_string(max_splits));
        ASSERT_GE(k.splits, 1);
        ASSERT_LE(k.splits, max_splits);
        ASSERT_GT(k.per, 0);
        ASSERT_EQ(k.per % unit, 0);
        ASSERT_LT(static_cast<int64_t>(k.splits - 1) * k.per, ctx);  // the last split has keys
        ASSERT_GE(static_cast<int64_t>(k.splits) * k.per, ctx);      // the splits cover the context
        if (ctx <= pass * max_splits) {
          ASSERT_LE(k.per, pass);  // one pass per split while the grid allows
        }
      }
    }
  }
}

TEST(KeySplits, RoundingDropsEmptySplits) {
  // 129 keys, 128-key passes in 8-key chunks: 2 splits of 72 (65 rounded up to a chunk).
  constexpr KeySplits k = key_splits(129, 128, 8, 32);
  static_assert(k.splits == 2 && k.per == 72);
  // 33 keys in 32-key tiles with room for 32 splits: 2 splits (32 + 1).
  EXPECT_EQ(key_splits(33, 32, 32, 32).splits, 2);
  // 1,000 keys over at most 3 splits: several passes each.
  const KeySplits few = key_splits(1000, 128, 8, 3);
  EXPECT_EQ(few.splits, 3);
  EXPECT_EQ(few.per, 336);
  // Rounding that empties the last split: 17 keys, 16-key units, 4 wanted by a 5-key pass -> 2 splits of 16.
  const KeySplits dropped = key_splits(17, 5, 16, 4);
  EXPECT_EQ(dropped.per, 16);
  EXPECT_EQ(dropped.splits, 2);
}

// The decode attention's split count: the most splits that fit in one wave, which has the fewest waves
// per split among the counts up to the one that first fills the slots (the smallest on a tie).
TEST(AttentionSplits, FewestWavesPerSplit) {
  // 132 SMs x 2 blocks, 2 kv heads: batches 1, 8, 64, 70, 100, 128, 131 and 256.
  static_assert(attention_splits(2, 264, 32) == 32);
  EXPECT_EQ(attention_splits(16, 264, 32), 16);  // 256 blocks, one wave (17 would make 272: two)
  EXPECT_EQ(attention_splits(128, 264, 32), 2);  // 256 blocks, not 384 in 1.45 waves
  EXPECT_EQ(attention_splits(140, 264, 32), 1);  // 280 blocks in 2 waves take as long as 140 in one
  EXPECT_EQ(attention_splits(200, 264, 32), 1);
  EXPECT_EQ(attention_splits(256, 264, 32), 1);
  EXPECT_EQ(attention_splits(262, 264, 32), 1);  // 524 blocks in 1.98 waves: the same time, with merges
  EXPECT_EQ(attention_splits(512, 264, 32), 1);
  EXPECT_EQ(attention_splits(88, 264, 32), 3);   // 264 exactly
  EXPECT_EQ(attention_splits(16, 264, 5), 5);    // the cap
  EXPECT_EQ(attention_splits(0, 264, 32), 1);
  EXPECT_EQ(attention_splits(16, 0, 32), 1);
  for (int64_t slots : {264, 396, 216, 112}) {
    for (int64_t blocks = 1; blocks <= 1200; ++blocks) {
      for (int cap : {1, 3, 32}) {
        const int s = attention_splits(blocks, slots, cap);
        const auto reach = static_cast<int>((slots + blocks - 1) / blocks);
        const int most = std::max(1, std::min(cap, reach));
        ASSERT_GE(s, 1);
        ASSERT_LE(s, most);
        // The fewest waves per split among 1..most, the smallest count on a tie.
        const auto waves = [&](int n) { return (blocks * n + slots - 1) / slots; };
        for (int n = 1; n <= most; ++n) {
          ASSERT_LE(waves(s) * n, waves(n) * s) << blocks << " blocks, " << slots << " slots, cap " << cap;
          if (n < s) {
            ASSERT_LT(waves(s) * n, waves(n) * s) << "a smaller count ties: " << blocks << " blocks";
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tern::cuda
