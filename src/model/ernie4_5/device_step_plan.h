// The host half of one engine step on a device, planned apart from its
// launches (FlashInfer's plan/run): the batch checked, the decode bucket
// chosen, and the step's int32 metadata packed in the exact layout the CUDA
// kernels read. No CUDA headers: the plan is tested on the CPU, and the CUDA
// step (model/ernie4_5/cuda/device_step.cpp) uploads what it packs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "base/status.h"
#include "model/forward_batch.h"

namespace tern {

// How a row with logits becomes a token (DeviceModel::forward_step's row modes).
constexpr uint8_t kPickOnHost = 0;  // the logits go to the host
constexpr uint8_t kPickArgmax = 1;  // the argmax, folded into the LM head
constexpr uint8_t kPickSample = 2;  // sampled on the device

// What the device fixed at creation that a step's plan depends on. Read by
// plan_device_step only; the spans are not kept.
struct StepPlanLimits {
  int64_t vocab_size = 0;
  int64_t block_size = 0;
  int64_t num_blocks = 0;  // blocks a block table may name: [0, num_blocks)
  int32_t pad_block = 0;   // the block that padded decode rows write and read
  int64_t max_tokens = 0;  // tokens per step the workspace was planned for
  std::span<const int64_t> decode_buckets;  // ascending batch sizes; empty: no decode steps
  int64_t decode_capacity = 0;  // int32 entries the decode metadata buffer holds
  int prefill_tile = 0;         // tokens per attention query tile; 0: no tiles
};

// One step's inputs, all borrowed from the caller for as long as the plan is used.
struct StepInputs {
  std::span<const SequenceChunk> batch;
  std::span<const uint8_t> modes;        // one per row with logits (logit_rows_of), or empty: all kPickOnHost
  std::span<const int32_t> feedback;     // empty, or per chunk: r >= 0 takes the last step's pick of row r
  std::span<const uint8_t> last_picked;  // per row of the step before: nonzero where the device picked it
};

// What the batch adds up to, found while checking it.
struct StepCounts {
  int64_t tokens = 0, rows = 0, table_entries = 0, host_rows = 0, sample_rows = 0, max_ctx = 0, fed = 0;
  bool any_argmax = false;
};

// Offsets, in int32 entries from the metadata's start, of each section:
// [ids T][positions T][slots T][token_seq T][logit_rows R][table_offsets S]
// [tables][singles][tiles: (first row, count, keys its last token sees, table
// offset) records][fed: (token row, pick row) pairs].
// A decode step's layout has T = R = S = its bucket, so its offsets up to
// the tables depend on the bucket alone (what lets a captured graph replay).
// int32 entries of one query tile's record.
inline constexpr int64_t kTileEntries = 4;

struct StepMetaLayout {
  int64_t ids = 0, positions = 0, slots = 0, token_seq = 0, logit_rows = 0, table_offsets = 0, tables = 0;
  int64_t singles = 0, tiles = 0, fed = 0;
  int64_t end = 0;  // entries in all: what goes up in the step's one copy

  static StepMetaLayout of(int64_t tokens, int64_t rows, int64_t seqs, int64_t table_entries, int64_t num_singles,
                           int64_t num_tiles, int64_t num_fed);
};

// One step, planned. Holds `in` (borrowed), so pack() runs while the
// caller's batch lives; plain data otherwise, one per launch.
struct DeviceStepPlan {
  StepInputs in;
  StepCounts counts;
  // A decode step (one token and one logits row per sequence) runs padded
  // to buckets[bucket_index] = bucket rows; 0: the general layout.
  int64_t bucket = 0;
  size_t bucket_index = 0;
  // The layout's tokens and rows: counts.tokens and counts.rows, or the bucket.
  int64_t meta_tokens = 0, meta_rows = 0;
  // General steps with a chunk of >= 2 tokens, when tiles are on: the
  // one-token chunks' first rows (singles) and the others' query tiles.
  int64_t num_singles = 0, num_tiles = 0;
  bool one_token = false;  // every chunk is one token
  // The attention's split count's inputs (tokens, longest context; -1: not
  // known at launch, as in a decode graph).
  int64_t split_tokens = 0, split_ctx = 0;
  StepMetaLayout layout;
  int64_t block_size = 0;
  int32_t pad_block = 0;
  int prefill_tile = 0;

  bool decode() const { return bucket > 0; }
  uint8_t mode(int64_t row) const { return in.modes.empty() ? kPickOnHost : in.modes[static_cast<size_t>(row)]; }
  // Writes layout.end entries into out[0, layout.end); out must hold them.
  void pack(std::span<int32_t> out) const;
};

// Checks `in` (token ids in the vocabulary, positions in int32, block
// tables long enough and inside the pool, the token budget, row modes,
// feedback rows the last step picked on the device) and plans the step.
// Errors: InvalidArgument naming the chunk or entry and what is wrong.
Result<DeviceStepPlan> plan_device_step(const StepPlanLimits& limits, const StepInputs& in);

// A decode step's metadata for `batch` (one token per chunk, checked)
// padded to `bucket` rows: rows past the batch are token 0 at position 0,
// writing and reading slot 0 of pad_block, one shared table entry naming
// it. Returns the entries written (through the tables and the pad entry).
// An empty batch gives the all-padding step that graph capture replays.
int64_t pack_decode_meta(std::span<const SequenceChunk> batch, int64_t bucket, int64_t block_size,
                         int32_t pad_block, std::span<int32_t> out);

}  // namespace tern
