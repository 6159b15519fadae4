// kv/layout_stats.h: the figures that describe how the KV pool is laid out (issue 3, section 4),
// and the per-block record the dashboard heatmap and /debug/kv draw.
// Plain values: computed on demand by KvManager::stats() / block_map() on the engine thread
// (O(num_blocks + table entries)), then safe to copy to any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "core/ids.h"
#include "kv/block_pool.h"

namespace kvw {

struct KvLayoutStats {
  uint32_t num_blocks = 0;         // total
  uint32_t num_used_blocks = 0;    // ref_count > 0
  uint32_t num_cached_blocks = 0;  // ref_count == 0, hold a reusable prefix (evictable)
  uint32_t num_free_blocks = 0;    // hold nothing
  int32_t block_size = 0;          // tokens per block

  // Token slots (num_blocks * block_size in all) that hold a token of a live sequence; a shared
  // block counts once. Block usage overstates occupancy for short sequences, token usage doesn't.
  uint64_t num_token_slots = 0;
  uint64_t num_used_token_slots = 0;
  uint64_t num_waste_slots = 0;  // empty slots inside used blocks (last partial blocks)

  // Layout of the free blocks by id. Cached blocks count as occupied here: they hold data, and
  // the defragmenter moves them like used blocks.
  uint32_t largest_free_run = 0;  // longest run of consecutive free block ids
  uint32_t num_free_runs = 0;

  uint32_t num_seqs = 0;
  uint32_t max_runs_per_seq = 0;  // a run = maximal stretch of consecutive ids in one table
  uint64_t total_runs = 0;        // summed over sequences

  double block_usage() const { return ratio(num_used_blocks, num_blocks); }
  double token_usage() const { return ratio(num_used_token_slots, num_token_slots); }
  // Share of the slots in used blocks that are empty.
  double internal_waste() const {
    return ratio(num_waste_slots, uint64_t(num_used_blocks) * uint64_t(block_size));
  }
  // (free - largest contiguous free run) / free; 0 when nothing is free.
  double fragmentation() const {
    return num_free_blocks == 0 ? 0.0
                                : double(num_free_blocks - largest_free_run) / num_free_blocks;
  }
  double mean_runs_per_seq() const { return ratio(total_runs, num_seqs); }

 private:
  static double ratio(uint64_t a, uint64_t b) { return b == 0 ? 0.0 : double(a) / double(b); }
};

// One entry of the block map, index == block id.
struct BlockRecord {
  BlockId block_id{};
  BlockState state = BlockState::kFree;
  std::optional<SeqId> owner;  // first table holding it (lowest SeqId); none if free/cached
  int32_t ref_count = 0;
  int32_t num_tokens = 0;              // filled slots (block_size for cached blocks)
  uint64_t alloc_step = 0;             // step of the last allocation / revival
  uint64_t last_access_step = 0;       // last step it was allocated, hit, freed or computed into
  std::optional<uint64_t> block_hash;  // its prefix cache hash (cached, or used and registered)
};

// Largest run and number of runs of `true` in a per-block mask (shared with tests and kvsim).
struct RunSummary {
  uint32_t largest_run = 0;
  uint32_t num_runs = 0;
};
RunSummary summarize_runs(std::span<const uint8_t> is_free);

}  // namespace kvw
