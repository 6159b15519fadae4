// obs/trace_ring.h: the last N engine events (steps, block allocations and frees, preemptions,
// swap-ins, finishes) in a fixed-size ring, rendered as Chrome/Perfetto trace-event JSON for
// /debug/trace (open in ui.perfetto.dev or chrome://tracing).
// Memory is bounded by `capacity` events of sizeof(TraceEvent) (~80 B); when full the oldest
// events are dropped and counted. Thread safety: all methods lock one mutex; record() is called
// once per step by the engine thread and does no allocation.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/queues.h"

namespace kvw::obs {

struct TraceEvent {
  const char* name = "";  // static strings only (no allocation per event)
  const char* cat = "";
  char ph = 'i';        // 'X' complete (has dur) or 'i' instant
  uint64_t ts_us = 0;   // steady_clock microseconds
  uint64_t dur_us = 0;  // 'X' only
  uint32_t tid = 0;     // 0 engine steps, 1 kv, 2 requests
  const char* arg_names[2] = {nullptr, nullptr};
  uint64_t arg_values[2] = {0, 0};
};

class TraceRing {
 public:
  explicit TraceRing(size_t capacity);  // capacity >= 1 (CHECKed)

  void push(const TraceEvent& e);
  // One step: a 'X' "step" event (seqs, tokens), instants for blocks allocated/freed (counts)
  // and one per preempted / swapped-in / finished request id, all at the step's end.
  void record(const StepObservation& s);

  // Oldest first, stably ordered by ts.
  std::vector<TraceEvent> events() const;
  uint64_t num_dropped() const;
  size_t capacity() const { return ring_.size(); }
  // {"traceEvents":[...],"displayTimeUnit":"ms","otherData":{"dropped_events":N}}
  std::string to_json() const;

 private:
  void push_locked(const TraceEvent& e);

  mutable std::mutex mu_;
  std::vector<TraceEvent> ring_;  // [capacity], slot = index % capacity
  uint64_t next_ = 0;             // events ever pushed
};

}  // namespace kvw::obs
