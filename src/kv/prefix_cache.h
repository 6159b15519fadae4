// kv/prefix_cache.h: content addressing of full KV blocks (prefix caching).
// Owner: the KvManager, engine thread only. Maps the chain hash of a full block to the block
// holding its KV; the BlockPool keeps the hash in the block's meta and erases the entry when it
// evicts the block. Also keeps the hit/miss counters the metrics and kvsim report.
//
// Chain hash (block i of a sequence, tokens t[i*bs .. (i+1)*bs)):
//   h[-1] = kPrefixHashSeed
//   h[i]  = XXH64(t[i*bs .. (i+1)*bs) as little-endian int32, seed = h[i-1])
// so a block's hash names the whole prefix up to and including it. Equal 64-bit hashes are
// trusted (no token compare): a collision needs ~2^32 cached blocks to become likely.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "core/token_span.h"

namespace kvw {

constexpr uint64_t kPrefixHashSeed = 0x6b7677617264656eull;  // "kvwarden"

// Hash of one full block given its parent's hash (kPrefixHashSeed for the first block).
uint64_t hash_block_tokens(uint64_t parent_hash, std::span<const int32_t> block_tokens);
// The same for a block that may straddle a shared prompt and a sequence's outputs.
uint64_t hash_split_block(uint64_t parent_hash, TokenSpan block_tokens);
// Blocks hashed by this thread so far (tests check that a prompt is hashed once).
uint64_t num_block_hashes_this_thread();

// Appends to `out` the chain hashes of the full blocks [first_block, tokens.size() / block_size)
// of `tokens`; `parent_hash` is the hash of block first_block - 1 (or kPrefixHashSeed).
void hash_full_blocks(TokenSpan tokens, int32_t block_size, size_t first_block,
                      uint64_t parent_hash, std::vector<uint64_t>& out);

struct PrefixCacheCounters {
  uint64_t num_queries = 0;       // add_sequence lookups (one per new sequence)
  uint64_t num_query_tokens = 0;  // prompt tokens looked up
  uint64_t num_query_blocks = 0;  // full blocks eligible for a hit
  uint64_t num_hit_blocks = 0;    // blocks reused instead of recomputed
  uint64_t num_hit_tokens = 0;    // num_hit_blocks * block_size
  uint64_t num_evictions = 0;     // cached blocks reused for other data (LRU)
  uint64_t num_offloaded = 0;     // evicted blocks whose bytes went to the swap tier
  uint64_t num_swap_hits = 0;     // blocks revived from the swap tier instead of recomputed
  double hit_rate() const {
    return num_query_tokens == 0 ? 0.0 : double(num_hit_tokens) / double(num_query_tokens);
  }
};

class PrefixCache {
 public:
  // nullopt when no block holds this prefix.
  std::optional<BlockId> lookup(uint64_t hash) const {
    auto it = map_.find(hash);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  // Registers a block for `hash`. Returns false (and changes nothing) if another block already
  // holds this prefix: the caller keeps its block unhashed (a duplicate is never cached twice).
  bool insert(uint64_t hash, BlockId b) { return map_.try_emplace(hash, b).second; }
  // Removes the entry if it names `b` (CHECKs that it does).
  void erase(uint64_t hash, BlockId b);
  // Defragmenter: the entry for `hash` now names `to`.
  void rename(uint64_t hash, BlockId to);
  size_t size() const { return map_.size(); }

  PrefixCacheCounters& counters() { return counters_; }
  const PrefixCacheCounters& counters() const { return counters_; }

 private:
  std::unordered_map<uint64_t, BlockId> map_;
  PrefixCacheCounters counters_;
};

}  // namespace kvw
