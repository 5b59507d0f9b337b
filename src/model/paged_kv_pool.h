// PagedKvPool: the keys and values of every running sequence, in fixed-size
// blocks shared through block tables (the block ids and their ref counts are
// managed by kv/BlockAllocator; this class only stores the numbers). CPU
// storage, fp32, laid out [layer][k|v][block][block_size][kv_dim]. Owned by
// the engine thread; not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/reference_kernels.h"
#include "base/status.h"

namespace tern {

class PagedKvPool {
 public:
  PagedKvPool() = default;  // no blocks; every block table is out of range
  // Allocates (and zeroes) all of it now. Negative arguments count as 0,
  // block_size as at least 1. Size it with bytes_per_block().
  PagedKvPool(int64_t num_layers, int64_t kv_dim, int64_t num_blocks, int64_t block_size);
  PagedKvPool(PagedKvPool&&) = default;
  PagedKvPool& operator=(PagedKvPool&&) = default;
  PagedKvPool(const PagedKvPool&) = delete;
  PagedKvPool& operator=(const PagedKvPool&) = delete;

  // Bytes one block takes across all layers (K and V): for sizing the pool
  // from a memory budget. 0 for non-positive arguments; saturates at INT64_MAX.
  static int64_t bytes_per_block(int64_t num_layers, int64_t kv_dim, int64_t block_size);

  int64_t num_layers() const { return num_layers_; }
  int64_t kv_dim() const { return kv_dim_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }

  // OK when `block_table` covers positions [0, num_positions) and each of
  // the entries that covers them names a block of this pool; InvalidArgument
  // naming the first fault otherwise. Entries past those are not looked at.
  Status check_block_table(std::span<const int32_t> block_table, int64_t num_positions) const;

  // K or V row (kv_dim floats) of `layer` for the token at `pos` of a
  // sequence with `block_table`. Unchecked: check_block_table(table, pos + 1)
  // must hold and layer < num_layers().
  float* key_row(int64_t layer, std::span<const int32_t> block_table, int64_t pos) {
    return row_ptr(layer, 0, block_table, pos);
  }
  float* value_row(int64_t layer, std::span<const int32_t> block_table, int64_t pos) {
    return row_ptr(layer, 1, block_table, pos);
  }

  // Views of `layer`'s K or V rows for the attention kernel. `blocks` is the
  // caller's storage for the block pointers (at least block_table.size()
  // entries); the returned table points into it and into the pool, so it is
  // valid while both live. Unchecked, as key_row.
  cpu::KvRowTable key_rows(int64_t layer, std::span<const int32_t> block_table,
                           std::span<const float*> blocks) const {
    return rows(layer, 0, block_table, blocks);
  }
  cpu::KvRowTable value_rows(int64_t layer, std::span<const int32_t> block_table,
                             std::span<const float*> blocks) const {
    return rows(layer, 1, block_table, blocks);
  }

  // Copies every layer's K and V of block `src` into `dst` (copy on write
  // for forked sequences). Both must be blocks of this pool (the allocator
  // hands out only those; checked by assert).
  void copy_block(int32_t src, int32_t dst);

  // The whole pool, read-only: for checksums in tests and debugging.
  std::span<const float> storage() const { return {data_.get(), size_}; }

 private:
  int64_t block_offset(int64_t layer, int64_t kind, int64_t block) const {
    return (((layer * 2 + kind) * num_blocks_ + block) * block_size_) * kv_dim_;
  }
  float* row_ptr(int64_t layer, int64_t kind, std::span<const int32_t> block_table, int64_t pos) {
    const int64_t block = block_table[static_cast<size_t>(pos / block_size_)];
    return data_.get() + block_offset(layer, kind, block) + (pos % block_size_) * kv_dim_;
  }
  cpu::KvRowTable rows(int64_t layer, int64_t kind, std::span<const int32_t> block_table,
                       std::span<const float*> blocks) const;

  int64_t num_layers_ = 0, kv_dim_ = 0, num_blocks_ = 0, block_size_ = 1;
  // Not zeroed: a large pool is mapped lazily by the OS, so start-up does not
  // pay for touching gigabytes. Every slot is written before it is read.
  std::unique_ptr<float[]> data_;
  size_t size_ = 0;
};

}  // namespace tern
