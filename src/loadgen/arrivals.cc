// loadgen/arrivals.cc: rate schedules and Lambda^-1 sampling (see arrivals.h).
#include "loadgen/arrivals.h"

#include <cmath>

#include "core/check.h"

namespace kvw::loadgen {

namespace {
double slope_of(const RateSegment& s) {
  return std::isinf(s.duration_s) ? 0.0 : (s.rate_to - s.rate_from) / s.duration_s;
}
// Expected arrivals in the first tau seconds of a segment.
double segment_area(const RateSegment& s, double tau) {
  return s.rate_from * tau + 0.5 * slope_of(s) * tau * tau;
}
}  // namespace

RateSchedule::RateSchedule(std::vector<RateSegment> segments) : segments_(std::move(segments)) {
  CHECK(!segments_.empty());
  double t = 0;
  for (auto& s : segments_) {
    CHECK(std::abs(s.start_s - t) < 1e-9) << "segments must be contiguous at " << t;
    CHECK(s.rate_from >= 0 && s.rate_to >= 0 && s.duration_s > 0);
    if (std::isinf(s.duration_s)) s.rate_to = s.rate_from;
    t = s.start_s + s.duration_s;
  }
}

RateSchedule RateSchedule::constant(double rate) {
  return RateSchedule({{0, kForever, rate, rate}});
}

RateSchedule RateSchedule::spike(double base_rate, double spike_rate, double spike_start_s,
                                 double spike_duration_s) {
  std::vector<RateSegment> segs;
  if (spike_start_s > 0) segs.push_back({0, spike_start_s, base_rate, base_rate});
  segs.push_back({spike_start_s, spike_duration_s, spike_rate, spike_rate});
  segs.push_back({spike_start_s + spike_duration_s, kForever, base_rate, base_rate});
  return RateSchedule(std::move(segs));
}

RateSchedule RateSchedule::ramp(double from, double to, double duration_s) {
  return RateSchedule({{0, duration_s, from, to}, {duration_s, kForever, to, to}});
}

RateSchedule RateSchedule::random(double min_rate, double max_rate, double interval_s,
                                  double horizon_s, Rng& rng) {
  std::vector<RateSegment> segs;
  double t = 0;
  // 100k intervals bound the memory when the run has no horizon.
  for (int i = 0; t < horizon_s && i < 100000; ++i, t += interval_s) {
    const double r = rng.uniform(min_rate, max_rate);
    segs.push_back({t, interval_s, r, r});
  }
  if (segs.empty()) segs.push_back({0, interval_s, min_rate, min_rate});
  const double last = segs.back().rate_to;
  segs.push_back({t, kForever, last, last});
  return RateSchedule(std::move(segs));
}

double RateSchedule::rate_at(double t_s) const {
  for (const auto& s : segments_) {
    if (t_s < s.start_s + s.duration_s) return s.rate_from + slope_of(s) * (t_s - s.start_s);
  }
  return segments_.back().rate_to;
}

double RateSchedule::expected_arrivals(double t_s) const {
  double total = 0;
  for (const auto& s : segments_) {
    if (t_s < s.start_s + s.duration_s) return total + segment_area(s, t_s - s.start_s);
    total += segment_area(s, s.duration_s);
  }
  return total;
}

double RateSchedule::time_of(double lambda) const {
  double before = 0;
  for (const auto& s : segments_) {
    const double area = std::isinf(s.duration_s) ? kForever : segment_area(s, s.duration_s);
    if (lambda <= before + area) {
      const double l = lambda - before;
      const double a = s.rate_from, k = slope_of(s);
      if (k == 0.0) return a > 0 ? s.start_s + l / a : kForever;
      // Root of a*tau + k/2*tau^2 = l in the stable form 2l / (a + sqrt(a^2 + 2kl)).
      const double disc = std::max(0.0, a * a + 2.0 * k * l);
      const double denom = a + std::sqrt(disc);
      return denom > 0 ? s.start_s + 2.0 * l / denom : s.start_s;
    }
    before += area;
  }
  return kForever;
}

std::vector<double> generate_arrivals(const ArrivalSpec& spec, size_t max_count, double horizon_s,
                                      Rng& rng) {
  std::vector<double> times;
  // The first request goes at t = 0 (as vLLM's benchmark), then one gap per request.
  double lambda = 0;
  while (times.size() < max_count) {
    const double t = spec.schedule.time_of(lambda);
    if (!(t < horizon_s)) break;
    times.push_back(t);
    lambda += spec.evenly_spaced ? 1.0 : rng.gamma(spec.burstiness, 1.0 / spec.burstiness);
  }
  return times;
}

}  // namespace kvw::loadgen
