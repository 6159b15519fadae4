// kv/block_table.h: one sequence's logical-to-physical block map.
// Owner: the KvManager, engine thread only. Holds its blocks through a BlockLease (freed last
// block first on destruction) plus the token counts and the chain hashes of its full blocks.
//
//   token position p lives in block blocks()[p / block_size], slot p % block_size.
//
//   |<------------- num_tokens (slots reserved) ---------->|
//   |<------ num_computed_tokens (KV valid) ------>|        |
//   [ b7 full ][ b3 full ][ b9 full ][ b2 partial ....  ]
//   |<- hashed (num_hashed_blocks) ->|
//
// Sliding window: the KvManager releases leading blocks that fell wholly behind the window;
// their entries become holes (kNullBlock, no reference), so indices and positions stay absolute:
//
//   [ hole ][ hole ][ b9 full ][ b2 full ][ b5 partial ... ]
//   |<- num_holes ->|<------- live blocks (window) ------>|
//
// Invariants: blocks().size() == ceil(num_tokens / block_size); num_computed <= num_tokens;
// num_hashed_blocks <= num_computed / block_size; holes are only leading (indices < num_holes).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/block_pool.h"

namespace kvw {

class BlockTable {
 public:
  explicit BlockTable(int32_t block_size) : block_size_(block_size) {}
  BlockTable(BlockTable&&) noexcept = default;
  BlockTable& operator=(BlockTable&&) noexcept = default;

  int32_t block_size() const { return block_size_; }
  // Every logical block, holes (kNullBlock) included.
  std::span<const BlockId> blocks() const { return lease_.blocks(); }
  size_t num_blocks() const { return lease_.size(); }
  // Leading entries that are holes (released behind a sliding window, or never held).
  size_t num_holes() const { return num_holes_; }
  // Blocks this table holds a reference on.
  size_t num_live_blocks() const { return num_blocks() - num_holes_; }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_computed_tokens() const { return num_computed_; }
  size_t num_hashed_blocks() const { return hashes_.size(); }
  std::span<const uint64_t> block_hashes() const { return hashes_; }
  uint64_t last_hash() const;  // hash of the last hashed block, or kPrefixHashSeed
  uint64_t last_commit_step() const { return last_commit_step_; }

  // Blocks needed beyond the current ones to hold num_tokens() + num_new_tokens tokens.
  uint32_t num_blocks_needed(int64_t num_new_tokens) const;
  // Empty slots in the last block (internal waste).
  int64_t num_empty_slots() const {
    return static_cast<int64_t>(num_blocks()) * block_size_ - num_tokens_;
  }

  // Appends references (fresh allocation or prefix hits) and reserves `num_new_tokens` slots;
  // CHECKs that the blocks then match ceil(num_tokens / block_size). `blocks` may start with
  // holes only while this table holds nothing but holes (swap_in of a windowed sequence).
  void append(BlockLease&& blocks, int64_t num_new_tokens);
  // A prefix hit: `blocks` are full, computed blocks with these chain hashes (leading holes
  // allowed, as above: hit blocks behind the window are not referenced).
  void append_cached(BlockLease&& blocks, std::span<const uint64_t> hashes);
  // Releases the references of blocks [num_holes, n) (last first); they become holes.
  // Returns the references released.
  uint32_t release_leading(size_t n);
  void set_num_computed(int64_t n, uint64_t step);
  // Gives back reserved slots: num_tokens becomes n (num_computed <= n <= num_tokens) and the
  // blocks wholly beyond it are freed, last first. They hold no computed token, so none is
  // hashed. Speculative decoding drops the slots of rejected drafts with it.
  void truncate(int64_t n);
  void push_hash(uint64_t h) { hashes_.push_back(h); }
  void replace_block(size_t i, BlockId b) { lease_.replace(i, b); }
  // Number of maximal runs of consecutive block ids among the live blocks (1 for a fully
  // contiguous table).
  uint32_t num_runs() const;

  // Copies counts and hashes (not blocks or holes) from another table; used by fork.
  void copy_counts_from(const BlockTable& o);
  // Frees every block (last first) and resets the counts.
  void clear();

 private:
  // Counts holes among the entries from index `first` on; CHECKs they are all leading.
  void count_holes_from(size_t first);

  int32_t block_size_;
  BlockLease lease_;
  int64_t num_tokens_ = 0;
  int64_t num_computed_ = 0;
  std::vector<uint64_t> hashes_;  // [num_hashed_blocks] chain hashes of the leading full blocks
  size_t num_holes_ = 0;          // entries [0, num_holes_) are kNullBlock
  uint64_t last_commit_step_ = 0;
};

}  // namespace kvw
