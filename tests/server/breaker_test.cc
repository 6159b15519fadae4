// Breaker: warn at once, shed after the delay, recover only below the lower thresholds held
// for recover_hold_s; LatencyWindow p95.
#include "server/breaker.h"

#include <gtest/gtest.h>

namespace kvw::server {
namespace {

BreakerConfig cfg() {
  BreakerConfig c;
  c.kv_high = 0.9;
  c.kv_low = 0.8;
  c.kv_shed_after_s = 10;
  c.latency_sla_s = 2;
  c.latency_shed_after_s = 20;
  c.latency_recover_ratio = 0.5;
  c.recover_hold_s = 5;
  return c;
}

TEST(Breaker, WarnsAtOnceAndShedsAfterKvHeldHigh) {
  Breaker b(cfg());
  EXPECT_EQ(b.observe(0, 0.5, 0), BreakerState::kOk);
  EXPECT_EQ(b.observe(1, 0.95, 0), BreakerState::kWarn);
  EXPECT_EQ(b.observe(10.9, 0.95, 0), BreakerState::kWarn);
  EXPECT_EQ(b.observe(11, 0.95, 0), BreakerState::kShedding);
  EXPECT_EQ(b.snapshot().num_shed_entries, 1u);
}

TEST(Breaker, DipBelowThresholdRestartsTheShedTimer) {
  Breaker b(cfg());
  b.observe(0, 0.95, 0);
  b.observe(9, 0.85, 0);  // below high (not crossed) but above low: stays warn, timer resets
  EXPECT_EQ(b.state(), BreakerState::kWarn);
  EXPECT_EQ(b.observe(10, 0.95, 0), BreakerState::kWarn);
  EXPECT_EQ(b.observe(19.9, 0.95, 0), BreakerState::kWarn);
  EXPECT_EQ(b.observe(20, 0.95, 0), BreakerState::kShedding);
}

TEST(Breaker, RecoversOnlyBelowLowerThresholdHeldForRecoverHold) {
  Breaker b(cfg());
  b.observe(0, 0.95, 0);
  ASSERT_EQ(b.observe(10, 0.95, 0), BreakerState::kShedding);
  // Between low and high: hysteresis keeps shedding.
  EXPECT_EQ(b.observe(11, 0.85, 0), BreakerState::kShedding);
  EXPECT_EQ(b.observe(30, 0.85, 0), BreakerState::kShedding);
  EXPECT_EQ(b.observe(31, 0.7, 0), BreakerState::kShedding);
  EXPECT_EQ(b.observe(35.9, 0.7, 0), BreakerState::kShedding);
  EXPECT_EQ(b.observe(36, 0.7, 0), BreakerState::kOk);
}

TEST(Breaker, LatencySlaShedsAndNeedsP95BelowRatioToRecover) {
  Breaker b(cfg());
  EXPECT_EQ(b.observe(0, 0.1, 2.5), BreakerState::kWarn);
  EXPECT_EQ(b.observe(20, 0.1, 2.5), BreakerState::kShedding);
  EXPECT_EQ(b.observe(21, 0.1, 1.5), BreakerState::kShedding);  // under SLA, over 0.5*SLA
  EXPECT_EQ(b.observe(40, 0.1, 1.5), BreakerState::kShedding);
  b.observe(41, 0.1, 0.9);
  EXPECT_EQ(b.observe(46, 0.1, 0.9), BreakerState::kOk);
}

TEST(Breaker, ZeroSlaTurnsTheLatencyRuleOff) {
  BreakerConfig c = cfg();
  c.latency_sla_s = 0;
  Breaker b(c);
  EXPECT_EQ(b.observe(0, 0.1, 1000), BreakerState::kOk);
  EXPECT_EQ(b.observe(1000, 0.1, 1000), BreakerState::kOk);
}

TEST(Breaker, WarnReturnsToOkAfterHold) {
  Breaker b(cfg());
  b.observe(0, 0.95, 0);
  EXPECT_EQ(b.observe(1, 0.5, 0), BreakerState::kWarn);
  EXPECT_EQ(b.observe(6, 0.5, 0), BreakerState::kOk);
  EXPECT_EQ(b.snapshot().num_transitions, 2u);
}

TEST(LatencyWindow, P95IsNearestRankAndOldSamplesAge) {
  LatencyWindow w(/*capacity=*/100, /*max_age_s=*/10);
  EXPECT_EQ(w.p95(0), 0);
  for (int i = 1; i <= 20; ++i) w.add(0, i);  // 1..20: rank ceil(19) = 19
  EXPECT_DOUBLE_EQ(w.p95(0), 19);
  w.add(5, 100);
  EXPECT_DOUBLE_EQ(w.p95(5), 20);    // 21 samples: rank ceil(19.95) = 20
  EXPECT_DOUBLE_EQ(w.p95(11), 100);  // the first 20 are older than 10 s
}

TEST(LatencyWindow, KeepsOnlyTheNewestCapacitySamples) {
  LatencyWindow w(/*capacity=*/3, 100);
  for (double v : {50.0, 1.0, 2.0, 3.0}) w.add(0, v);
  EXPECT_DOUBLE_EQ(w.p95(0), 3);
}

}  // namespace
}  // namespace kvw::server
