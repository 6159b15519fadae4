// Arrival-time statistics of every traffic pattern, and seeded reproducibility.
#include "loadgen/arrivals.h"

#include <gtest/gtest.h>

#include <cmath>

#include "loadgen/bench.h"
#include "loadgen/rng.h"
#include "loadgen/stats.h"

namespace kvw::loadgen {
namespace {

std::vector<double> gaps(const std::vector<double>& t) {
  std::vector<double> g;
  for (size_t i = 1; i < t.size(); ++i) g.push_back(t[i] - t[i - 1]);
  return g;
}
double cv(const std::vector<double>& v) {
  return std::sqrt(std::pow(std_of(v), 2)) / mean_of(v);
}
size_t count_in(const std::vector<double>& t, double a, double b) {
  size_t n = 0;
  for (double x : t) n += (x >= a && x < b);
  return n;
}

TEST(Rng, Mt19937_64IsTheStandardEngine) {
  // The C++ standard fixes the 10000th output for the default seed.
  std::mt19937_64 ref;
  ref.discard(9999);
  EXPECT_EQ(ref(), 9981545732273789042ull);
}

TEST(Rng, GammaHasShapeTimesScaleMeanAndVariance) {
  Rng rng(7);
  for (double shape : {0.3, 1.0, 4.0}) {
    std::vector<double> v;
    for (int i = 0; i < 200000; ++i) v.push_back(rng.gamma(shape, 2.0));
    EXPECT_NEAR(mean_of(v), shape * 2.0, 0.02 * shape * 2.0) << shape;
    EXPECT_NEAR(std::pow(std_of(v), 2), shape * 4.0, 0.05 * shape * 4.0) << shape;
  }
}

TEST(Rng, NormalAndUniformIntMoments) {
  Rng rng(11);
  std::vector<double> n, u;
  for (int i = 0; i < 200000; ++i) {
    n.push_back(rng.normal(3.0, 2.0));
    u.push_back(static_cast<double>(rng.uniform_int(10)));
  }
  EXPECT_NEAR(mean_of(n), 3.0, 0.02);
  EXPECT_NEAR(std_of(n), 2.0, 0.02);
  EXPECT_NEAR(mean_of(u), 4.5, 0.03);
}

TEST(Arrivals, PoissonHasRateAndUnitCoefficientOfVariation) {
  Rng rng(1);
  ArrivalSpec spec{RateSchedule::constant(50.0), 1.0, false};
  auto t = generate_arrivals(spec, 50000, kForever, rng);
  ASSERT_EQ(t.size(), 50000u);
  EXPECT_EQ(t[0], 0.0);
  EXPECT_NEAR(t.size() / t.back(), 50.0, 1.0);
  EXPECT_NEAR(cv(gaps(t)), 1.0, 0.03);
}

TEST(Arrivals, GammaBurstinessGivesCvOfOneOverSqrtShape) {
  for (double shape : {0.25, 0.5, 2.0, 8.0}) {
    Rng rng(2);
    ArrivalSpec spec{RateSchedule::constant(20.0), shape, false};
    auto t = generate_arrivals(spec, 50000, kForever, rng);
    EXPECT_NEAR(t.size() / t.back(), 20.0, 0.04 * 20.0) << shape;
    EXPECT_NEAR(cv(gaps(t)), 1.0 / std::sqrt(shape), 0.05 / std::sqrt(shape)) << shape;
  }
}

TEST(Arrivals, ConstantIsEvenlySpacedFromZero) {
  Rng rng(3);
  ArrivalSpec spec{RateSchedule::constant(4.0), 1.0, true};
  auto t = generate_arrivals(spec, 100, 10.0, rng);
  ASSERT_EQ(t.size(), 40u);  // 0, 0.25, ..., 9.75
  for (size_t i = 0; i < t.size(); ++i) EXPECT_NEAR(t[i], 0.25 * i, 1e-9);
}

TEST(Arrivals, SpikeRatePerWindow) {
  Rng rng(4);
  ArrivalSpec spec{RateSchedule::spike(20.0, 400.0, 10.0, 5.0), 1.0, false};
  auto t = generate_arrivals(spec, SIZE_MAX, 30.0, rng);
  // Expected: 200 before, 2000 during, 300 after. Tolerances are >4 sigma.
  EXPECT_NEAR(count_in(t, 0, 10), 200.0, 60.0);
  EXPECT_NEAR(count_in(t, 10, 15), 2000.0, 200.0);
  EXPECT_NEAR(count_in(t, 15, 30), 300.0, 75.0);
  EXPECT_LT(t.back(), 30.0);
}

TEST(Arrivals, RampRateGrowsLinearly) {
  Rng rng(5);
  const auto sched = RateSchedule::ramp(0.0, 1000.0, 20.0);
  EXPECT_NEAR(sched.rate_at(5.0), 250.0, 1e-9);
  EXPECT_NEAR(sched.expected_arrivals(10.0), 2500.0, 1e-6);  // integral of 50 t dt
  ArrivalSpec spec{sched, 1.0, false};
  auto t = generate_arrivals(spec, SIZE_MAX, 20.0, rng);
  EXPECT_NEAR(count_in(t, 0, 10), 2500.0, 250.0);
  EXPECT_NEAR(count_in(t, 10, 20), 7500.0, 400.0);
  // Each 5-second window roughly matches its integral: 625, 1875, 3125, 4375.
  for (int w = 0; w < 4; ++w) {
    const double expect = sched.expected_arrivals(5.0 * (w + 1)) - sched.expected_arrivals(5.0 * w);
    EXPECT_NEAR(count_in(t, 5.0 * w, 5.0 * (w + 1)), expect, 0.1 * expect + 30) << w;
  }
}

TEST(Arrivals, RandomRateChangesEveryIntervalWithinBounds) {
  Rng rng(6);
  const auto sched = RateSchedule::random(10.0, 200.0, 2.0, 40.0, rng);
  std::vector<double> rates;
  for (const auto& s : sched.segments())
    if (!std::isinf(s.duration_s)) rates.push_back(s.rate_from);
  ASSERT_EQ(rates.size(), 20u);
  for (double r : rates) EXPECT_TRUE(r >= 10.0 && r < 200.0) << r;
  EXPECT_GT(std_of(rates), 20.0);  // it does change
  ArrivalSpec spec{sched, 1.0, false};
  auto t = generate_arrivals(spec, SIZE_MAX, 40.0, rng);
  EXPECT_NEAR(static_cast<double>(t.size()), sched.expected_arrivals(40.0),
              5 * std::sqrt(sched.expected_arrivals(40.0)));
  for (int w = 0; w < 20; ++w) {
    const double expect = rates[w] * 2.0;
    EXPECT_NEAR(count_in(t, 2.0 * w, 2.0 * w + 2), expect, 5 * std::sqrt(expect) + 3) << w;
  }
}

TEST(Arrivals, TimeOfInvertsExpectedArrivals) {
  Rng rng(8);
  for (const auto& sched :
       {RateSchedule::ramp(3.0, 50.0, 7.0), RateSchedule::spike(1, 9, 2, 3),
        RateSchedule::random(1, 20, 0.5, 10, rng), RateSchedule::ramp(50.0, 0.5, 7.0)}) {
    for (double t = 0.1; t < 12; t += 0.37)
      EXPECT_NEAR(sched.time_of(sched.expected_arrivals(t)), t, 1e-6);
  }
}

TEST(Arrivals, SameSeedSameTimesAndWorkload) {
  BenchOptions o;
  o.pattern = "random";
  o.duration_s = 30;
  o.seed = 1234;
  Rng a = Rng::derived(o.seed, 1), b = Rng::derived(o.seed, 1), c = Rng::derived(o.seed + 1, 1);
  auto ta = make_arrivals(o, a), tb = make_arrivals(o, b), tc = make_arrivals(o, c);
  ASSERT_TRUE(ta.ok() && tb.ok() && tc.ok());
  EXPECT_EQ(ta.value(), tb.value());
  EXPECT_NE(ta.value(), tc.value());
  EXPECT_FALSE(ta->empty());
}

TEST(Arrivals, RejectsPatternsThatCannotRun) {
  Rng rng(0);
  BenchOptions o;
  o.pattern = "closed";
  EXPECT_FALSE(make_arrivals(o, rng).ok());  // no --concurrency
  o.pattern = "poisson";                     // rate inf with no --num-requests
  EXPECT_FALSE(make_arrivals(o, rng).ok());
  o.pattern = "wave";
  o.num_requests = 3;
  auto r = make_arrivals(o, rng);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("wave"), std::string::npos);
  o.pattern = "poisson";  // vLLM's default: everything at t = 0
  auto all = make_arrivals(o, rng);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all.value(), std::vector<double>(3, 0.0));
}

}  // namespace
}  // namespace kvw::loadgen
