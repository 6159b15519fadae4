// loadgen/arrivals.h: when each request of an open-loop run is sent.
// A RateSchedule is a piecewise-linear request rate over time (constant, spike, ramp, random);
// arrivals are a renewal process in "expected arrivals" space, Lambda(t) = integral of the rate:
// gamma increments with mean 1 and shape = burstiness (shape 1 = Poisson, as vLLM's benchmark),
// or exactly 1 for evenly spaced traffic, mapped back through Lambda^-1. Pure functions; no I/O.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/status.h"
#include "loadgen/rng.h"

namespace kvw::loadgen {

inline constexpr double kForever = std::numeric_limits<double>::infinity();

// Rate goes linearly from rate_from to rate_to over [start_s, start_s + duration_s).
struct RateSegment {
  double start_s = 0;
  double duration_s = kForever;
  double rate_from = 0;  // requests per second at start_s
  double rate_to = 0;    // at the end (equal to rate_from when duration_s is infinite)
};

class RateSchedule {
 public:
  // Segments must be contiguous from 0; the last one may be infinite.
  explicit RateSchedule(std::vector<RateSegment> segments);
  static RateSchedule constant(double rate);
  // base_rate, then spike_rate during [spike_start_s, spike_start_s + spike_duration_s), then base.
  static RateSchedule spike(double base_rate, double spike_rate, double spike_start_s,
                            double spike_duration_s);
  // Linear from `from` to `to` over duration_s, then stays at `to`.
  static RateSchedule ramp(double from, double to, double duration_s);
  // A new rate drawn uniformly in [min_rate, max_rate] every interval_s until horizon_s, then the
  // last one forever.
  static RateSchedule random(double min_rate, double max_rate, double interval_s, double horizon_s,
                             Rng& rng);

  double rate_at(double t_s) const;
  double expected_arrivals(double t_s) const;  // Lambda(t)
  // Smallest t with Lambda(t) = lambda, or kForever if the schedule never gets there.
  double time_of(double lambda) const;
  const std::vector<RateSegment>& segments() const { return segments_; }

 private:
  std::vector<RateSegment> segments_;
};

struct ArrivalSpec {
  RateSchedule schedule = RateSchedule::constant(1.0);
  double burstiness = 1.0;     // gamma shape; CV of gaps = 1/sqrt(burstiness)
  bool evenly_spaced = false;  // gaps of exactly one expected arrival (constant-rate pattern)
};

// Send times in seconds from the start, ascending, the first at 0: at most max_count of them, all <
// horizon_s.
std::vector<double> generate_arrivals(const ArrivalSpec& spec, size_t max_count, double horizon_s,
                                      Rng& rng);

}  // namespace kvw::loadgen
