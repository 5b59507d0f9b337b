// BlockAllocator: free list, LRU of cached-but-unused blocks, and the prefix
// cache map (hash -> block). Invariant: a block is in cache_ exactly when its
// serial is non-zero, and it is in lru_ exactly when it is cached with ref 0.
// Engine thread only.
#include "kv/block_allocator.h"

#include <algorithm>
#include <string>

namespace tern {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t default_block_hash(uint64_t parent_hash, std::span<const int32_t> tokens, std::string_view salt) {
  uint64_t h = mix(parent_hash ^ 0x7465726e6b76ULL);
  h = mix(h ^ salt.size());
  for (unsigned char c : salt) h = mix(h ^ c);
  h = mix(h ^ tokens.size());
  for (int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return h;
}

BlockAllocator::BlockAllocator(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching,
                               BlockHasher hasher)
    : block_size_(std::max(block_size, 1)),
      enable_prefix_caching_(enable_prefix_caching),
      hasher_(std::move(hasher)),
      blocks_(std::max(num_blocks, 0)) {
  // Stack order: block 0 is handed out first.
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

Result<std::vector<BlockId>> BlockAllocator::allocate(int64_t count) {
  if (count < 0) return invalid_argument("allocate: negative block count " + std::to_string(count));
  if (count > num_available()) {
    return resource_exhausted("KV cache: " + std::to_string(count) + " blocks wanted, " +
                              std::to_string(num_available()) + " available of " + std::to_string(num_blocks()));
  }
  std::vector<BlockId> out;
  out.reserve(count);
  while (static_cast<int64_t>(out.size()) < count) {
    BlockId b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {
      b = lru_.front();
      evict(b);
    }
    blocks_[b].ref_count = 1;
    out.push_back(b);
  }
  return out;
}

Status BlockAllocator::incref(BlockId block) {
  if (!live(block)) return invalid_argument("incref: block " + std::to_string(block) + " is not in use");
  ++blocks_[block].ref_count;
  return Status::ok();
}

Status BlockAllocator::decref(BlockId block) {
  if (!live(block)) return invalid_argument("decref: block " + std::to_string(block) + " is not in use");
  Block& b = blocks_[block];
  if (--b.ref_count > 0) return Status::ok();
  if (b.serial != 0) {
    b.lru_pos = lru_.insert(lru_.end(), block);
  } else {
    free_.push_back(block);
  }
  return Status::ok();
}

bool BlockAllocator::holds(const Block& b, uint64_t parent_serial, std::span<const int32_t> tokens,
                           std::string_view salt) const {
  return b.parent_serial == parent_serial && b.salt == salt && std::ranges::equal(b.tokens, tokens);
}

PrefixMatch BlockAllocator::match_prefix(std::span<const int32_t> tokens, std::string_view salt) {
  PrefixMatch match;
  if (!enable_prefix_caching_ || tokens.empty()) return match;
  const size_t num_full = (tokens.size() - 1) / block_size_;
  for (size_t i = 0; i < num_full; ++i) {
    auto chunk = tokens.subspan(i * block_size_, block_size_);
    const uint64_t hash = hasher_(match.last.hash, chunk, salt);
    auto it = cache_.find(hash);
    if (it == cache_.end()) break;
    Block& b = blocks_[it->second];
    if (!holds(b, match.last.serial, chunk, salt)) break;  // a hash collision, not a hit
    if (b.ref_count++ == 0) lru_.erase(b.lru_pos);
    match.blocks.push_back(it->second);
    match.last = {hash, b.serial};
  }
  match.num_tokens = static_cast<int64_t>(match.blocks.size()) * block_size_;
  prefix_cache_queries_ += static_cast<int64_t>(tokens.size());
  prefix_cache_hits_ += match.num_tokens;
  return match;
}

Result<PrefixKey> BlockAllocator::register_full_block(BlockId block, PrefixKey parent,
                                                      std::span<const int32_t> tokens, std::string_view salt) {
  if (!live(block)) return invalid_argument("register_full_block: block " + std::to_string(block) + " is not in use");
  if (static_cast<int64_t>(tokens.size()) != block_size_) {
    return invalid_argument("register_full_block: " + std::to_string(tokens.size()) + " tokens for a block of " +
                            std::to_string(block_size_));
  }
  const uint64_t hash = hasher_(parent.hash, tokens, salt);
  const PrefixKey uncached{hash, PrefixKey::kUncached};
  if (!enable_prefix_caching_ || parent.serial == PrefixKey::kUncached) return uncached;
  Block& b = blocks_[block];
  if (b.serial != 0) {  // registered already, e.g. by a fork sharing it
    return holds(b, parent.serial, tokens, salt) ? PrefixKey{hash, b.serial} : uncached;
  }
  if (auto it = cache_.find(hash); it != cache_.end()) {
    const Block& other = blocks_[it->second];
    return holds(other, parent.serial, tokens, salt) ? PrefixKey{hash, other.serial} : uncached;
  }
  b.serial = next_serial_++;
  b.hash = hash;
  b.parent_serial = parent.serial;
  b.tokens.assign(tokens.begin(), tokens.end());
  b.salt.assign(salt);
  cache_.emplace(hash, block);
  return PrefixKey{hash, b.serial};
}

int64_t BlockAllocator::reset_prefix_cache() {
  int64_t n = 0;
  while (!lru_.empty()) {
    BlockId b = lru_.front();
    evict(b);
    free_.push_back(b);
    ++n;
  }
  return n;
}

// Drops an evictable block's cache entry; the caller takes the block.
void BlockAllocator::evict(BlockId block) {
  Block& b = blocks_[block];
  lru_.erase(b.lru_pos);
  cache_.erase(b.hash);
  b.serial = 0;
  b.tokens.clear();
  b.salt.clear();
  ++num_evictions_;
}

}  // namespace tern
