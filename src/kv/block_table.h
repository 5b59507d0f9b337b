// BlockTable: one sequence's KV blocks, in order, and how many token slots of
// them it uses. An RAII handle: it owns one reference to each block and its
// destructor returns them, so finish, cancel, error and preemption all free
// the blocks. Movable, not copyable (fork() shares explicitly). Engine thread
// only; the BlockAllocator must outlive every table bound to it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kv/block_allocator.h"

namespace tern {

struct Slot {
  BlockId block = 0;
  int32_t offset = 0;  // token index inside the block
};

// The engine copies the KV rows of block `src` into block `dst` on the
// device before the step's forward pass writes into `dst`.
struct BlockCopy {
  BlockId src = 0;
  BlockId dst = 0;
};

class BlockTable {
 public:
  BlockTable() = default;  // unbound and empty; every growth fails
  // `cache_salt` keeps this sequence's prefix cache entries apart from other
  // tenants' (the request field `cache_salt`; empty = shared).
  explicit BlockTable(BlockAllocator& allocator, std::string cache_salt = {});
  ~BlockTable() { release(); }
  BlockTable(BlockTable&& other) noexcept;
  BlockTable& operator=(BlockTable&& other) noexcept;
  BlockTable(const BlockTable&) = delete;
  BlockTable& operator=(const BlockTable&) = delete;

  // On an empty table: takes the cached blocks that start `prompt` (see
  // BlockAllocator::match_prefix) and returns how many tokens they cover;
  // their KV is already computed. InvalidArgument on a non-empty table.
  Result<int64_t> match_prefix(std::span<const int32_t> prompt);

  // Makes slots [num_tokens(), new_total_tokens) writable: allocates blocks
  // as needed, and when the partial last block is shared (after fork()),
  // moves this table to a private copy and reports the copy to perform.
  // All or nothing: on ResourceExhausted the table and pool are unchanged.
  // A no-op when new_total_tokens <= num_tokens().
  Result<std::vector<BlockCopy>> ensure_capacity(int64_t new_total_tokens);
  // Blocks ensure_capacity(new_total_tokens) would take from the pool.
  int64_t blocks_needed(int64_t new_total_tokens) const;

  // Gives up slots [new_total_tokens, num_tokens()) and the blocks past the
  // last one still used (rejected speculative drafts). The slots given up
  // must be past the blocks published to the prefix cache. A no-op when
  // new_total_tokens >= num_tokens().
  void truncate(int64_t new_total_tokens);

  // Where position `pos` (0 <= pos < num_tokens()) lives.
  Slot slot_of(int64_t pos) const;

  // A second table sharing every block (one more reference each) with the
  // same token count and salt: n > 1 samples of one prompt.
  BlockTable fork() const;

  // Publishes the full blocks among `computed_tokens` (the sequence's tokens
  // whose KV has been written, so call after the forward pass) to the prefix
  // cache. Blocks published before are skipped; extra tokens past
  // num_tokens() are ignored.
  void register_full_blocks(std::span<const int32_t> computed_tokens);

  // Returns every block (last first, so a sequence's tail is evicted before
  // its head) and empties the table. The table stays bound and reusable.
  void release();

  std::span<const BlockId> blocks() const { return blocks_; }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t capacity() const;
  const std::string& cache_salt() const { return cache_salt_; }

 private:
  BlockAllocator* allocator_ = nullptr;
  std::string cache_salt_;
  std::vector<BlockId> blocks_;
  int64_t num_tokens_ = 0;
  size_t num_registered_ = 0;  // leading blocks already offered to the prefix cache
  PrefixKey last_key_;         // key of block num_registered_ - 1 (root if none)
};

}  // namespace tern
