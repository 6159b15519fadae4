// kv/kv_events.h: what the prefix cache did, as KV cache events in vLLM's vocabulary
// (BlockStored, BlockRemoved, AllBlocksCleared), so a router can mirror which prefixes this
// server holds (llm-d's precise prefix-cache scorer; src/kv_events publishes them over ZeroMQ).
// Owner: the KvManager records into a KvEventLog on the engine thread; the engine takes the
// events once per step. Not thread-safe.
//
// The stream mirrors the PrefixCache map exactly: a hash is stored when a block is registered
// under it and removed when that block is evicted for reuse, so replaying the events from the
// first (AllBlocksCleared at start-up) gives the set of hashes a prefix hit can find now.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/token_span.h"

namespace kvw {

struct KvCacheEvent {
  enum class Kind : uint8_t { kBlockStored, kBlockRemoved, kAllBlocksCleared };
  Kind kind = Kind::kAllBlocksCleared;
  // Stored: consecutive blocks of one chain, first to last. Removed: evicted blocks.
  std::vector<uint64_t> block_hashes = {};
  // Stored: the chain hash of the block before the first one; none for a sequence's block 0.
  // (= initialisers: designated initialisers may leave any of them out without a warning)
  std::optional<uint64_t> parent_block_hash = std::nullopt;
  std::vector<int32_t> token_ids = {};  // Stored: the blocks' tokens, block_size per block
};

// Publisher counters for /metrics (src/kv_events fills them; obs renders them).
struct KvEventsStats {
  uint64_t num_events_published = 0;   // events handed to the PUB socket
  uint64_t num_batches_published = 0;  // one batch per engine step with events
  uint64_t num_events_dropped = 0;     // events of batches the full queue refused
  uint64_t num_batches_dropped = 0;
  uint64_t num_events_queued = 0;  // now: events waiting for the publisher thread
};

class KvEventLog {
 public:
  bool enabled() const { return enabled_; }
  // Starts recording with AllBlocksCleared: the pool starts empty, so a subscriber drops
  // whatever an earlier process at this endpoint told it.
  void enable();

  // `hashes` are consecutive chain blocks; `tokens` holds block_size tokens for each.
  void stored(std::optional<uint64_t> parent, std::span<const uint64_t> hashes, TokenSpan tokens);
  // Consecutive removals share one event (vLLM sends one per block; the format allows many).
  void removed(uint64_t hash);

  // Moves the recorded events to the back of `out`. The log grows by at most one event per
  // block registered or evicted between two takes (the engine takes every step).
  void take(std::vector<KvCacheEvent>& out);

 private:
  bool enabled_ = false;
  std::vector<KvCacheEvent> events_;
};

}  // namespace kvw
