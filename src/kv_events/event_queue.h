// kv_events/event_queue.h: the bounded hand-off from the engine thread to the publisher thread.
// Bounded in events, not batches (a step may evict hundreds of blocks): a batch that does not
// fit is refused whole, so the engine never waits and memory never grows with a slow consumer.
// Thread-safe (one mutex; push and pop only move vectors under it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "kv/kv_events.h"

namespace kvw::kv_events {

struct KvEventBatch {
  uint64_t seq = 0;  // numbered at publish(), dropped or not: a drop leaves a gap
  double ts = 0;     // seconds since the Unix epoch
  std::vector<KvCacheEvent> events;
};

class KvEventQueue {
 public:
  explicit KvEventQueue(size_t max_events) : max_events_(max_events) {}
  // Queues `b` unless its events would take the queue past max_events; false: nothing queued
  // (a batch larger than max_events never fits).
  bool try_push(KvEventBatch&& b);
  // Moves every queued batch to the back of `out`, oldest first. Never waits.
  void pop_all(std::vector<KvEventBatch>& out);
  size_t num_events() const;

 private:
  const size_t max_events_;
  mutable std::mutex mu_;
  std::deque<KvEventBatch> batches_;
  size_t num_events_ = 0;
};

}  // namespace kvw::kv_events
