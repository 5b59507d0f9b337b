// The device step's plan on hand-made batches: the exact int32 metadata the
// CUDA kernels read (a decode batch padded to its bucket, prefill tiles, a
// mixed step with singles and tiles, fed tokens, tables over several
// blocks, want_logits and all_logits rows), the bucket choice, and every check that must
// refuse a batch before any GPU work.
#include "model/ernie4_5/device_step_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tern {
namespace {

constexpr int32_t kUntouched = -7;  // what pack must leave past layout.end

// A chunk that owns its storage (SequenceChunk only views it).
struct Chunk {
  std::vector<int32_t> tokens;
  int64_t start_pos = 0;
  std::vector<int32_t> table;
  bool want = true;
  bool all = false;  // all_logits: a row for every token
};

struct Batch {
  std::vector<Chunk> chunks;
  std::vector<SequenceChunk> views;
  explicit Batch(std::vector<Chunk> c) : chunks(std::move(c)) {
    for (const Chunk& k : chunks) views.push_back({k.tokens, k.start_pos, k.table, k.want, k.all});
  }
};

// vocab 100, blocks of 4 positions, a pool of 10 blocks (10 is the pad block).
struct Fixture {
  std::vector<int64_t> buckets{1, 2, 4};
  StepPlanLimits limits;
  Fixture() {
    limits.vocab_size = 100;
    limits.block_size = 4;
    limits.num_blocks = 10;
    limits.pad_block = 10;
    limits.max_tokens = 64;
    limits.decode_buckets = buckets;
    limits.decode_capacity = 200;
    limits.prefill_tile = 0;
  }
};

// Plans and packs; the buffer is longer than the layout so stray writes show.
std::vector<int32_t> pack(const DeviceStepPlan& plan) {
  std::vector<int32_t> out(static_cast<size_t>(plan.layout.end) + 8, kUntouched);
  plan.pack(out);
  for (size_t i = static_cast<size_t>(plan.layout.end); i < out.size(); ++i) EXPECT_EQ(out[i], kUntouched) << i;
  out.resize(static_cast<size_t>(plan.layout.end));
  return out;
}

DeviceStepPlan plan_of(const StepPlanLimits& limits, const StepInputs& in) {
  Result<DeviceStepPlan> plan = plan_device_step(limits, in);
  EXPECT_TRUE(plan.is_ok()) << plan.status().to_string();
  return plan.is_ok() ? *plan : DeviceStepPlan{};
}

Status error_of(const StepPlanLimits& limits, const StepInputs& in) {
  Result<DeviceStepPlan> plan = plan_device_step(limits, in);
  EXPECT_FALSE(plan.is_ok());
  return plan.status();
}

void expect_error(const Status& s, const std::string& part) {
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
}

TEST(DeviceStepPlan, DecodeBatchIsPaddedToItsBucketWithThePadBlock) {
  Fixture f;
  // Three one-token chunks: bucket 4, one padding row.
  Batch b({{{7}, 5, {3, 8}}, {{9}, 0, {2}}, {{11}, 8, {1, 4, 6}}});
  const DeviceStepPlan plan = plan_of(f.limits, {b.views, {}, {}, {}});
  EXPECT_TRUE(plan.decode());
  EXPECT_EQ(plan.bucket, 4);
  EXPECT_EQ(plan.bucket_index, 2u);
  EXPECT_EQ(plan.meta_tokens, 4);
  EXPECT_EQ(plan.meta_rows, 4);
  EXPECT_EQ(plan.counts.tokens, 3);
  EXPECT_EQ(plan.counts.rows, 3);
  EXPECT_EQ(plan.counts.host_rows, 3);
  EXPECT_TRUE(plan.one_token);
  EXPECT_EQ(plan.split_tokens, 4);
  EXPECT_EQ(plan.split_ctx, -1);  // a graph cannot know the contexts
  EXPECT_EQ(plan.layout.tables, 24);
  const std::vector<int32_t> want = {
      7,  9, 11, 0,              // ids (the pad row: token 0)
      5,  0, 8,  0,              // positions
      33, 8, 24, 40,             // slots: 8*4+1, 2*4+0, 6*4+0, the pad block's slot 0
      0,  1, 2,  3,              // token_seq
      0,  1, 2,  3,              // logit_rows
      0,  2, 3,  6,              // table_offsets (the pad row reads the pad entry)
      3,  8, 2,  1, 4, 6, 10,    // tables, then the pad block
  };
  EXPECT_EQ(pack(plan), want);
}

TEST(DeviceStepPlan, DecodeFedTokensFollowTheTables) {
  Fixture f;
  Batch b({{{7}, 5, {3, 8}}, {{9}, 0, {2}}});
  const std::vector<int32_t> feedback = {-1, 1};
  const std::vector<uint8_t> last_picked = {0, 1};
  const std::vector<uint8_t> modes = {kPickArgmax, kPickArgmax};
  const DeviceStepPlan plan = plan_of(f.limits, {b.views, modes, feedback, last_picked});
  ASSERT_EQ(plan.bucket, 2);
  EXPECT_EQ(plan.counts.fed, 1);
  EXPECT_TRUE(plan.counts.any_argmax);
  EXPECT_EQ(plan.counts.host_rows, 0);
  EXPECT_EQ(plan.layout.fed, 12 + 3 + 1);
  const std::vector<int32_t> want = {7, 9, 5, 0, 33, 8, 0, 1, 0, 1, 0, 2, 3, 8, 2, 10, /* fed: */ 1, 1};
  EXPECT_EQ(pack(plan), want);
}

TEST(DeviceStepPlan, CaptureStepIsAllPadding) {
  std::vector<int32_t> out(16, kUntouched);
  EXPECT_EQ(pack_decode_meta({}, 2, 4, 10, out), 13);
  const std::vector<int32_t> want = {0, 0, 0, 0, 40, 40, 0, 1, 0, 1, 0, 0, 10, kUntouched, kUntouched, kUntouched};
  EXPECT_EQ(out, want);
}

TEST(DeviceStepPlan, DecodeFallsBackToTheGeneralLayout) {
  Fixture f;
  // More sequences than the largest bucket.
  Batch five({{{1}, 0, {0}}, {{2}, 0, {1}}, {{3}, 0, {2}}, {{4}, 0, {3}}, {{5}, 0, {4}}});
  DeviceStepPlan plan = plan_of(f.limits, {five.views, {}, {}, {}});
  EXPECT_FALSE(plan.decode());
  EXPECT_EQ(plan.meta_tokens, 5);
  EXPECT_EQ(plan.split_tokens, 5);
  EXPECT_EQ(plan.split_ctx, 1);
  // A one-token chunk without logits: rows != sequences.
  Batch no_logits({{{1}, 0, {0}}, {{2}, 0, {1}, false}});
  plan = plan_of(f.limits, {no_logits.views, {}, {}, {}});
  EXPECT_FALSE(plan.decode());
  EXPECT_TRUE(plan.one_token);
  EXPECT_EQ(plan.meta_rows, 1);
  // Block tables past the fixed buffer: 6 x 2 entries, 2 tables and the pad entry need 15.
  Batch two({{{1}, 0, {0}}, {{2}, 0, {1}}});
  f.limits.decode_capacity = 14;
  EXPECT_FALSE(plan_of(f.limits, {two.views, {}, {}, {}}).decode());
  f.limits.decode_capacity = 15;
  EXPECT_TRUE(plan_of(f.limits, {two.views, {}, {}, {}}).decode());
  // No buckets at all.
  f.limits.decode_buckets = {};
  EXPECT_FALSE(plan_of(f.limits, {two.views, {}, {}, {}}).decode());
}

TEST(DeviceStepPlan, PrefillChunkInQueryTiles) {
  Fixture f;
  f.limits.prefill_tile = 4;
  // Positions 2..7 over blocks 5 and 7.
  Batch b({{{10, 11, 12, 13, 14, 15}, 2, {5, 7}}});
  const DeviceStepPlan plan = plan_of(f.limits, {b.views, {}, {}, {}});
  EXPECT_FALSE(plan.decode());
  EXPECT_FALSE(plan.one_token);
  EXPECT_EQ(plan.num_singles, 0);
  EXPECT_EQ(plan.num_tiles, 2);
  EXPECT_EQ(plan.split_tokens, 1);
  EXPECT_EQ(plan.split_ctx, 8);
  const std::vector<int32_t> want = {
      10, 11, 12, 13, 14, 15,  // ids
      2,  3,  4,  5,  6,  7,   // positions
      22, 23, 28, 29, 30, 31,  // slots: block 5 then block 7
      0,  0,  0,  0,  0,  0,   // token_seq
      5,                       // logit_rows: the chunk's last token
      0,                       // table_offsets
      5,  7,                   // tables
      0,  4,  6,  0,           // tiles: (first, count, keys seen, table offset)
      4,  2,  8,  0,
  };
  EXPECT_EQ(pack(plan), want);
}

TEST(DeviceStepPlan, MixedStepListsSinglesBesideTilesAndFedTokens) {
  Fixture f;
  f.limits.prefill_tile = 2;
  Batch b({{{3}, 4, {9, 1}}, {{1, 2, 3, 4, 5}, 0, {0, 2}}, {{6}, 0, {4}, false}});
  const std::vector<uint8_t> modes = {kPickArgmax, kPickOnHost};
  const std::vector<int32_t> feedback = {-1, -1, 0};
  const std::vector<uint8_t> last_picked = {1};
  const DeviceStepPlan plan = plan_of(f.limits, {b.views, modes, feedback, last_picked});
  EXPECT_FALSE(plan.decode());
  EXPECT_EQ(plan.counts.tokens, 7);
  EXPECT_EQ(plan.counts.rows, 2);
  EXPECT_EQ(plan.counts.host_rows, 1);
  EXPECT_TRUE(plan.counts.any_argmax);
  EXPECT_EQ(plan.counts.fed, 1);
  EXPECT_EQ(plan.num_singles, 2);
  EXPECT_EQ(plan.num_tiles, 3);
  EXPECT_EQ(plan.split_tokens, 2);  // the singles go to the split decode kernel
  EXPECT_EQ(plan.split_ctx, 5);
  EXPECT_EQ(plan.mode(0), kPickArgmax);
  EXPECT_EQ(plan.mode(1), kPickOnHost);
  const std::vector<int32_t> want = {
      3, 1, 2, 3, 4, 5, 6,    // ids
      4, 0, 1, 2, 3, 4, 0,    // positions
      4, 0, 1, 2, 3, 8, 16,   // slots
      0, 1, 1, 1, 1, 1, 2,    // token_seq
      0, 5,                   // logit_rows: chunk 2 wants none
      0, 2, 4,                // table_offsets
      9, 1, 0, 2, 4,          // tables
      0, 6,                   // singles: the one-token chunks' rows
      1, 2, 2, 2,             // tiles: (first, count, keys seen, table offset)
      3, 2, 4, 2,
      5, 1, 5, 2,
      6, 0,                   // fed: row 6 takes the last step's pick 0
  };
  EXPECT_EQ(pack(plan), want);
}

TEST(DeviceStepPlan, AllLogitsChunksListARowForEveryToken) {
  Fixture f;
  // A scored prompt chunk without a pick (3 rows), a decode token, a scored
  // last chunk (2 rows, its last also the pick): 6 rows with logits.
  Batch b({{{1, 2, 3}, 0, {0}, false, true}, {{4}, 7, {1, 2}}, {{5, 6}, 3, {3, 4}, true, true}});
  const std::vector<uint8_t> modes = {kPickOnHost, kPickOnHost, kPickOnHost, kPickArgmax, kPickOnHost, kPickOnHost};
  const DeviceStepPlan plan = plan_of(f.limits, {b.views, modes, {}, {}});
  EXPECT_FALSE(plan.decode());
  EXPECT_EQ(plan.counts.rows, 6);
  EXPECT_EQ(plan.counts.host_rows, 5);
  EXPECT_EQ(plan.meta_rows, 6);
  const std::vector<int32_t> want = {
      1,  2,  3,  4,  5,  6,         // ids
      0,  1,  2,  7,  3,  4,         // positions
      0,  1,  2,  11, 15, 16,        // slots
      0,  0,  0,  1,  2,  2,         // token_seq
      0,  1,  2,  3,  4,  5,         // logit_rows: every token of chunks 0 and 2
      0,  1,  3,                     // table_offsets
      0,  1,  2,  3,  4,             // tables
  };
  EXPECT_EQ(pack(plan), want);
  const std::vector<uint8_t> short_modes = {kPickOnHost, kPickArgmax, kPickOnHost};
  expect_error(error_of(f.limits, {b.views, short_modes, {}, {}}), "3 row modes for 6 rows with logits");
  // One-token scored chunks still make a decode step: one row per sequence.
  Batch one({{{1}, 0, {0}, false, true}, {{2}, 0, {1}}});
  EXPECT_TRUE(plan_of(f.limits, {one.views, {}, {}, {}}).decode());
}

TEST(DeviceStepPlan, TablesCopyOnlyTheBlocksThePositionsUse) {
  Fixture f;  // no tiles: every token alone
  // Positions 3..11 span three blocks; the fourth entry is the engine's spare.
  Batch b({{{1, 2}, 0, {6}, false}, {{20, 21, 22, 23, 24, 25, 26, 27, 28}, 3, {5, 6, 7, 8}}});
  const DeviceStepPlan plan = plan_of(f.limits, {b.views, {}, {}, {}});
  EXPECT_EQ(plan.counts.table_entries, 4);
  EXPECT_EQ(plan.num_tiles, 0);
  EXPECT_EQ(plan.split_tokens, 11);
  EXPECT_EQ(plan.split_ctx, 12);
  const std::vector<int32_t> want = {
      1,  2,  20, 21, 22, 23, 24, 25, 26, 27, 28,  // ids
      0,  1,  3,  4,  5,  6,  7,  8,  9,  10, 11,  // positions
      24, 25, 23, 24, 25, 26, 27, 28, 29, 30, 31,  // slots
      0,  0,  1,  1,  1,  1,  1,  1,  1,  1,  1,   // token_seq
      10,                                          // logit_rows
      0,  1,                                       // table_offsets
      6,  5,  6,  7,                               // tables
  };
  EXPECT_EQ(pack(plan), want);
}

TEST(DeviceStepPlan, RefusesTokensOutsideTheVocabulary) {
  Fixture f;
  Batch b({{{1, 100}, 0, {0}}});
  expect_error(error_of(f.limits, {b.views, {}, {}, {}}), "chunk 0: token id 100 at index 1 outside the vocabulary");
  Batch negative({{{1}, 0, {0}}, {{-1}, 0, {0}}});
  expect_error(error_of(f.limits, {negative.views, {}, {}, {}}), "chunk 1: token id -1");
}

TEST(DeviceStepPlan, RefusesShortTablesAndBlocksOutsideThePool) {
  Fixture f;
  Batch shorter({{{1}, 4, {3}}});
  expect_error(error_of(f.limits, {shorter.views, {}, {}, {}}),
               "block table has 1 entries; positions up to 5 need 2");
  Batch pad({{{1}, 4, {3, 10}}});  // the pad block is not the engine's
  expect_error(error_of(f.limits, {pad.views, {}, {}, {}}), "entry 1 names block 10 outside the pool of 10");
  Batch negative({{{1}, 0, {-1}}});
  expect_error(error_of(f.limits, {negative.views, {}, {}, {}}), "names block -1");
  // Entries past the positions are not the step's: not checked.
  Batch spare({{{1}, 0, {3, 99}}});
  EXPECT_TRUE(plan_device_step(f.limits, {spare.views, {}, {}, {}}).is_ok());
}

TEST(DeviceStepPlan, RefusesBadChunks) {
  Fixture f;
  expect_error(error_of(f.limits, {{}, {}, {}, {}}), "empty batch");
  Batch empty({{{}, 0, {0}}});
  expect_error(error_of(f.limits, {empty.views, {}, {}, {}}), "chunk 0: no tokens");
  Batch before({{{1}, -1, {0}}});
  expect_error(error_of(f.limits, {before.views, {}, {}, {}}), "start_pos -1 out of range");
}

TEST(DeviceStepPlan, RefusesMoreTokensThanTheWorkspace) {
  Fixture f;
  std::vector<int32_t> table(17, 0);
  Batch b({{std::vector<int32_t>(65, 1), 0, table}});
  expect_error(error_of(f.limits, {b.views, {}, {}, {}}), "65 tokens in one step");
  f.limits.max_tokens = 65;
  EXPECT_TRUE(plan_device_step(f.limits, {b.views, {}, {}, {}}).is_ok());
}

TEST(DeviceStepPlan, RefusesBadRowModes) {
  Fixture f;
  Batch b({{{1}, 0, {0}}, {{2}, 0, {1}}});
  const std::vector<uint8_t> three = {kPickArgmax, 3};
  expect_error(error_of(f.limits, {b.views, three, {}, {}}), "chunk 1: row mode 3 is not one of 0, 1, 2");
  const std::vector<uint8_t> one = {kPickArgmax};
  expect_error(error_of(f.limits, {b.views, one, {}, {}}), "1 row modes for 2 rows with logits");
  const std::vector<uint8_t> sampled = {kPickSample, kPickOnHost};
  const DeviceStepPlan plan = plan_of(f.limits, {b.views, sampled, {}, {}});
  EXPECT_EQ(plan.counts.sample_rows, 1);
  EXPECT_EQ(plan.counts.host_rows, 1);
  EXPECT_FALSE(plan.counts.any_argmax);
}

TEST(DeviceStepPlan, RefusesFeedbackTheLastStepDidNotPick) {
  Fixture f;
  Batch b({{{1}, 0, {0}}, {{2}, 0, {1}}});
  const std::vector<uint8_t> last_picked = {1, 0};
  const std::vector<int32_t> one = {0};
  expect_error(error_of(f.limits, {b.views, {}, one, last_picked}), "1 feedback entries for 2 chunks");
  const std::vector<int32_t> host_row = {-1, 1};  // row 1 went to the host
  expect_error(error_of(f.limits, {b.views, {}, host_row, last_picked}),
               "chunk 1 takes the pick of row 1, which the step before did not pick");
  const std::vector<int32_t> past = {2, -1};  // the step before had two rows
  expect_error(error_of(f.limits, {b.views, {}, past, last_picked}), "chunk 0 takes the pick of row 2");
  const std::vector<int32_t> good = {0, -1};
  EXPECT_EQ(plan_of(f.limits, {b.views, {}, good, last_picked}).counts.fed, 1);
}

}  // namespace
}  // namespace tern
