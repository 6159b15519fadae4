// Admission control: bounded queue, predicted wait from the drain-rate EWMA, Retry-After.
#include "server/admission.h"

#include <gtest/gtest.h>

namespace kvw::server {
namespace {

AdmissionConfig cfg(int64_t max_queue, double max_wait) {
  AdmissionConfig c;
  c.max_queue = max_queue;
  c.max_queue_wait_s = max_wait;
  c.initial_drain_rate = 0.5;
  c.ewma_alpha = 0.5;
  return c;
}

TEST(Admission, AdmitsUpToConcurrencyPlusQueueThenRefusesQueueFull) {
  AdmissionController a(cfg(/*max_queue=*/2, 0), /*concurrency=*/3);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(a.try_admit(0, 1, 0).verdict, AdmissionVerdict::kAdmit) << i;
  }
  const AdmissionDecision d = a.try_admit(0, 1, 0);
  EXPECT_EQ(d.verdict, AdmissionVerdict::kQueueFull);
  EXPECT_EQ(d.queued_ahead, 2);
  // Before any completion the initial estimate (0.5/s) applies: 2 ahead -> 4 s.
  EXPECT_EQ(d.retry_after_s, 4);
  EXPECT_EQ(a.snapshot().in_flight, 5);  // the refused one was not counted
  a.on_complete(1.0);
  EXPECT_EQ(a.try_admit(1.0, 1, 0).verdict, AdmissionVerdict::kAdmit);
}

TEST(Admission, MultiChoiceRequestNeedsRoomForAllItsChoices) {
  AdmissionController a(cfg(2, 0), 1);
  EXPECT_EQ(a.try_admit(0, 3, 0).verdict, AdmissionVerdict::kAdmit);  // 1 runs, 2 queue
  EXPECT_EQ(a.try_admit(0, 1, 0).verdict, AdmissionVerdict::kQueueFull);
  AdmissionController b(cfg(2, 0), 1);
  EXPECT_EQ(b.try_admit(0, 4, 0).verdict, AdmissionVerdict::kQueueFull);
}

TEST(Admission, EngineWaitingCountsAsQueuedEvenBelowConcurrency) {
  AdmissionController a(cfg(2, 0), 100);
  EXPECT_EQ(a.try_admit(0, 1, /*engine_waiting=*/2).verdict, AdmissionVerdict::kQueueFull);
  EXPECT_EQ(a.try_admit(0, 1, 1).verdict, AdmissionVerdict::kAdmit);
}

TEST(Admission, DrainRateIsEwmaOfBusyCompletionIntervals) {
  AdmissionController a(cfg(0, 0), 1);
  EXPECT_DOUBLE_EQ(a.snapshot().drain_rate, 0.5);  // initial estimate
  // Idle until t=100: that gap must not count as drain time.
  ASSERT_EQ(a.try_admit(100, 3, 0).verdict, AdmissionVerdict::kAdmit);
  a.on_complete(101);  // interval 1 s
  EXPECT_DOUBLE_EQ(a.snapshot().drain_rate, 1.0);
  a.on_complete(101.5);  // 0.5 s: ewma 0.5*0.5 + 0.5*1 = 0.75 s
  EXPECT_NEAR(a.snapshot().drain_rate, 1 / 0.75, 1e-9);
  EXPECT_EQ(a.snapshot().num_completed, 2u);
  EXPECT_EQ(a.snapshot().in_flight, 1);
}

TEST(Admission, PredictedWaitOverLimitIsRefusedWithRetryAfterFromDrainRate) {
  AdmissionController a(cfg(0, /*max_wait=*/3.0), /*concurrency=*/1);
  ASSERT_EQ(a.try_admit(0, 1, 0).verdict, AdmissionVerdict::kAdmit);
  a.on_complete(0.25);  // drain rate 4/s
  for (int i = 0; i < 13; ++i) ASSERT_EQ(a.try_admit(1, 1, 0).verdict, AdmissionVerdict::kAdmit);
  // 13 in flight, 1 runs: 12 ahead / 4 per s = 3 s: not over the limit.
  EXPECT_EQ(a.try_admit(1, 1, 0).verdict, AdmissionVerdict::kAdmit);
  // 13 ahead -> 3.25 s > 3 s.
  const AdmissionDecision d = a.try_admit(1, 1, 0);
  EXPECT_EQ(d.verdict, AdmissionVerdict::kWaitTooLong);
  EXPECT_NEAR(d.predicted_wait_s, 3.25, 1e-9);
  EXPECT_EQ(d.retry_after_s, 4);  // rounded up
}

TEST(Admission, RetryAfterIsAtLeastOneSecond) {
  AdmissionController a(cfg(1, 0), 1);
  ASSERT_EQ(a.try_admit(0, 1, 0).verdict, AdmissionVerdict::kAdmit);
  a.on_complete(0.001);  // a very fast drain
  ASSERT_EQ(a.try_admit(1, 2, 0).verdict, AdmissionVerdict::kAdmit);
  const AdmissionDecision d = a.try_admit(1, 1, 0);
  ASSERT_EQ(d.verdict, AdmissionVerdict::kQueueFull);
  EXPECT_EQ(d.retry_after_s, 1);
  EXPECT_EQ(a.retry_after_s(), 1);
}

}  // namespace
}  // namespace kvw::server
