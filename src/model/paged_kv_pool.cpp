// PagedKvPool: one allocation; a block of one layer and kind is
// block_size * kv_dim consecutive elements (fp32, bf16 or e4m3 bytes), so a block
// table turns into a cpu::KvRowTable by looking up one pointer per block.
#include "model/paged_kv_pool.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <limits>
#include <string>

#include "base/bf16.h"
#include "base/checked_math.h"
#include "base/fp8_e4m3.h"

namespace tern {

PagedKvPool::PagedKvPool(int64_t num_layers, int64_t kv_dim, int64_t num_blocks, int64_t block_size,
                         KvCacheDType dtype)
    : num_layers_(std::max<int64_t>(0, num_layers)),
      kv_dim_(std::max<int64_t>(0, kv_dim)),
      num_blocks_(std::max<int64_t>(0, num_blocks)),
      block_size_(std::max<int64_t>(1, block_size)),
      dtype_(dtype),
      elem_bytes_(kv_element_bytes(dtype, sizeof(float))) {
  size_ = static_cast<size_t>(num_layers_ * 2 * num_blocks_ * block_size_ * kv_dim_);
  // Element-aligned for fp32 rows (new[] of bytes is aligned for any scalar).
  data_.reset(new uint8_t[size_ * static_cast<size_t>(elem_bytes_)]);
  scales_.assign(static_cast<size_t>(num_layers_ * 2), 1.0f);
}

int64_t PagedKvPool::bytes_per_block(int64_t num_layers, int64_t kv_dim, int64_t block_size, KvCacheDType dtype) {
  if (num_layers <= 0 || kv_dim <= 0 || block_size <= 0) return 0;
  const std::array<int64_t, 5> dims = {num_layers, 2, kv_dim, block_size, kv_element_bytes(dtype, sizeof(float))};
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

Status PagedKvPool::set_scales(std::span<const float> k_scales, std::span<const float> v_scales) {
  if (!is_fp8()) return invalid_argument("KV scales apply to an fp8 KV cache only");
  if (static_cast<int64_t>(k_scales.size()) != num_layers_ || static_cast<int64_t>(v_scales.size()) != num_layers_) {
    return invalid_argument("KV scales: " + std::to_string(k_scales.size()) + " K and " +
                            std::to_string(v_scales.size()) + " V scales for " + std::to_string(num_layers_) +
                            " layers");
  }
  for (int64_t l = 0; l < num_layers_; ++l) {
    for (float s : {k_scales[static_cast<size_t>(l)], v_scales[static_cast<size_t>(l)]}) {
      if (!(s > 0.0f) || !std::isfinite(s)) {
        return invalid_argument("KV scale of layer " + std::to_string(l) + " is " + std::to_string(s) +
                                "; scales must be finite and > 0");
      }
    }
  }
  for (int64_t l = 0; l < num_layers_; ++l) {
    scales_[static_cast<size_t>(l * 2)] = k_scales[static_cast<size_t>(l)];
    scales_[static_cast<size_t>(l * 2 + 1)] = v_scales[static_cast<size_t>(l)];
  }
  return Status::ok();
}

void PagedKvPool::store(int64_t layer, std::span<const int32_t> block_table, int64_t pos, const float* k,
                        const float* v) {
  for (int64_t kind = 0; kind < 2; ++kind) {
    const float* src = kind == 0 ? k : v;
    uint8_t* dst = row_ptr(layer, kind, block_table, pos);
    if (is_bf16()) {
      auto* out = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < kv_dim_; ++i) out[i] = f32_to_bf16(src[i]);
      continue;
    }
    if (!is_fp8()) {
      std::copy_n(src, kv_dim_, reinterpret_cast<float*>(dst));
      continue;
    }
    const float inv = 1.0f / scales_[static_cast<size_t>(layer * 2 + kind)];
    for (int64_t i = 0; i < kv_dim_; ++i) dst[i] = f32_to_fp8_e4m3(src[i] * inv);
  }
}

template <typename E>
std::span<const E*> PagedKvPool::block_pointers(int64_t layer, int64_t kind, std::span<const int32_t> block_table,
                                                std::span<const E*> blocks) const {
  for (size_t i = 0; i < block_table.size(); ++i) {
    blocks[i] = reinterpret_cast<const E*>(data_.get()) + block_offset(layer, kind, block_table[i]);
  }
  return blocks.first(block_table.size());
}

cpu::KvRowTable PagedKvPool::key_rows(int64_t layer, std::span<const int32_t> block_table,
                                      std::span<const float*> blocks) const {
  assert(!is_fp8() && !is_bf16());
  return cpu::KvRowTable{block_pointers(layer, 0, block_table, blocks), block_size_, kv_dim_, {}, 1.0f, {}};
}

cpu::KvRowTable PagedKvPool::value_rows(int64_t layer, std::span<const int32_t> block_table,
                                        std::span<const float*> blocks) const {
  assert(!is_fp8() && !is_bf16());
  return cpu::KvRowTable{block_pointers(layer, 1, block_table, blocks), block_size_, kv_dim_, {}, 1.0f, {}};
}

cpu::KvRowTable PagedKvPool::key_rows(int64_t layer, std::span<const int32_t> block_table,
                                      std::span<const uint8_t*> blocks) const {
  assert(is_fp8());
  return cpu::KvRowTable{{}, block_size_, kv_dim_, block_pointers(layer, 0, block_table, blocks), k_scale(layer), {}};
}

cpu::KvRowTable PagedKvPool::value_rows(int64_t layer, std::span<const int32_t> block_table,
                                        std::span<const uint8_t*> blocks) const {
  assert(is_fp8());
  return cpu::KvRowTable{{}, block_size_, kv_dim_, block_pointers(layer, 1, block_table, blocks), v_scale(layer), {}};
}

cpu::KvRowTable PagedKvPool::key_rows(int64_t layer, std::span<const int32_t> block_table,
                                      std::span<const uint16_t*> blocks) const {
  assert(is_bf16());
  return cpu::KvRowTable{{}, block_size_, kv_dim_, {}, 1.0f, block_pointers(layer, 0, block_table, blocks)};
}

cpu::KvRowTable PagedKvPool::value_rows(int64_t layer, std::span<const int32_t> block_table,
                                        std::span<const uint16_t*> blocks) const {
  assert(is_bf16());
  return cpu::KvRowTable{{}, block_size_, kv_dim_, {}, 1.0f, block_pointers(layer, 1, block_table, blocks)};
}

void PagedKvPool::copy_block(int32_t src, int32_t dst) {
  assert(src >= 0 && src < num_blocks_ && dst >= 0 && dst < num_blocks_);
  if (src == dst) return;
  const int64_t block_bytes = block_size_ * kv_dim_ * elem_bytes_;
  for (int64_t layer = 0; layer < num_layers_; ++layer) {
    for (int64_t kind = 0; kind < 2; ++kind) {
      const uint8_t* from = data_.get() + block_offset(layer, kind, src) * elem_bytes_;
      std::copy_n(from, block_bytes, data_.get() + block_offset(layer, kind, dst) * elem_bytes_);
    }
  }
}

}  // namespace tern
