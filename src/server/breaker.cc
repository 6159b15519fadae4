#include "server/breaker.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kvw::server {

void Breaker::set_state_locked(BreakerState s) {
  if (s == snap_.state) return;
  if (s == BreakerState::kShedding) ++snap_.num_shed_entries;
  ++snap_.num_transitions;
  snap_.state = s;
}

BreakerState Breaker::observe(double now_s, double kv_usage, double p95_latency_s) {
  std::lock_guard lock(mu_);
  snap_.kv_usage = kv_usage;
  snap_.p95_latency_s = p95_latency_s;
  const bool sla_on = cfg_.latency_sla_s > 0;
  const bool kv_over = kv_usage > cfg_.kv_high;
  const bool latency_over = sla_on && p95_latency_s > cfg_.latency_sla_s;
  const bool below = kv_usage < cfg_.kv_low &&
                     (!sla_on || p95_latency_s < cfg_.latency_recover_ratio * cfg_.latency_sla_s);
  auto track = [now_s](bool holds, double& since) {
    if (!holds) {
      since = -1;
    } else if (since < 0) {
      since = now_s;
    }
  };
  track(kv_over, kv_over_since_);
  track(latency_over, latency_over_since_);
  track(below, below_since_);

  const bool shed = (kv_over && now_s - kv_over_since_ >= cfg_.kv_shed_after_s) ||
                    (latency_over && now_s - latency_over_since_ >= cfg_.latency_shed_after_s);
  const bool recovered = below && now_s - below_since_ >= cfg_.recover_hold_s;
  switch (snap_.state) {
    case BreakerState::kOk:
      if (shed) {
        set_state_locked(BreakerState::kShedding);
      } else if (kv_over || latency_over) {
        set_state_locked(BreakerState::kWarn);
      }
      break;
    case BreakerState::kWarn:
      if (shed) {
        set_state_locked(BreakerState::kShedding);
      } else if (recovered) {
        set_state_locked(BreakerState::kOk);
      }
      break;
    case BreakerState::kShedding:
      if (recovered) set_state_locked(BreakerState::kOk);
      break;
  }
  return snap_.state;
}

BreakerState Breaker::state() const {
  std::lock_guard lock(mu_);
  return snap_.state;
}

BreakerSnapshot Breaker::snapshot() const {
  std::lock_guard lock(mu_);
  return snap_;
}

void LatencyWindow::add(double now_s, double latency_s) {
  std::lock_guard lock(mu_);
  samples_.emplace_back(now_s, latency_s);
  while (samples_.size() > capacity_) samples_.pop_front();
}

double LatencyWindow::p95(double now_s) {
  std::lock_guard lock(mu_);
  while (!samples_.empty() && now_s - samples_.front().first > max_age_s_) samples_.pop_front();
  if (samples_.empty()) return 0;
  std::vector<double> v;
  v.reserve(samples_.size());
  for (const auto& s : samples_) v.push_back(s.second);
  // Nearest rank: the smallest value with at least 95% of the samples at or below it.
  const size_t rank = (size_t)std::ceil(0.95 * (double)v.size());
  std::nth_element(v.begin(), v.begin() + (long)(rank - 1), v.end());
  return v[rank - 1];
}

}  // namespace kvw::server
