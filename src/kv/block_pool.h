// kv/block_pool.h: the fixed set of KV blocks, their reference counts and the free queue.
// Owner: the KvManager, engine thread only (not thread-safe, no locks).
// Free blocks form an intrusive doubly-linked queue, so allocate, free and a prefix-cache hit
// that revives an evictable block are all O(1). The pool knows block ids and hashes only; it
// never sees bytes (KvStorage) or sequences (BlockTable).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "core/ids.h"

namespace kvw {

class PrefixCache;

// The three states a block is in. Every block is in exactly one.
//   kFree:   ref_count == 0, no hash. Holds nothing; in the free queue (front part).
//   kCached: ref_count == 0, hashed. Holds a full prefix block nobody references; in the free
//            queue (back part, LRU first), reusable by a prefix hit until evicted.
//   kUsed:   ref_count > 0 (hashed or not). Referenced by block tables or pinned for a copy.
enum class BlockState : uint8_t { kFree, kCached, kUsed };

struct BlockMeta {
  int32_t ref_count = 0;
  uint32_t prev = 0;  // free-queue links (index_of(BlockId)), meaningful when ref_count == 0
  uint32_t next = 0;
  bool has_hash = false;
  uint64_t hash = 0;              // chain hash of the block's tokens (PrefixCache), if has_hash
  uint64_t alloc_step = 0;        // step of the last allocation (or prefix revival)
  uint64_t last_access_step = 0;  // last step the pool saw it allocated, touched or freed
};

class BlockPool;

// A move-only list of block references (DuckDB's BufferPoolReservation). Destroying it (or
// reset()) frees the blocks in reverse order, so the tail of a sequence reaches the free queue
// first and is evicted first. An entry may be kNullBlock, a hole that holds no reference (the
// leading blocks a sliding-window sequence released, see release_front); holes are skipped.
class BlockLease {
 public:
  BlockLease() = default;
  BlockLease(BlockPool* pool, std::vector<BlockId> blocks)
      : pool_(pool), blocks_(std::move(blocks)) {}
  BlockLease(BlockLease&& o) noexcept;
  BlockLease& operator=(BlockLease&& o) noexcept;
  BlockLease(const BlockLease&) = delete;
  BlockLease& operator=(const BlockLease&) = delete;
  ~BlockLease() { reset(); }

  std::span<const BlockId> blocks() const { return blocks_; }
  size_t size() const { return blocks_.size(); }
  bool empty() const { return blocks_.empty(); }
  BlockId operator[](size_t i) const { return blocks_[i]; }
  BlockId back() const { return blocks_.back(); }

  // Takes over the references held by `other` (same pool), appended after ours.
  void append(BlockLease&& other);
  // Takes over one reference the caller already holds (e.g. from BlockPool::touch), or appends
  // a hole (kNullBlock, no reference).
  void push_back(BlockId b) { blocks_.push_back(b); }
  // Frees the references at indices [0, n) (last first) and leaves holes (kNullBlock) in their
  // place, so the indices of the later entries do not change. Returns how many references were
  // freed (holes already there are skipped). CHECKs n <= size().
  uint32_t release_front(size_t n);
  // Frees the references of the last n entries (last first) and removes them. CHECKs
  // n <= size() and that none of them is a hole.
  void release_back(size_t n);
  // Defragmenter: the reference at index i now names block b (the pool moved the state).
  void replace(size_t i, BlockId b) { blocks_[i] = b; }
  // Frees every block, last first; the lease is empty afterwards.
  void reset();

 private:
  BlockPool* pool_ = nullptr;
  std::vector<BlockId> blocks_;
};

class BlockPool {
 public:
  // Blocks 0..num_blocks-1 all usable; the initial free queue is 0, 1, 2, ... so the first
  // allocations are contiguous. `cache` (may be null) is told when a cached block is evicted.
  BlockPool(uint32_t num_blocks, PrefixCache* cache);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  uint32_t num_blocks() const { return sentinel_; }
  // Blocks an allocation can take now: free + cached (ref_count == 0).
  uint32_t num_allocatable_blocks() const { return num_in_queue_; }
  uint32_t num_cached_blocks() const { return num_cached_; }
  uint32_t num_free_blocks() const { return num_in_queue_ - num_cached_; }
  uint32_t num_used_blocks() const { return num_blocks() - num_in_queue_; }

  // Pops n blocks from the head of the free queue (free blocks first, then cached blocks in LRU
  // order, evicting their hashes) and appends them to `out` with ref_count 1.
  // Returns false and changes nothing if fewer than n blocks are allocatable; never partial.
  bool allocate(uint32_t n, std::vector<BlockId>& out);
  // Same, as a lease; nullopt when the pool cannot satisfy the request.
  std::optional<BlockLease> allocate(uint32_t n);

  // ref_count-- for each block, in the order given (callers pass reverse table order). A block
  // reaching 0 goes to the queue head if unhashed (it holds nothing, reuse it first) or to the
  // tail if hashed (most recently used cached block, evicted last).
  void free(std::span<const BlockId> blocks);
  // ref_count++ for each block; a block at 0 (free or cached) leaves the queue. This is both a
  // prefix hit (reviving an evictable block in O(1)) and a second owner (fork).
  void touch(std::span<const BlockId> blocks);
  void touch(BlockId b) { touch(std::span<const BlockId>(&b, 1)); }

  // Records the chain hash of a used block that became full and computed. The PrefixCache entry
  // is the caller's job; the pool only remembers the hash so it can evict it later.
  void set_hash(BlockId b, uint64_t hash);
  // Drops a block's hash (the caller removed the cache entry), e.g. a cached block that is
  // dropped on purpose. A cached block becomes free (moves to the queue head).
  void clear_hash(BlockId b);

  // Defragmenter: gives `dst` (must be kFree) the whole state of `src` (must not be kFree):
  // ref_count, hash, steps and, for a cached block, its exact place in the LRU queue; `src`
  // becomes kFree at the queue head. The caller copies bytes and rewrites tables/cache entries.
  void move_block(BlockId src, BlockId dst);

  // Called with (block, hash) just before a cached block is evicted for reuse, while its bytes
  // are still intact (swap offload reads them here). Empty function: nothing is called.
  void set_evict_callback(std::function<void(BlockId, uint64_t)> cb) { on_evict_ = std::move(cb); }

  // Step stamp used for alloc_step / last_access_step (the manager advances it).
  void set_step(uint64_t step) { step_ = step; }

  const BlockMeta& meta(BlockId b) const { return meta_[index_of(b)]; }
  BlockState state(BlockId b) const;
  uint64_t num_evictions() const { return num_evictions_; }
  // The queue from head (next allocated) to tail, for tests and the block map. O(queue).
  std::vector<BlockId> free_queue_order() const;

  // CHECKs: free + cached + used == total, ref_count >= 0, the queue holds exactly the
  // ref_count == 0 blocks with consistent links, all free blocks precede all cached blocks.
  // O(num_blocks).
  void check_invariants() const;

 private:
  void unlink(uint32_t i);
  void push_front(uint32_t i);
  void push_back(uint32_t i);

  // [num_blocks + 1]: per block state; the last entry is the queue's sentinel (prev = tail,
  // next = head), which removes the empty-queue branches from unlink/push.
  std::vector<BlockMeta> meta_;
  uint32_t sentinel_ = 0;  // == num_blocks
  uint32_t num_in_queue_ = 0;
  uint32_t num_cached_ = 0;
  uint64_t num_evictions_ = 0;
  uint64_t step_ = 0;
  PrefixCache* cache_ = nullptr;
  std::function<void(BlockId, uint64_t)> on_evict_;
};

}  // namespace kvw
