// Admission control: bounded queue, predicted wait from the queued work in tokens over the
// engine's token rate, Retry-After (token-based for queue refusals, drain-rate EWMA otherwise).
#include "server/admission.h"

#include <gtest/gtest.h>

#include "server/slot_ends.h"

namespace kvw::server {
namespace {

AdmissionConfig cfg(int64_t max_queue, double max_wait) {
  AdmissionConfig c;
  c.max_queue = max_queue;
  c.max_queue_wait_s = max_wait;
  c.initial_drain_rate = 0.5;
  c.ewma_alpha = 0.5;
  c.initial_token_rate = 100;
  c.initial_request_tokens = 100;
  return c;
}

// The engine's queue: `n` waiting requests with `tokens` of work, computing `rate` tokens/s.
QueueLoad waiting(int64_t n, int64_t tokens = 0, double rate = 0) {
  return QueueLoad{.num_waiting = n, .waiting_work_tokens = tokens, .token_rate = rate};
}

TEST(Admission, AdmitsUpToConcurrencyPlusQueueThenRefusesQueueFull) {
  AdmissionController a(cfg(/*max_queue=*/2, 0), /*concurrency=*/3);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(a.try_admit(0, 1, waiting(0)).verdict, AdmissionVerdict::kAdmit) << i;
  }
  const AdmissionDecision d = a.try_admit(0, 1, waiting(0));
  EXPECT_EQ(d.verdict, AdmissionVerdict::kQueueFull);
  EXPECT_EQ(d.queued_ahead, 2);
  // Before the engine reports anything: 2 ahead x 100 tokens at 100 tokens/s -> 2 s.
  EXPECT_EQ(d.queued_work_tokens, 200);
  EXPECT_EQ(d.retry_after_s, 2);
  EXPECT_EQ(a.snapshot().in_flight, 5);  // the refused one was not counted
  a.on_complete(1.0);
  EXPECT_EQ(a.try_admit(1.0, 1, waiting(0)).verdict, AdmissionVerdict::kAdmit);
}

TEST(Admission, MultiChoiceRequestNeedsRoomForAllItsChoices) {
  AdmissionController a(cfg(2, 0), 1);
  EXPECT_EQ(a.try_admit(0, 3, waiting(0)).verdict, AdmissionVerdict::kAdmit);  // 1 runs, 2 queue
  EXPECT_EQ(a.try_admit(0, 1, waiting(0)).verdict, AdmissionVerdict::kQueueFull);
  AdmissionController b(cfg(2, 0), 1);
  EXPECT_EQ(b.try_admit(0, 4, waiting(0)).verdict, AdmissionVerdict::kQueueFull);
}

// Further choices of an admitted prompt may take up to --max-queue more places: in a retry
// storm n = 1 requests took each place as it freed, and n > 1 (which needs n at once) starved.
TEST(Admission, SiblingChoicesMayQueueUpToMaxQueueBeyondTheLimit) {
  AdmissionController a(cfg(/*max_queue=*/4, 0), /*concurrency=*/2);
  for (int i = 0; i < 6; ++i)
    ASSERT_EQ(a.try_admit(0, 1, waiting(0)).verdict, AdmissionVerdict::kAdmit);
  EXPECT_EQ(a.try_admit(0, 1, waiting(0)).verdict, AdmissionVerdict::kQueueFull);  // 5 > 4
  // Choices of a prompt the door admitted may queue within 4 + 4, not beyond: 9 > 8.
  EXPECT_EQ(a.try_admit(0, 5, waiting(0), /*siblings=*/5).verdict, AdmissionVerdict::kQueueFull);
  // A new prompt's first choice among them must fit the limit itself: 8 - 3 > 4.
  EXPECT_EQ(a.try_admit(0, 4, waiting(0), 3).verdict, AdmissionVerdict::kQueueFull);
  EXPECT_EQ(a.try_admit(0, 3, waiting(0), 3).verdict, AdmissionVerdict::kAdmit);  // 7 queued
  EXPECT_EQ(a.try_admit(0, 1, waiting(0)).verdict, AdmissionVerdict::kQueueFull);
  EXPECT_EQ(a.snapshot().in_flight, 9);
}

TEST(Admission, EngineWaitingCountsAsQueuedEvenBelowConcurrency) {
  AdmissionController a(cfg(2, 0), 100);
  EXPECT_EQ(a.try_admit(0, 1, waiting(2)).verdict, AdmissionVerdict::kQueueFull);
  EXPECT_EQ(a.try_admit(0, 1, waiting(1)).verdict, AdmissionVerdict::kAdmit);
}

TEST(Admission, DrainRateIsEwmaOfBusyCompletionIntervals) {
  AdmissionController a(cfg(0, 0), 1);
  EXPECT_DOUBLE_EQ(a.snapshot().drain_rate, 0.5);  // initial estimate
  // Idle until t=100: that gap must not count as drain time.
  ASSERT_EQ(a.try_admit(100, 3, waiting(0)).verdict, AdmissionVerdict::kAdmit);
  a.on_complete(101);  // interval 1 s
  EXPECT_DOUBLE_EQ(a.snapshot().drain_rate, 1.0);
  a.on_complete(101.5);  // 0.5 s: ewma 0.5*0.5 + 0.5*1 = 0.75 s
  EXPECT_NEAR(a.snapshot().drain_rate, 1 / 0.75, 1e-9);
  EXPECT_EQ(a.snapshot().num_completed, 2u);
  EXPECT_EQ(a.snapshot().in_flight, 1);
}

// Issue 34: the wait is the queued work in tokens (prompt + decode of every waiting request)
// over the engine's measured token rate, not a count of requests over the completion rate.
TEST(Admission, PredictedWaitIsQueuedWorkInTokensOverTheTokenRate) {
  AdmissionController a(cfg(0, /*max_wait=*/3.0), /*concurrency=*/1);
  ASSERT_EQ(a.try_admit(0, 1, waiting(0)).verdict, AdmissionVerdict::kAdmit);  // runs
  // 2 waiting, 600 tokens of work, 400 tokens/s: 1.5 s.
  AdmissionDecision d = a.try_admit(1, 1, waiting(2, 600, 400));
  EXPECT_EQ(d.verdict, AdmissionVerdict::kAdmit);
  EXPECT_EQ(d.queued_ahead, 2);
  EXPECT_EQ(d.queued_work_tokens, 600);
  EXPECT_NEAR(d.predicted_wait_s, 1.5, 1e-9);
  // 3 waiting, 1300 tokens: 3.25 s > 3 s, Retry-After rounded up.
  d = a.try_admit(1, 1, waiting(3, 1300, 400));
  EXPECT_EQ(d.verdict, AdmissionVerdict::kWaitTooLong);
  EXPECT_EQ(d.queued_work_tokens, 1300);
  EXPECT_NEAR(d.predicted_wait_s, 3.25, 1e-9);
  EXPECT_EQ(d.retry_after_s, 4);
  // Fast completions (short requests finishing) say nothing about this queue's work.
  for (int i = 1; i <= 20; ++i) a.on_complete(1 + i * 1e-3);
  EXPECT_EQ(a.try_admit(1.1, 1, waiting(3, 1300, 400)).verdict, AdmissionVerdict::kWaitTooLong);
  // The same queue on an engine that computes 1000 tokens/s: 1.3 s.
  EXPECT_EQ(a.try_admit(1.1, 1, waiting(3, 1300, 1000)).verdict, AdmissionVerdict::kAdmit);
  // The same count of requests with little work each: 3 x 10 tokens at 400/s.
  EXPECT_EQ(a.try_admit(1.1, 1, waiting(3, 30, 400)).verdict, AdmissionVerdict::kAdmit);
}

// Admitted requests beyond the running slots that the engine does not report as waiting yet
// (its stats lag a step) count at the mean work of the waiting ones, or the last mean seen.
TEST(Admission, UnreportedQueuedRequestsCountAtTheMeanWorkOfWaitingOnes) {
  AdmissionController a(cfg(0, /*max_wait=*/10.0), /*concurrency=*/1);
  ASSERT_EQ(a.try_admit(0, 5, waiting(0)).verdict, AdmissionVerdict::kAdmit);  // 1 runs, 4 queue
  // 2 reported (500 tokens each), 2 more not yet: 2000 tokens at 100/s = 20 s.
  AdmissionDecision d = a.try_admit(0, 1, waiting(2, 1000, 100));
  EXPECT_EQ(d.verdict, AdmissionVerdict::kWaitTooLong);
  EXPECT_EQ(d.queued_ahead, 4);
  EXPECT_EQ(d.queued_work_tokens, 2000);
  // None reported: the last mean (500) stands.
  d = a.try_admit(0, 1, waiting(0, 0, 100));
  EXPECT_EQ(d.queued_work_tokens, 2000);
  EXPECT_EQ(d.retry_after_s, 20);
  // Nothing known at all: initial_request_tokens (100) at initial_token_rate (100/s).
  AdmissionController b(cfg(0, 10.0), 1);
  ASSERT_EQ(b.try_admit(0, 5, waiting(0)).verdict, AdmissionVerdict::kAdmit);
  d = b.try_admit(0, 1, waiting(0));
  EXPECT_EQ(d.queued_work_tokens, 400);
  EXPECT_NEAR(d.predicted_wait_s, 4.0, 1e-9);
  EXPECT_EQ(d.verdict, AdmissionVerdict::kAdmit);
}

TEST(Admission, ZeroMaxQueueWaitNeverRefusesOnThePrediction) {
  AdmissionController a(cfg(0, 0), 1);
  const AdmissionDecision d = a.try_admit(0, 1, waiting(100, 1'000'000, 1));
  EXPECT_EQ(d.verdict, AdmissionVerdict::kAdmit);
  EXPECT_GT(d.predicted_wait_s, 1e5);
}

TEST(Admission, RetryAfterIsAtLeastOneSecond) {
  AdmissionController a(cfg(1, 0), 1);
  ASSERT_EQ(a.try_admit(0, 1, waiting(0)).verdict, AdmissionVerdict::kAdmit);
  a.on_complete(0.001);  // a very fast drain
  ASSERT_EQ(a.try_admit(1, 2, waiting(0)).verdict, AdmissionVerdict::kAdmit);
  const AdmissionDecision d = a.try_admit(1, 1, waiting(1, 0, 1000));  // no work left to wait
  ASSERT_EQ(d.verdict, AdmissionVerdict::kQueueFull);
  EXPECT_EQ(d.retry_after_s, 1);
  EXPECT_EQ(a.retry_after_s(), 1);
}

// Issue 30 (the worst mix): every slot held by long choices and nothing queued once predicted
// 0 s, admitted, and the request waited the whole --max-queue-wait for a 503. The wait for a
// running slot counts when it is the longer bound.
TEST(Admission, WaitForARunningSlotCountsWhenLongerThanTheQueuedWork) {
  AdmissionController a(cfg(/*max_queue=*/0, /*max_wait=*/60), /*concurrency=*/1);
  ASSERT_EQ(a.try_admit(0, 1, waiting(0)).verdict, AdmissionVerdict::kAdmit);  // runs
  QueueLoad full = waiting(0, 0, /*rate=*/100);
  full.slot_wait_s = 90.2;
  AdmissionDecision d = a.try_admit(1, 1, full);
  EXPECT_EQ(d.verdict, AdmissionVerdict::kWaitTooLong);
  EXPECT_DOUBLE_EQ(d.predicted_wait_s, 90.2);
  EXPECT_EQ(d.retry_after_s, 91);
  full.slot_wait_s = 10;
  d = a.try_admit(1, 1, full);
  EXPECT_EQ(d.verdict, AdmissionVerdict::kAdmit);
  EXPECT_DOUBLE_EQ(d.predicted_wait_s, 10);
  // More queued work than the slot wait: the work decides, as before.
  QueueLoad busy = waiting(1, 5000, 100);
  busy.slot_wait_s = 10;
  EXPECT_DOUBLE_EQ(a.try_admit(1, 1, busy).predicted_wait_s, 50);
}

TEST(SlotEnds, SoonestEndLessTheStepOrNoneWhenEmpty) {
  SlotEnds ends;
  EXPECT_FALSE(ends.steps_to_soonest(0));
  const SlotEnds::Key late = ends.add(500);
  const SlotEnds::Key soon = ends.add(120);
  const SlotEnds::Key again = ends.add(120);  // two choices ending at one step
  EXPECT_EQ(ends.steps_to_soonest(100), 20);
  ends.remove(soon);
  EXPECT_EQ(ends.steps_to_soonest(100), 20);
  ends.remove(again);
  EXPECT_EQ(ends.steps_to_soonest(100), 400);
  EXPECT_EQ(ends.steps_to_soonest(600), 0) << "past its end: it may end now";
  ends.remove(late);
  EXPECT_EQ(ends.size(), 0u);
  EXPECT_FALSE(ends.steps_to_soonest(600));
}

}  // namespace
}  // namespace kvw::server
