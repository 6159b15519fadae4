#include "kv/kv_events.h"

namespace kvw {

void KvEventLog::enable() {
  enabled_ = true;
  events_.push_back(KvCacheEvent{.kind = KvCacheEvent::Kind::kAllBlocksCleared});
}

void KvEventLog::stored(std::optional<uint64_t> parent, std::span<const uint64_t> hashes,
                        TokenSpan tokens) {
  if (!enabled_ || hashes.empty()) return;
  events_.push_back(KvCacheEvent{.kind = KvCacheEvent::Kind::kBlockStored,
                                 .block_hashes = {hashes.begin(), hashes.end()},
                                 .parent_block_hash = parent,
                                 .token_ids = tokens.to_vector()});
}

void KvEventLog::removed(uint64_t hash) {
  if (!enabled_) return;
  if (events_.empty() || events_.back().kind != KvCacheEvent::Kind::kBlockRemoved) {
    events_.push_back(KvCacheEvent{.kind = KvCacheEvent::Kind::kBlockRemoved});
  }
  events_.back().block_hashes.push_back(hash);
}

void KvEventLog::take(std::vector<KvCacheEvent>& out) {
  for (KvCacheEvent& e : events_) out.push_back(std::move(e));
  events_.clear();
}

}  // namespace kvw
