// The decode kernel's split of a context's keys over the blocks of a kv
// head (backend/cuda/key_splits.h): every split has keys, together they
// cover the context, and the block count stays inside the grid's share.
#include "backend/cuda/key_splits.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tern::cuda
