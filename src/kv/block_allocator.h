// BlockAllocator: the fixed pool of KV blocks (ids 0..N-1, `block_size` tokens
// each) with ref counts, and the hash-chain prefix cache over full blocks.
// Pure bookkeeping: no tensors; the engine maps block ids to device memory.
// Owned and called by the engine thread only; not thread-safe. Per-sequence
// views of the pool are BlockTable (block_table.h), which frees via RAII.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace tern {

using BlockId = int32_t;

// Hash of one full block given its parent's chain hash. Any function works
// (even one that collides on purpose): hits are verified on content.
using BlockHasher =
    std::function<uint64_t(uint64_t parent_hash, std::span<const int32_t> tokens, std::string_view salt)>;
uint64_t default_block_hash(uint64_t parent_hash, std::span<const int32_t> tokens, std::string_view salt);

// A token prefix ending at a block boundary: `hash` finds its cache entry,
// `serial` names the verified entry (serials are never reused, so a child
// entry that records its parent's serial proves the whole chain's content).
struct PrefixKey {
  static constexpr uint64_t kRootSerial = 0;          // the empty prefix
  static constexpr uint64_t kUncached = UINT64_MAX;   // no entry: children are not cached
  uint64_t hash = 0;
  uint64_t serial = kRootSerial;
};

struct PrefixMatch {
  std::vector<BlockId> blocks;  // already incref'd: the caller owns one reference each
  int64_t num_tokens = 0;       // blocks.size() * block_size
  PrefixKey last;               // key of the last matched block (root if none)
};

class BlockAllocator {
 public:
  // `num_blocks` >= 0 and `block_size` >= 1 (else the pool is empty / 1).
  BlockAllocator(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching = true,
                 BlockHasher hasher = default_block_hash);
  BlockAllocator(const BlockAllocator&) = delete;
  BlockAllocator& operator=(const BlockAllocator&) = delete;

  // `count` blocks with ref count 1, all or none. Takes never-cached blocks
  // first, then evicts cached-but-unused ones, least recently used first.
  // ResourceExhausted (nothing taken) when fewer than `count` are available.
  Result<std::vector<BlockId>> allocate(int64_t count);
  // Another owner of a live block (fork). InvalidArgument if not live.
  Status incref(BlockId block);
  // Drops one reference; at 0 a cached block becomes evictable (most
  // recently used end), any other returns to the free list. InvalidArgument
  // on a block that is not live (double free).
  Status decref(BlockId block);

  // The longest run of cached full blocks that starts `tokens`, verified on
  // token ids, salt and parent chain. Only blocks within tokens[0, n-1) count,
  // so at least the last prompt token is always computed (its logits are
  // needed) and a shared cached block is never written.
  PrefixMatch match_prefix(std::span<const int32_t> tokens, std::string_view salt);
  // Records live `block`, holding `tokens` (exactly block_size ids) after the
  // prefix `parent`, in the cache. Returns the key for the next block. When an
  // equal entry exists the key names it and `block` stays uncached; on a hash
  // collision with other content the first entry wins and the chain below
  // this block is not cached.
  Result<PrefixKey> register_full_block(BlockId block, PrefixKey parent, std::span<const int32_t> tokens,
                                        std::string_view salt);
  // Evicts every cached block that no sequence uses; returns how many.
  int64_t reset_prefix_cache();

  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }   // never or no longer cached
  int32_t num_evictable() const { return static_cast<int32_t>(lru_.size()); }  // cached, ref 0
  int32_t num_available() const { return num_free() + num_evictable(); }
  int32_t num_used() const { return num_blocks() - num_available(); }        // ref > 0
  double usage() const { return num_blocks() == 0 ? 0.0 : double(num_used()) / num_blocks(); }
  // For 0 <= block < num_blocks().
  int32_t ref_count(BlockId block) const { return blocks_[block].ref_count; }
  bool is_cached(BlockId block) const { return blocks_[block].serial != 0; }
  bool prefix_caching_enabled() const { return enable_prefix_caching_; }
  // As vLLM exports them: prompt tokens looked up, and of those found cached.
  int64_t prefix_cache_queries() const { return prefix_cache_queries_; }
  int64_t prefix_cache_hits() const { return prefix_cache_hits_; }
  int64_t num_evictions() const { return num_evictions_; }

 private:
  struct Block {
    int32_t ref_count = 0;
    uint64_t serial = 0;  // 0: not in the cache; else its entry (hash, parent, tokens, salt)
    uint64_t hash = 0;
    uint64_t parent_serial = 0;
    std::vector<int32_t> tokens;
    std::string salt;
    std::list<BlockId>::iterator lru_pos;  // valid while evictable
  };
  bool live(BlockId block) const { return block >= 0 && block < num_blocks() && blocks_[block].ref_count > 0; }
  bool holds(const Block& b, uint64_t parent_serial, std::span<const int32_t> tokens, std::string_view salt) const;
  void evict(BlockId block);

  int32_t block_size_;
  bool enable_prefix_caching_;
  BlockHasher hasher_;
  std::vector<Block> blocks_;
  std::vector<BlockId> free_;                   // stack: ref 0, not cached
  std::list<BlockId> lru_;                      // ref 0, cached; front = least recently used
  std::unordered_map<uint64_t, BlockId> cache_;  // hash -> the one cached block with that hash
  uint64_t next_serial_ = 1;
  int64_t prefix_cache_queries_ = 0;
  int64_t prefix_cache_hits_ = 0;
  int64_t num_evictions_ = 0;
};

}  // namespace tern
