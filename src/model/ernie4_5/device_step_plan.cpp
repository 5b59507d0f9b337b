// The device step's plan: checks, bucket choice and the packing of the
// metadata the kernels read. Everything here is host arithmetic over the
// batch; the byte layout is StepMetaLayout's, and the CUDA step's StepView
// points into the uploaded copy at the same offsets.
#include "model/ernie4_5/device_step_plan.h"

#include <algorithm>
#include <limits>
#include <string>

namespace tern {
namespace {

// The chunks, the budget, the row modes and the feedback, counted on the way.
Result<StepCounts> check_step(const StepPlanLimits& lim, const StepInputs& in) {
  if (in.batch.empty()) return invalid_argument("forward_step: empty batch");
  const int64_t bs = lim.block_size;
  StepCounts n;
  for (size_t i = 0; i < in.batch.size(); ++i) {
    const SequenceChunk& chunk = in.batch[i];
    auto bad = [i](const std::string& what) {
      return invalid_argument("forward_step: chunk " + std::to_string(i) + ": " + what);
    };
    const auto len = static_cast<int64_t>(chunk.tokens.size());
    if (len == 0) return bad("no tokens");
    for (int64_t t = 0; t < len; ++t) {
      const int32_t id = chunk.tokens[static_cast<size_t>(t)];
      if (id < 0 || id >= lim.vocab_size) {
        return bad("token id " + std::to_string(id) + " at index " + std::to_string(t) +
                   " outside the vocabulary [0, " + std::to_string(lim.vocab_size) + ")");
      }
    }
    if (chunk.start_pos < 0 || chunk.start_pos > std::numeric_limits<int32_t>::max() - len) {
      return bad("start_pos " + std::to_string(chunk.start_pos) + " out of range");
    }
    const int64_t used = (chunk.start_pos + len + bs - 1) / bs;
    if (static_cast<int64_t>(chunk.block_table.size()) < used) {
      return bad("block table has " + std::to_string(chunk.block_table.size()) + " entries; positions up to " +
                 std::to_string(chunk.start_pos + len) + " need " + std::to_string(used));
    }
    for (int64_t b = 0; b < used; ++b) {
      const int32_t block = chunk.block_table[static_cast<size_t>(b)];
      if (block < 0 || block >= lim.num_blocks) {
        return bad("block table entry " + std::to_string(b) + " names block " + std::to_string(block) +
                   " outside the pool of " + std::to_string(lim.num_blocks));
      }
    }
    n.tokens += len;
    n.table_entries += used;
    n.max_ctx = std::max(n.max_ctx, chunk.start_pos + len);
    for (int64_t k = logit_rows_of(chunk); k > 0; --k) {
      const auto r = static_cast<size_t>(n.rows);
      const uint8_t mode = r < in.modes.size() ? in.modes[r] : kPickOnHost;
      if (mode > kPickSample) return bad("row mode " + std::to_string(mode) + " is not one of 0, 1, 2");
      n.any_argmax = n.any_argmax || mode == kPickArgmax;
      n.host_rows += mode == kPickOnHost ? 1 : 0;
      n.sample_rows += mode == kPickSample ? 1 : 0;
      ++n.rows;
    }
  }
  if (n.tokens > lim.max_tokens) {
    return invalid_argument("forward_step: " + std::to_string(n.tokens) + " tokens in one step; the GPU workspace " +
                            "was planned for max_num_batched_tokens = " + std::to_string(lim.max_tokens));
  }
  if (!in.modes.empty() && static_cast<int64_t>(in.modes.size()) != n.rows) {
    return invalid_argument("forward_step: " + std::to_string(in.modes.size()) + " row modes for " +
                            std::to_string(n.rows) + " rows with logits");
  }
  if (!in.feedback.empty() && in.feedback.size() != in.batch.size()) {
    return invalid_argument("forward_step: " + std::to_string(in.feedback.size()) + " feedback entries for " +
                            std::to_string(in.batch.size()) + " chunks");
  }
  for (size_t i = 0; i < in.feedback.size(); ++i) {
    const int32_t r = in.feedback[i];
    if (r < 0) continue;
    if (static_cast<size_t>(r) >= in.last_picked.size() || in.last_picked[static_cast<size_t>(r)] == 0) {
      return invalid_argument("forward_step: chunk " + std::to_string(i) + " takes the pick of row " +
                              std::to_string(r) + ", which the step before did not pick on the device");
    }
    ++n.fed;
  }
  return n;
}

// The token's KV slot: its block's first slot plus its offset in the block.
int32_t slot_of(const SequenceChunk& chunk, int64_t pos, int64_t bs) {
  return static_cast<int32_t>(chunk.block_table[static_cast<size_t>(pos / bs)] * bs + pos % bs);
}

// [ids][positions][slots][token_seq][logit_rows][table_offsets][tables] of a
// general step, token by token in batch order.
void pack_general(const DeviceStepPlan& p, std::span<int32_t> out) {
  const StepMetaLayout& l = p.layout;
  const int64_t bs = p.block_size;
  int64_t row = 0, want = 0, entry = 0;
  for (size_t s = 0; s < p.in.batch.size(); ++s) {
    const SequenceChunk& chunk = p.in.batch[s];
    const auto len = static_cast<int64_t>(chunk.tokens.size());
    const int64_t used = (chunk.start_pos + len + bs - 1) / bs;
    out[static_cast<size_t>(l.table_offsets) + s] = static_cast<int32_t>(entry);
    std::copy_n(chunk.block_table.begin(), used, out.begin() + l.tables + entry);
    for (int64_t i = 0; i < len; ++i, ++row) {
      const int64_t pos = chunk.start_pos + i;
      out[static_cast<size_t>(l.ids + row)] = chunk.tokens[static_cast<size_t>(i)];
      out[static_cast<size_t>(l.positions + row)] = static_cast<int32_t>(pos);
      out[static_cast<size_t>(l.slots + row)] = slot_of(chunk, pos, bs);
      out[static_cast<size_t>(l.token_seq + row)] = static_cast<int32_t>(s);
    }
    for (int64_t k = logit_rows_of(chunk); k > 0; --k) {
      out[static_cast<size_t>(l.logit_rows + want++)] = static_cast<int32_t>(row - k);
    }
    entry += used;
  }
}

// The one-token chunks' rows for the decode kernel, then each longer
// chunk's tokens cut into tiles of prefill_tile: (first row, count, keys the
// tile's last token sees, the sequence's table offset), so the kernel reads
// one record where it would chase token_seq, table_offsets and positions.
void pack_tiles(const DeviceStepPlan& p, std::span<int32_t> out) {
  const int64_t bs = p.block_size;
  int64_t first_row = 0, si = 0, ti = 0, entry = 0;
  for (const SequenceChunk& chunk : p.in.batch) {
    const auto len = static_cast<int64_t>(chunk.tokens.size());
    if (len == 1) out[static_cast<size_t>(p.layout.singles + si++)] = static_cast<int32_t>(first_row);
    for (int64_t at = 0; len > 1 && at < len; at += p.prefill_tile, ++ti) {
      const int64_t count = std::min<int64_t>(p.prefill_tile, len - at);
      const auto rec = static_cast<size_t>(p.layout.tiles + kTileEntries * ti);
      out[rec] = static_cast<int32_t>(first_row + at);
      out[rec + 1] = static_cast<int32_t>(count);
      out[rec + 2] = static_cast<int32_t>(chunk.start_pos + at + count);
      out[rec + 3] = static_cast<int32_t>(entry);
    }
    first_row += len;
    entry += (chunk.start_pos + len + bs - 1) / bs;  // as pack_general lays out the tables
  }
}

// Pairs (token row, pick row) for the chunks whose first token is fed from the last step's picks.
void pack_fed(const DeviceStepPlan& p, std::span<int32_t> out) {
  int64_t row = 0, k = 0;
  for (size_t s = 0; s < p.in.batch.size(); ++s) {
    const int32_t r = p.in.feedback.empty() ? -1 : p.in.feedback[s];
    if (r >= 0) {
      out[static_cast<size_t>(p.layout.fed + 2 * k)] = static_cast<int32_t>(row);
      out[static_cast<size_t>(p.layout.fed + 2 * k + 1)] = r;
      ++k;
    }
    row += static_cast<int64_t>(p.in.batch[s].tokens.size());
  }
}

}  // namespace

StepMetaLayout StepMetaLayout::of(int64_t tokens, int64_t rows, int64_t seqs, int64_t table_entries,
                                  int64_t num_singles, int64_t num_tiles, int64_t num_fed) {
  StepMetaLayout l;
  l.ids = 0;
  l.positions = tokens;
  l.slots = 2 * tokens;
  l.token_seq = 3 * tokens;
  l.logit_rows = 4 * tokens;
  l.table_offsets = l.logit_rows + rows;
  l.tables = l.table_offsets + seqs;
  l.singles = l.tables + table_entries;
  l.tiles = l.singles + num_singles;
  l.fed = l.tiles + kTileEntries * num_tiles;
  l.end = l.fed + 2 * num_fed;
  return l;
}

Result<DeviceStepPlan> plan_device_step(const StepPlanLimits& limits, const StepInputs& in) {
  TERN_ASSIGN_OR_RETURN(const StepCounts n, check_step(limits, in));
  DeviceStepPlan p;
  p.in = in;
  p.counts = n;
  p.block_size = limits.block_size;
  p.pad_block = limits.pad_block;
  p.prefill_tile = limits.prefill_tile;
  const auto S = static_cast<int64_t>(in.batch.size());
  p.one_token = n.tokens == S;
  // A decode step needs a bucket that takes the batch and block tables (and
  // fed-token places) that fit the fixed buffer; the pad block's entry is one more.
  if (n.tokens == S && n.rows == S) {
    const std::span<const int64_t> buckets = limits.decode_buckets;
    while (p.bucket_index < buckets.size() && buckets[p.bucket_index] < S) ++p.bucket_index;
    const int64_t bucket = p.bucket_index < buckets.size() ? buckets[p.bucket_index] : 0;
    if (bucket > 0) {
      const StepMetaLayout l = StepMetaLayout::of(bucket, bucket, bucket, n.table_entries + 1, 0, 0, n.fed);
      if (l.end <= limits.decode_capacity) {
        p.bucket = bucket;
        p.meta_tokens = p.meta_rows = bucket;
        p.split_tokens = bucket;
        p.split_ctx = -1;
        p.layout = l;
        return p;
      }
    }
  }
  // Attention query tiles when some chunk has several tokens: its tokens in
  // tiles, the one-token chunks' tokens listed for the decode kernel.
  if (limits.prefill_tile > 0 && n.tokens > S) {
    for (const SequenceChunk& chunk : in.batch) {
      const auto len = static_cast<int64_t>(chunk.tokens.size());
      if (len == 1) {
        ++p.num_singles;
      } else {
        p.num_tiles += (len + limits.prefill_tile - 1) / limits.prefill_tile;
      }
    }
  }
  p.meta_tokens = n.tokens;
  p.meta_rows = n.rows;
  p.split_tokens = p.num_tiles > 0 ? std::max<int64_t>(p.num_singles, 1) : n.tokens;
  p.split_ctx = n.max_ctx;
  p.layout = StepMetaLayout::of(n.tokens, n.rows, S, n.table_entries, p.num_singles, p.num_tiles, n.fed);
  return p;
}

void DeviceStepPlan::pack(std::span<int32_t> out) const {
  if (decode()) {
    pack_decode_meta(in.batch, bucket, block_size, pad_block, out);
  } else {
    pack_general(*this, out);
    if (num_tiles > 0) pack_tiles(*this, out);
  }
  pack_fed(*this, out);
}

int64_t pack_decode_meta(std::span<const SequenceChunk> batch, int64_t bucket, int64_t block_size,
                         int32_t pad_block, std::span<int32_t> out) {
  const int64_t bs = block_size, B = bucket;
  const StepMetaLayout l = StepMetaLayout::of(B, B, B, 0, 0, 0, 0);
  auto at = [&](int64_t offset, int64_t i) -> int32_t& { return out[static_cast<size_t>(offset + i)]; };
  int64_t entry = 0;
  const auto S = static_cast<int64_t>(batch.size());
  for (int64_t s = 0; s < S; ++s) {
    const SequenceChunk& chunk = batch[static_cast<size_t>(s)];
    const int64_t pos = chunk.start_pos, used = pos / bs + 1;
    at(l.table_offsets, s) = static_cast<int32_t>(entry);
    std::copy_n(chunk.block_table.begin(), used, out.begin() + l.tables + entry);
    entry += used;
    at(l.ids, s) = chunk.tokens[0];
    at(l.positions, s) = static_cast<int32_t>(pos);
    at(l.slots, s) = slot_of(chunk, pos, bs);
    at(l.token_seq, s) = static_cast<int32_t>(s);
    at(l.logit_rows, s) = static_cast<int32_t>(s);
  }
  at(l.tables, entry) = pad_block;
  for (int64_t s = S; s < B; ++s) {
    at(l.ids, s) = 0;
    at(l.positions, s) = 0;
    at(l.slots, s) = static_cast<int32_t>(pad_block * bs);
    at(l.token_seq, s) = static_cast<int32_t>(s);
    at(l.logit_rows, s) = static_cast<int32_t>(s);
    at(l.table_offsets, s) = static_cast<int32_t>(entry);
  }
  return l.tables + entry + 1;
}

}  // namespace tern
