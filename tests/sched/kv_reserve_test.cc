// The --kv-reserve p95 estimator: nearest-rank percentile over a sliding window of lengths.
#include "sched/kv_reserve.h"

#include <gtest/gtest.h>

namespace kvw {
namespace {

TEST(LengthTracker, P95IsTheNearestRankOverTheKeptSamples) {
  LengthTracker t(1000);
  EXPECT_EQ(t.p95(), 0);
  for (int64_t v = 100; v >= 1; --v) t.observe(v);  // order must not matter
  EXPECT_EQ(t.num_samples(), 100u);
  EXPECT_EQ(t.p95(), 95);
  t.observe(1000);  // 101 samples: rank ceil(95.95) = 96
  EXPECT_EQ(t.p95(), 96);
}

TEST(LengthTracker, OldSamplesLeaveTheWindow) {
  LengthTracker t(10);
  for (int i = 0; i < 10; ++i) t.observe(5000);
  EXPECT_EQ(t.p95(), 5000);
  for (int i = 0; i < 10; ++i) t.observe(200);  // the workload got shorter
  EXPECT_EQ(t.num_samples(), 10u);
  EXPECT_EQ(t.p95(), 200);
}

}  // namespace
}  // namespace kvw
