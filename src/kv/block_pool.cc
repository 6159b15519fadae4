#include "kv/block_pool.h"

#include "core/check.h"
#include "kv/prefix_cache.h"

namespace kvw {

// ---- BlockLease ----

BlockLease::BlockLease(BlockLease&& o) noexcept : pool_(o.pool_), blocks_(std::move(o.blocks_)) {
  o.blocks_.clear();
}

BlockLease& BlockLease::operator=(BlockLease&& o) noexcept {
  if (this != &o) {
    reset();
    pool_ = o.pool_;
    blocks_ = std::move(o.blocks_);
    o.blocks_.clear();
  }
  return *this;
}

void BlockLease::append(BlockLease&& other) {
  if (other.blocks_.empty()) return;
  if (pool_ == nullptr) pool_ = other.pool_;
  CHECK(pool_ == other.pool_) << "lease from another pool";
  blocks_.insert(blocks_.end(), other.blocks_.begin(), other.blocks_.end());
  other.blocks_.clear();
}

void BlockLease::reset() {
  release_front(blocks_.size());
  blocks_.clear();
}

uint32_t BlockLease::release_front(size_t n) {
  CHECK(n <= blocks_.size()) << "release_front(" << n << ") of a lease of " << blocks_.size();
  uint32_t freed = 0;
  // Reverse order: the tail of a sequence reaches the queue first, so it is evicted first.
  for (size_t i = n; i-- > 0;) {
    if (blocks_[i] == kNullBlock) continue;
    CHECK(pool_ != nullptr) << "lease with blocks but no pool";
    pool_->free(std::span<const BlockId>(&blocks_[i], 1));
    blocks_[i] = kNullBlock;
    ++freed;
  }
  return freed;
}

void BlockLease::release_back(size_t n) {
  CHECK(n <= blocks_.size()) << "release_back(" << n << ") of a lease of " << blocks_.size();
  for (size_t i = 0; i < n; ++i) {
    CHECK(blocks_.back() != kNullBlock) << "release_back reached a hole";
    CHECK(pool_ != nullptr) << "lease with blocks but no pool";
    pool_->free(std::span<const BlockId>(&blocks_.back(), 1));
    blocks_.pop_back();
  }
}

// ---- BlockPool ----

BlockPool::BlockPool(uint32_t num_blocks, PrefixCache* cache)
    : meta_(num_blocks + 1), sentinel_(num_blocks), cache_(cache) {
  CHECK(num_blocks > 0 && num_blocks < index_of(kNullBlock)) << "num_blocks " << num_blocks;
  meta_[sentinel_].prev = meta_[sentinel_].next = sentinel_;
  meta_[sentinel_].ref_count = -1;  // never allocatable
  for (uint32_t i = 0; i < num_blocks; ++i) push_back(i);
}

void BlockPool::unlink(uint32_t i) {
  BlockMeta& m = meta_[i];
  meta_[m.prev].next = m.next;
  meta_[m.next].prev = m.prev;
  --num_in_queue_;
  if (m.has_hash) --num_cached_;
}

void BlockPool::push_front(uint32_t i) {
  BlockMeta& s = meta_[sentinel_];
  meta_[i].prev = sentinel_;
  meta_[i].next = s.next;
  meta_[s.next].prev = i;
  s.next = i;
  ++num_in_queue_;
  if (meta_[i].has_hash) ++num_cached_;
}

void BlockPool::push_back(uint32_t i) {
  BlockMeta& s = meta_[sentinel_];
  meta_[i].next = sentinel_;
  meta_[i].prev = s.prev;
  meta_[s.prev].next = i;
  s.prev = i;
  ++num_in_queue_;
  if (meta_[i].has_hash) ++num_cached_;
}

bool BlockPool::allocate(uint32_t n, std::vector<BlockId>& out) {
  if (n > num_in_queue_) return false;
  for (uint32_t k = 0; k < n; ++k) {
    const uint32_t i = meta_[sentinel_].next;
    unlink(i);
    BlockMeta& m = meta_[i];
    if (m.has_hash) {
      // Evict: the block is about to hold other data. Bytes are still intact here.
      if (on_evict_) on_evict_(BlockId{i}, m.hash);
      if (cache_ != nullptr) cache_->erase(m.hash, BlockId{i});
      m.has_hash = false;
      ++num_evictions_;
    }
    m.ref_count = 1;
    m.alloc_step = m.last_access_step = step_;
    out.push_back(BlockId{i});
  }
  return true;
}

std::optional<BlockLease> BlockPool::allocate(uint32_t n) {
  std::vector<BlockId> blocks;
  blocks.reserve(n);
  if (!allocate(n, blocks)) return std::nullopt;
  return BlockLease(this, std::move(blocks));
}

void BlockPool::free(std::span<const BlockId> blocks) {
  for (BlockId b : blocks) {
    const uint32_t i = index_of(b);
    CHECK(i < sentinel_) << "free of invalid block " << i;
    BlockMeta& m = meta_[i];
    CHECK(m.ref_count > 0) << "double free of block " << i;
    m.last_access_step = step_;
    if (--m.ref_count > 0) continue;
    if (m.has_hash) {
      push_back(i);
    } else {
      push_front(i);
    }
  }
}

void BlockPool::touch(std::span<const BlockId> blocks) {
  for (BlockId b : blocks) {
    const uint32_t i = index_of(b);
    CHECK(i < sentinel_) << "touch of invalid block " << i;
    BlockMeta& m = meta_[i];
    CHECK(m.ref_count >= 0) << "block " << i << " ref_count " << m.ref_count;
    if (m.ref_count == 0) {
      unlink(i);
      m.alloc_step = step_;
    }
    ++m.ref_count;
    m.last_access_step = step_;
  }
}

void BlockPool::set_hash(BlockId b, uint64_t hash) {
  BlockMeta& m = meta_[index_of(b)];
  CHECK(m.ref_count > 0) << "set_hash on unreferenced block " << index_of(b);
  CHECK(!m.has_hash || m.hash == hash) << "block " << index_of(b) << " rehashed";
  m.has_hash = true;
  m.hash = hash;
}

void BlockPool::clear_hash(BlockId b) {
  const uint32_t i = index_of(b);
  BlockMeta& m = meta_[i];
  if (!m.has_hash) return;
  if (m.ref_count == 0) {
    unlink(i);
    m.has_hash = false;
    push_front(i);
  } else {
    m.has_hash = false;
  }
}

void BlockPool::move_block(BlockId src, BlockId dst) {
  const uint32_t s = index_of(src);
  const uint32_t d = index_of(dst);
  CHECK(s < sentinel_ && d < sentinel_ && s != d) << "move " << s << " -> " << d;
  CHECK(state(dst) == BlockState::kFree) << "move into non-free block " << d;
  CHECK(state(src) != BlockState::kFree) << "move of free block " << s;
  unlink(d);
  BlockMeta& ms = meta_[s];
  BlockMeta& md = meta_[d];
  const bool queued = ms.ref_count == 0;  // a cached block keeps its LRU position
  const uint32_t prev = ms.prev;
  const uint32_t next = ms.next;
  if (queued) unlink(s);
  md = ms;
  ms = BlockMeta{};
  if (queued) {
    // Re-insert d exactly where s was (between prev and next, which are still linked).
    md.prev = prev;
    md.next = next;
    meta_[prev].next = d;
    meta_[next].prev = d;
    ++num_in_queue_;
    ++num_cached_;
  }
  ms.last_access_step = step_;
  push_front(s);
}

BlockState BlockPool::state(BlockId b) const {
  const BlockMeta& m = meta_[index_of(b)];
  if (m.ref_count > 0) return BlockState::kUsed;
  return m.has_hash ? BlockState::kCached : BlockState::kFree;
}

std::vector<BlockId> BlockPool::free_queue_order() const {
  std::vector<BlockId> order;
  order.reserve(num_in_queue_);
  for (uint32_t i = meta_[sentinel_].next; i != sentinel_; i = meta_[i].next) {
    order.push_back(BlockId{i});
  }
  return order;
}

void BlockPool::check_invariants() const {
  uint32_t num_zero = 0, num_hashed_zero = 0;
  for (uint32_t i = 0; i < sentinel_; ++i) {
    const BlockMeta& m = meta_[i];
    CHECK(m.ref_count >= 0) << "block " << i << " ref_count " << m.ref_count;
    if (m.ref_count == 0) {
      ++num_zero;
      if (m.has_hash) ++num_hashed_zero;
    }
  }
  CHECK(num_zero == num_in_queue_) << "queue count " << num_in_queue_ << " vs " << num_zero;
  CHECK(num_hashed_zero == num_cached_)
      << "cached count " << num_cached_ << " vs " << num_hashed_zero;
  // Walk the queue: links are symmetric, it holds only ref_count == 0 blocks, each once
  // (the count bounds the walk), and no free block follows a cached one.
  uint32_t walked = 0;
  bool seen_cached = false;
  uint32_t prev = sentinel_;
  for (uint32_t i = meta_[sentinel_].next; i != sentinel_; i = meta_[i].next) {
    CHECK(i < sentinel_) << "queue link to invalid block " << i;
    CHECK(++walked <= num_in_queue_) << "free queue has a cycle";
    const BlockMeta& m = meta_[i];
    CHECK(m.ref_count == 0) << "block " << i << " in free queue with ref_count " << m.ref_count;
    CHECK(m.prev == prev) << "broken prev link at block " << i;
    if (m.has_hash) seen_cached = true;
    CHECK(m.has_hash || !seen_cached) << "free block " << i << " after a cached block";
    prev = i;
  }
  CHECK(meta_[sentinel_].prev == prev) << "broken tail link";
  CHECK(walked == num_in_queue_) << "queue walk " << walked << " vs count " << num_in_queue_;
}

}  // namespace kvw
