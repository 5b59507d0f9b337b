// KvCache: one allocation, laid out [layer][k|v][position][kv_dim]; each
// layer's K (or V) is a single "block" of the row table the kernel reads.
#include "model/kv_cache.h"

#include <algorithm>
#include <string>

namespace tern {

KvCache::KvCache(int64_t num_layers, int64_t kv_dim, int64_t capacity)
    : num_layers_(std::max<int64_t>(0, num_layers)),
      kv_dim_(std::max<int64_t>(0, kv_dim)),
      capacity_(std::max<int64_t>(0, capacity)) {
  data_.resize(static_cast<size_t>(num_layers_ * 2 * capacity_ * kv_dim_));
  block_starts_.resize(static_cast<size_t>(num_layers_ * 2));
  for (int64_t layer = 0; layer < num_layers_; ++layer) {
    for (int64_t kind = 0; kind < 2; ++kind) {
      block_starts_[static_cast<size_t>(layer * 2 + kind)] = data_.data() + offset(layer, kind, 0);
    }
  }
}

Status KvCache::set_length(int64_t length) {
  if (length < 0 || length > capacity_) {
    return out_of_range("KV cache length " + std::to_string(length) + " outside [0, " +
                        std::to_string(capacity_) + "]");
  }
  length_ = length;
  return Status::ok();
}

Status KvCache::check_room(int64_t num_tokens) const {
  if (num_tokens < 0 || num_tokens > capacity_ - length_) {
    return resource_exhausted("KV cache full: " + std::to_string(length_) + " cached + " +
                              std::to_string(num_tokens) + " new tokens > capacity " + std::to_string(capacity_));
  }
  return Status::ok();
}

cpu::KvRowTable KvCache::rows(int64_t layer, int64_t kind) const {
  cpu::KvRowTable table;
  table.blocks = std::span<const float* const>(block_starts_.data() + layer * 2 + kind, 1);
  table.block_size = std::max<int64_t>(1, capacity_);
  table.row_stride = kv_dim_;
  return table;
}

cpu::KvRowTable KvCache::key_rows(int64_t layer) const { return rows(layer, 0); }
cpu::KvRowTable KvCache::value_rows(int64_t layer) const { return rows(layer, 1); }

}  // namespace tern
