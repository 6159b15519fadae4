// AdmissionTicket: the slot the door reserves from the headers and the exact count admitted
// against it after parsing (issue 34): admitted within the reservation without a second
// decision, only the extra slots decided, every unused slot given back on any exit.
#include "server/admission_ticket.h"

#include <gtest/gtest.h>

#include <memory>

namespace kvw::server {
namespace {

AdmissionConfig queue_only(int64_t max_queue) {
  AdmissionConfig c;
  c.max_queue = max_queue;
  c.max_queue_wait_s = 0;  // the queue bound alone decides
  return c;
}

const QueueLoad kIdleEngine{};

TEST(AdmissionTicket, DoorReservesOneSlotOrHoldsNothingWhenFull) {
  AdmissionController a(queue_only(/*max_queue=*/1), /*concurrency=*/1);
  AdmissionTicket running(a), queued(a), refused(a);
  EXPECT_EQ(running.reserve(0, 1, kIdleEngine).verdict, AdmissionVerdict::kAdmit);
  EXPECT_EQ(queued.reserve(0, 1, kIdleEngine).verdict, AdmissionVerdict::kAdmit);
  EXPECT_EQ(a.snapshot().in_flight, 2);
  const AdmissionDecision d = refused.reserve(0, 1, kIdleEngine);
  EXPECT_EQ(d.verdict, AdmissionVerdict::kQueueFull);
  EXPECT_GE(d.retry_after_s, 1);
  EXPECT_EQ(refused.held(), 0);
  EXPECT_EQ(a.snapshot().in_flight, 2);
}

// The door and the exact check cannot disagree: a one-choice request that passed the door is
// admitted after parsing even though the queue filled up meanwhile.
TEST(AdmissionTicket, ExactCountWithinTheReservationIsAdmittedWithoutASecondDecision) {
  AdmissionController a(queue_only(1), 1);
  AdmissionTicket first(a), second(a);
  ASSERT_EQ(first.reserve(0, 1, kIdleEngine).verdict, AdmissionVerdict::kAdmit);
  ASSERT_EQ(second.reserve(0, 1, kIdleEngine).verdict, AdmissionVerdict::kAdmit);
  AdmissionTicket late(a);
  ASSERT_EQ(late.reserve(0, 1, kIdleEngine).verdict, AdmissionVerdict::kQueueFull);  // full now
  // Even with the engine reporting a long queue, the reserved slot stands.
  EXPECT_EQ(second.admit_exact(0, 1, QueueLoad{.num_waiting = 50}).verdict,
            AdmissionVerdict::kAdmit);
  EXPECT_EQ(second.held(), 1);
  EXPECT_EQ(a.snapshot().in_flight, 2);
}

TEST(AdmissionTicket, ChoicesBeyondTheReservationAreDecidedAndRefusedWhenTheyDoNotFit) {
  AdmissionController a(queue_only(2), 1);
  AdmissionTicket t(a);
  ASSERT_EQ(t.reserve(0, 1, kIdleEngine).verdict, AdmissionVerdict::kAdmit);
  // n = 4 of one prompt: 1 runs, 3 would queue > 2.
  EXPECT_EQ(t.admit_exact(0, 4, kIdleEngine).verdict, AdmissionVerdict::kQueueFull);
  // As choices of the one prompt the door admitted they may queue up to 2 + 2, but not 5.
  EXPECT_EQ(t.admit_exact(0, 6, kIdleEngine, /*siblings=*/5).verdict, AdmissionVerdict::kQueueFull);
  EXPECT_EQ(t.admit_exact(0, 4, kIdleEngine, /*siblings=*/3).verdict, AdmissionVerdict::kAdmit);
  EXPECT_EQ(t.held(), 4);
  t.release();
  // Two prompts of n = 2 (3 slots beyond the door's, 2 of them siblings): 3 queue, of which
  // the second prompt's first choice must fit the limit (3 - 2 <= 2).
  ASSERT_EQ(t.reserve(0, 1, kIdleEngine).verdict, AdmissionVerdict::kAdmit);
  EXPECT_EQ(t.admit_exact(0, 4, kIdleEngine, /*siblings=*/2).verdict, AdmissionVerdict::kAdmit);
  t.release();
  EXPECT_EQ(a.snapshot().in_flight, 0);
  // n = 3 fits: 1 runs, 2 queue.
  AdmissionTicket u(a);
  ASSERT_EQ(u.reserve(0, 1, kIdleEngine).verdict, AdmissionVerdict::kAdmit);
  EXPECT_EQ(u.admit_exact(0, 3, kIdleEngine).verdict, AdmissionVerdict::kAdmit);
  EXPECT_EQ(u.held(), 3);
  EXPECT_EQ(a.snapshot().in_flight, 3);
}

// A body that does not parse (or a client that leaves mid-body) ends the request before the
// exact check: destroying the ticket gives the door's slot back, and it is not a completion.
TEST(AdmissionTicket, SlotIsReleasedWhenTheRequestEndsBeforeSubmitting) {
  AdmissionController a(queue_only(1), 1);
  {
    auto door = std::make_unique<AdmissionTicket>(a);
    ASSERT_EQ(door->reserve(0, 1, kIdleEngine).verdict, AdmissionVerdict::kAdmit);
    std::unique_ptr<http::DoorPass> held_by_request = std::move(door);
    EXPECT_EQ(a.snapshot().in_flight, 1);
  }  // parse error: the request (and its pass) is dropped
  EXPECT_EQ(a.snapshot().in_flight, 0);
  EXPECT_EQ(a.snapshot().num_completed, 0u);
  // A surplus (the exact count below the reservation) goes back at once.
  AdmissionTicket t(a);
  ASSERT_EQ(t.reserve(0, 2, kIdleEngine).verdict, AdmissionVerdict::kAdmit);
  EXPECT_EQ(t.admit_exact(0, 1, kIdleEngine).verdict, AdmissionVerdict::kAdmit);
  EXPECT_EQ(a.snapshot().in_flight, 1);
}

// Submitted choices own their slots: they stay in flight after the ticket is gone, until each
// engine request completes; slots never handed over go back.
TEST(AdmissionTicket, HandedOverSlotsOutliveTheTicketUntilOnComplete) {
  AdmissionController a(queue_only(4), 1);
  {
    AdmissionTicket t(a);
    ASSERT_EQ(t.reserve(0, 1, kIdleEngine).verdict, AdmissionVerdict::kAdmit);
    ASSERT_EQ(t.admit_exact(0, 3, kIdleEngine).verdict, AdmissionVerdict::kAdmit);
    t.hand_over(2);  // the third submit failed
  }
  EXPECT_EQ(a.snapshot().in_flight, 2);
  a.on_complete(1.0);
  a.on_complete(2.0);
  EXPECT_EQ(a.snapshot().in_flight, 0);
  EXPECT_EQ(a.snapshot().num_completed, 2u);
}

}  // namespace
}  // namespace kvw::server
