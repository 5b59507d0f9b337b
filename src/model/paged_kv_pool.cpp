// PagedKvPool: one allocation; a block of one layer and kind is
// block_size * kv_dim consecutive floats, so a block table turns into a
// cpu::KvRowTable by looking up one pointer per block.
#include "model/paged_kv_pool.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <limits>
#include <string>

#include "base/checked_math.h"

namespace tern {

PagedKvPool::PagedKvPool(int64_t num_layers, int64_t kv_dim, int64_t num_blocks, int64_t block_size)
    : num_layers_(std::max<int64_t>(0, num_layers)),
      kv_dim_(std::max<int64_t>(0, kv_dim)),
      num_blocks_(std::max<int64_t>(0, num_blocks)),
      block_size_(std::max<int64_t>(1, block_size)) {
  size_ = static_cast<size_t>(num_layers_ * 2 * num_blocks_ * block_size_ * kv_dim_);
  data_.reset(new float[size_]);
}

int64_t PagedKvPool::bytes_per_block(int64_t num_layers, int64_t kv_dim, int64_t block_size) {
  if (num_layers <= 0 || kv_dim <= 0 || block_size <= 0) return 0;
  const std::array<int64_t, 5> dims = {num_layers, 2, kv_dim, block_size, int64_t{sizeof(float)}};
  auto bytes = checked_product(dims);
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  return static_cast<int64_t>(bytes && *bytes <= kMax ? *bytes : kMax);
}

Status PagedKvPool::check_block_table(std::span<const int32_t> block_table, int64_t num_positions) const {
  if (num_positions < 0) return invalid_argument("negative position count " + std::to_string(num_positions));
  const int64_t needed = num_positions / block_size_ + (num_positions % block_size_ != 0 ? 1 : 0);
  if (static_cast<int64_t>(block_table.size()) < needed) {
    return invalid_argument("block table has " + std::to_string(block_table.size()) + " blocks; " +
                            std::to_string(num_positions) + " positions need " + std::to_string(needed) +
                            " of " + std::to_string(block_size_));
  }
  for (int64_t i = 0; i < needed; ++i) {
    const int32_t block = block_table[static_cast<size_t>(i)];
    if (block < 0 || block >= num_blocks_) {
      return invalid_argument("block table entry " + std::to_string(i) + " is block " + std::to_string(block) +
                              ", outside the pool [0, " + std::to_string(num_blocks_) + ")");
    }
  }
  return Status::ok();
}

cpu::KvRowTable PagedKvPool::rows(int64_t layer, int64_t kind, std::span<const int32_t> block_table,
                                  std::span<const float*> blocks) const {
  for (size_t i = 0; i < block_table.size(); ++i) {
    blocks[i] = data_.get() + block_offset(layer, kind, block_table[i]);
  }
  cpu::KvRowTable table;
  table.blocks = blocks.first(block_table.size());
  table.block_size = block_size_;
  table.row_stride = kv_dim_;
  return table;
}

void PagedKvPool::copy_block(int32_t src, int32_t dst) {
  assert(src >= 0 && src < num_blocks_ && dst >= 0 && dst < num_blocks_);
  if (src == dst) return;
  const int64_t block_floats = block_size_ * kv_dim_;
  for (int64_t layer = 0; layer < num_layers_; ++layer) {
    for (int64_t kind = 0; kind < 2; ++kind) {
      const float* from = data_.get() + block_offset(layer, kind, src);
      std::copy_n(from, block_floats, data_.get() + block_offset(layer, kind, dst));
    }
  }
}

}  // namespace tern
