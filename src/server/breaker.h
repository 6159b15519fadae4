// server/breaker.h: the load-shedding breaker. Watches KV-pool usage and the p95 end-to-end
// latency and moves between
//   ok --(a threshold crossed)--> warn --(still crossed for the shed delay)--> shedding
//   warn/shedding --(both below the lower thresholds for recover_hold_s)--> ok
// (hysteresis: the lower thresholds sit below the upper ones, and recovery must hold).
// LatencyWindow keeps recent latencies for the p95. Pure logic: time comes in as arguments.
// Thread safety: Breaker and LatencyWindow lock their own mutex; any thread may call them.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>

#include "core/breaker_state.h"

namespace kvw::server {

struct BreakerConfig {
  double kv_high = 0.92;               // KV usage above this is "crossed" (--breaker-kv-threshold)
  double kv_low = 0.85;                // recovery needs KV usage below this (--breaker-kv-recover)
  double kv_shed_after_s = 120;        // crossed this long -> shedding (--breaker-kv-seconds)
  double latency_sla_s = 0;            // p95 above this is "crossed"; 0 = off (--latency-sla)
  double latency_shed_after_s = 180;   // (--breaker-latency-seconds)
  double latency_recover_ratio = 0.8;  // recovery needs p95 below ratio * SLA
  double recover_hold_s = 30;          // below both lower thresholds this long -> ok
};

struct BreakerSnapshot {
  BreakerState state = BreakerState::kOk;
  double kv_usage = 0;       // last observed, [0, 1]
  double p95_latency_s = 0;  // last observed
  uint64_t num_transitions = 0;
  uint64_t num_shed_entries = 0;  // times the breaker went to shedding
};

class Breaker {
 public:
  explicit Breaker(const BreakerConfig& cfg) : cfg_(cfg) {}
  // Feeds one observation; returns the state after it.
  BreakerState observe(double now_s, double kv_usage, double p95_latency_s);
  BreakerState state() const;
  BreakerSnapshot snapshot() const;

 private:
  void set_state_locked(BreakerState s);

  const BreakerConfig cfg_;
  mutable std::mutex mu_;
  BreakerSnapshot snap_;
  // Start of the current run of each condition; < 0 when the condition does not hold now.
  double kv_over_since_ = -1;
  double latency_over_since_ = -1;
  double below_since_ = -1;
};

// End-to-end latencies of recent requests: at most `capacity` samples, none older than
// `max_age_s`.
class LatencyWindow {
 public:
  explicit LatencyWindow(size_t capacity = 512, double max_age_s = 60)
      : capacity_(capacity), max_age_s_(max_age_s) {}
  void add(double now_s, double latency_s);
  // 95th percentile (nearest rank) of the samples still in the window; 0 when empty.
  double p95(double now_s);

 private:
  const size_t capacity_;
  const double max_age_s_;
  std::mutex mu_;
  std::deque<std::pair<double, double>> samples_;  // (time, latency), oldest first
};

}  // namespace kvw::server
