// PagedKvPool: the keys and values of every running sequence, in fixed-size
// blocks shared through block tables (the block ids and their ref counts are
// managed by kv/BlockAllocator; this class only stores the numbers). CPU
// storage, fp32 or FP8 E4M3 (--kv-cache-dtype fp8: a quarter of the bytes,
// with a K and a V scale per layer), laid out
// [layer][k|v][block][block_size][kv_dim]. Owned by the engine thread; not
// thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/reference_kernels.h"
#include "base/status.h"
#include "model/kv_cache_dtype.h"

namespace tern {

class PagedKvPool {
 public:
  PagedKvPool() = default;  // no blocks; every block table is out of range
  // Allocates all of it now. Negative arguments count as 0, block_size as
  // at least 1. Size it with bytes_per_block(). kAuto stores fp32; kFp8E4m3
  // e4m3 bytes with every scale 1 (set_scales changes them).
  PagedKvPool(int64_t num_layers, int64_t kv_dim, int64_t num_blocks, int64_t block_size,
              KvCacheDType dtype = KvCacheDType::kAuto);
  PagedKvPool(PagedKvPool&&) = default;
  PagedKvPool& operator=(PagedKvPool&&) = default;
  PagedKvPool(const PagedKvPool&) = delete;
  PagedKvPool& operator=(const PagedKvPool&) = delete;

  // Bytes one block takes across all layers (K and V): for sizing the pool
  // from a memory budget. 0 for non-positive arguments; saturates at INT64_MAX.
  static int64_t bytes_per_block(int64_t num_layers, int64_t kv_dim, int64_t block_size,
                                 KvCacheDType dtype = KvCacheDType::kAuto);

  int64_t num_layers() const { return num_layers_; }
  int64_t kv_dim() const { return kv_dim_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  KvCacheDType dtype() const { return dtype_; }
  bool is_fp8() const { return dtype_ == KvCacheDType::kFp8E4m3; }
  bool is_bf16() const { return dtype_ == KvCacheDType::kBf16; }
  // An fp8 pool stores x / scale and reads back e4m3(x / scale) * scale.
  float k_scale(int64_t layer) const { return scales_[static_cast<size_t>(layer * 2)]; }
  float v_scale(int64_t layer) const { return scales_[static_cast<size_t>(layer * 2 + 1)]; }
  // Per-layer scales (num_layers() each, finite and > 0); InvalidArgument
  // otherwise. Only for an fp8 pool, before anything is stored.
  Status set_scales(std::span<const float> k_scales, std::span<const float> v_scales);

  // OK when `block_table` covers positions [0, num_positions) and each of
  // the entries that covers them names a block of this pool; InvalidArgument
  // naming the first fault otherwise. Entries past those are not looked at.
  Status check_block_table(std::span<const int32_t> block_table, int64_t num_positions) const;

  // K or V row (kv_dim floats) of `layer` for the token at `pos` of a
  // sequence with `block_table`; fp32 pools only. Unchecked:
  // check_block_table(table, pos + 1) must hold and layer < num_layers().
  float* key_row(int64_t layer, std::span<const int32_t> block_table, int64_t pos) {
    return reinterpret_cast<float*>(row_ptr(layer, 0, block_table, pos));
  }
  float* value_row(int64_t layer, std::span<const int32_t> block_table, int64_t pos) {
    return reinterpret_cast<float*>(row_ptr(layer, 1, block_table, pos));
  }
  // Stores the K and V rows (kv_dim floats each) of the token at `pos`, in
  // the pool's dtype (rounded to e4m3 after the layer's scale for fp8, to
  // nearest-even bf16 for bf16).
  // Unchecked, as key_row.
  void store(int64_t layer, std::span<const int32_t> block_table, int64_t pos, const float* k, const float* v);

  // Views of `layer`'s K or V rows for the attention kernel. `blocks` is the
  // caller's storage for the block pointers (at least block_table.size()
  // entries; float pointers for an fp32 pool, byte pointers for fp8, uint16_t
  // pointers for bf16); the
  // returned table points into it and into the pool, so it is valid while
  // both live. An fp8 table carries the layer's scale. Unchecked, as key_row.
  cpu::KvRowTable key_rows(int64_t layer, std::span<const int32_t> block_table,
                           std::span<const float*> blocks) const;
  cpu::KvRowTable value_rows(int64_t layer, std::span<const int32_t> block_table,
                             std::span<const float*> blocks) const;
  cpu::KvRowTable key_rows(int64_t layer, std::span<const int32_t> block_table,
                           std::span<const uint8_t*> blocks) const;
  cpu::KvRowTable value_rows(int64_t layer, std::span<const int32_t> block_table,
                             std::span<const uint8_t*> blocks) const;
  cpu::KvRowTable key_rows(int64_t layer, std::span<const int32_t> block_table,
                           std::span<const uint16_t*> blocks) const;
  cpu::KvRowTable value_rows(int64_t layer, std::span<const int32_t> block_table,
                             std::span<const uint16_t*> blocks) const;

  // Copies every layer's K and V of block `src` into `dst` (copy on write
  // for forked sequences). Both must be blocks of this pool (the allocator
  // hands out only those; checked by assert).
  void copy_block(int32_t src, int32_t dst);

  // The whole pool, read-only: for checksums in tests and debugging. storage()
  // is the floats of an fp32 pool (empty for fp8 and bf16), storage_bytes() any pool's bytes.
  std::span<const float> storage() const {
    return is_fp8() || is_bf16() ? std::span<const float>() : std::span<const float>(reinterpret_cast<const float*>(data_.get()), size_);
  }
  std::span<const uint8_t> storage_bytes() const { return {data_.get(), size_ * static_cast<size_t>(elem_bytes_)}; }

 private:
  // blocks[i] = `layer`'s K (kind 0) or V (1) block block_table[i] as E
  // elements; returns the filled first block_table.size() entries.
  template <typename E>
  std::span<const E*> block_pointers(int64_t layer, int64_t kind, std::span<const int32_t> block_table,
                                     std::span<const E*> blocks) const;
  int64_t block_offset(int64_t layer, int64_t kind, int64_t block) const {
    return (((layer * 2 + kind) * num_blocks_ + block) * block_size_) * kv_dim_;
  }
  uint8_t* row_ptr(int64_t layer, int64_t kind, std::span<const int32_t> block_table, int64_t pos) {
    const int64_t block = block_table[static_cast<size_t>(pos / block_size_)];
    return data_.get() + (block_offset(layer, kind, block) + (pos % block_size_) * kv_dim_) * elem_bytes_;
  }

  int64_t num_layers_ = 0, kv_dim_ = 0, num_blocks_ = 0, block_size_ = 1;
  KvCacheDType dtype_ = KvCacheDType::kAuto;
  int64_t elem_bytes_ = sizeof(float);
  // Not zeroed: a large pool is mapped lazily by the OS, so start-up does not
  // pay for touching gigabytes. Every slot is written before it is read.
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;  // elements
  std::vector<float> scales_;  // [layer][k|v]; all 1 for fp32
};

}  // namespace tern
