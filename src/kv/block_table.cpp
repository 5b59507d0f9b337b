// BlockTable: growth with copy on write, forks, prefix-cache adoption and
// publication for one sequence. Invariant: blocks_.size() is exactly
// ceil(num_tokens_ / block_size), so only the last block can be partial.
// Engine thread only.
#include "kv/block_table.h"

#include <algorithm>
#include <cassert>
#include <utility>

namespace tern {

BlockTable::BlockTable(BlockAllocator& allocator, std::string cache_salt)
    : allocator_(&allocator), cache_salt_(std::move(cache_salt)) {}

BlockTable::BlockTable(BlockTable&& other) noexcept
    : allocator_(other.allocator_),
      cache_salt_(std::move(other.cache_salt_)),
      blocks_(std::exchange(other.blocks_, {})),
      num_tokens_(std::exchange(other.num_tokens_, 0)),
      num_registered_(std::exchange(other.num_registered_, 0)),
      last_key_(std::exchange(other.last_key_, {})) {}

BlockTable& BlockTable::operator=(BlockTable&& other) noexcept {
  if (this != &other) {
    release();
    allocator_ = other.allocator_;
    cache_salt_ = std::move(other.cache_salt_);
    blocks_ = std::exchange(other.blocks_, {});
    num_tokens_ = std::exchange(other.num_tokens_, 0);
    num_registered_ = std::exchange(other.num_registered_, 0);
    last_key_ = std::exchange(other.last_key_, {});
  }
  return *this;
}

Result<int64_t> BlockTable::match_prefix(std::span<const int32_t> prompt) {
  if (allocator_ == nullptr || !blocks_.empty()) {
    return invalid_argument("match_prefix: the block table must be bound and empty");
  }
  PrefixMatch match = allocator_->match_prefix(prompt, cache_salt_);
  blocks_ = std::move(match.blocks);
  num_tokens_ = match.num_tokens;
  num_registered_ = blocks_.size();
  last_key_ = match.last;
  return num_tokens_;
}

int64_t BlockTable::capacity() const {
  return allocator_ == nullptr ? 0 : static_cast<int64_t>(blocks_.size()) * allocator_->block_size();
}

int64_t BlockTable::blocks_needed(int64_t new_total_tokens) const {
  if (allocator_ == nullptr || new_total_tokens <= num_tokens_) return 0;
  const int64_t bs = allocator_->block_size();
  const int64_t want = new_total_tokens / bs + (new_total_tokens % bs != 0);
  const bool copy_last = num_tokens_ % bs != 0 && allocator_->ref_count(blocks_.back()) > 1;
  return want - static_cast<int64_t>(blocks_.size()) + (copy_last ? 1 : 0);
}

Result<std::vector<BlockCopy>> BlockTable::ensure_capacity(int64_t new_total_tokens) {
  std::vector<BlockCopy> copies;
  if (new_total_tokens <= num_tokens_) return copies;
  if (allocator_ == nullptr) return invalid_argument("ensure_capacity: unbound block table");
  const int64_t bs = allocator_->block_size();
  const bool copy_last = num_tokens_ % bs != 0 && allocator_->ref_count(blocks_.back()) > 1;
  TERN_ASSIGN_OR_RETURN(std::vector<BlockId> fresh, allocator_->allocate(blocks_needed(new_total_tokens)));
  auto next = fresh.begin();
  if (copy_last) {  // the shared partial block stays with the other owners
    const BlockId src = blocks_.back();
    blocks_.back() = *next++;
    copies.push_back({src, blocks_.back()});
    Status s = allocator_->decref(src);  // ref was > 1: it stays live
    assert(s.is_ok());
    (void)s;
  }
  blocks_.insert(blocks_.end(), next, fresh.end());
  num_tokens_ = new_total_tokens;
  return copies;
}

void BlockTable::truncate(int64_t new_total_tokens) {
  if (allocator_ == nullptr || new_total_tokens >= num_tokens_ || new_total_tokens < 0) return;
  const int64_t bs = allocator_->block_size();
  const auto keep = static_cast<size_t>(new_total_tokens / bs + (new_total_tokens % bs != 0));
  assert(keep >= num_registered_);
  while (blocks_.size() > keep) {
    Status s = allocator_->decref(blocks_.back());
    assert(s.is_ok());
    (void)s;
    blocks_.pop_back();
  }
  num_tokens_ = new_total_tokens;
}

Slot BlockTable::slot_of(int64_t pos) const {
  assert(pos >= 0 && pos < num_tokens_);
  const int64_t bs = allocator_->block_size();
  return {blocks_[pos / bs], static_cast<int32_t>(pos % bs)};
}

BlockTable BlockTable::fork() const {
  if (allocator_ == nullptr) return {};
  BlockTable child(*allocator_, cache_salt_);
  for (BlockId b : blocks_) {
    Status s = allocator_->incref(b);
    assert(s.is_ok());
    (void)s;
  }
  child.blocks_ = blocks_;
  child.num_tokens_ = num_tokens_;
  child.num_registered_ = num_registered_;
  child.last_key_ = last_key_;
  return child;
}

void BlockTable::register_full_blocks(std::span<const int32_t> computed_tokens) {
  if (allocator_ == nullptr) return;
  const int64_t bs = allocator_->block_size();
  const int64_t known = std::min(static_cast<int64_t>(computed_tokens.size()), num_tokens_);
  const size_t num_full = static_cast<size_t>(known / bs);
  for (; num_registered_ < num_full; ++num_registered_) {
    auto key = allocator_->register_full_block(blocks_[num_registered_], last_key_,
                                               computed_tokens.subspan(num_registered_ * bs, bs), cache_salt_);
    if (!key.is_ok()) return;  // unreachable: the block is live and the chunk is full
    last_key_ = *key;
  }
}

void BlockTable::release() {
  if (allocator_ == nullptr) return;
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
    Status s = allocator_->decref(*it);
    assert(s.is_ok());
    (void)s;
  }
  blocks_.clear();
  num_tokens_ = 0;
  num_registered_ = 0;
  last_key_ = {};
}

}  // namespace tern
