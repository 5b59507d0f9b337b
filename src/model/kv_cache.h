// KvCache: the keys and values of one sequence for every layer, fp32,
// contiguous per layer, so decoding a token attends over the stored prompt
// instead of recomputing it. The attention kernel sees it only through
// cpu::KvRowTable, so a paged cache (kv/) can replace it without kernel
// changes. Owned by one caller (the engine thread); not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/reference_kernels.h"
#include "base/status.h"

namespace tern {

class KvCache {
 public:
  KvCache() = default;
  // Room for `capacity` positions of `num_layers` layers, kv_dim floats per
  // K or V row. Negative arguments count as 0. Allocates all of it now.
  KvCache(int64_t num_layers, int64_t kv_dim, int64_t capacity);
  // Movable (row tables stay valid: the buffer moves with it), not copyable.
  KvCache(KvCache&&) = default;
  KvCache& operator=(KvCache&&) = default;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int64_t num_layers() const { return num_layers_; }
  int64_t kv_dim() const { return kv_dim_; }
  int64_t capacity() const { return capacity_; }
  // Positions 0..length()-1 hold valid K/V; the next token goes at length().
  int64_t length() const { return length_; }

  // Rolls back (or, for a writer that filled the rows itself, advances) to
  // `length`; an error if it is outside [0, capacity].
  Status set_length(int64_t length);
  void clear() { length_ = 0; }

  // ResourceExhausted when `num_tokens` more positions do not fit.
  Status check_room(int64_t num_tokens) const;

  // The K or V row (kv_dim floats) of `layer` at `pos`; pos < capacity.
  float* key(int64_t layer, int64_t pos) { return data_.data() + offset(layer, 0, pos); }
  float* value(int64_t layer, int64_t pos) { return data_.data() + offset(layer, 1, pos); }
  const float* key(int64_t layer, int64_t pos) const { return data_.data() + offset(layer, 0, pos); }
  const float* value(int64_t layer, int64_t pos) const { return data_.data() + offset(layer, 1, pos); }

  // What the attention kernel reads; valid while the cache lives.
  cpu::KvRowTable key_rows(int64_t layer) const;
  cpu::KvRowTable value_rows(int64_t layer) const;

 private:
  int64_t offset(int64_t layer, int64_t kind, int64_t pos) const {
    return ((layer * 2 + kind) * capacity_ + pos) * kv_dim_;
  }
  cpu::KvRowTable rows(int64_t layer, int64_t kind) const;

  int64_t num_layers_ = 0;
  int64_t kv_dim_ = 0;
  int64_t capacity_ = 0;
  int64_t length_ = 0;
  std::vector<float> data_;                 // [layer][k|v][capacity][kv_dim]
  std::vector<const float*> block_starts_;  // [layer][k|v]: one block per layer and kind
};

}  // namespace tern
