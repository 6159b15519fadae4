// The request-memory budget: grants at once when there is room, queues FIFO when not, hands
// returned bytes to the oldest waiter, and a cancelled waiter never gets its callback.
#include "http/byte_budget.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace kvw::http {
namespace {

TEST(ByteBudget, GrantsAtOnceWhenThereIsRoom) {
  ByteBudget b(100);
  std::optional<ByteLease> got;
  b.acquire(60, [&](ByteLease l) { got = std::move(l); });
  ASSERT_TRUE(got);
  EXPECT_EQ(got->bytes(), 60u);
  EXPECT_EQ(b.stats().used, 60u);
  got.reset();
  EXPECT_EQ(b.stats().used, 0u);
  EXPECT_EQ(b.stats().peak, 60u);
}

TEST(ByteBudget, WaitersAreServedInOrderAsBytesComeBack) {
  ByteBudget b(100);
  std::optional<ByteLease> first, second, third;
  b.acquire(70, [&](ByteLease l) { first = std::move(l); });
  b.acquire(50, [&](ByteLease l) { second = std::move(l); });
  // 20 bytes would fit, but a later request may not overtake a waiting one (no starvation).
  b.acquire(20, [&](ByteLease l) { third = std::move(l); });
  ASSERT_TRUE(first);
  EXPECT_FALSE(second);
  EXPECT_FALSE(third);
  EXPECT_EQ(b.stats().num_waiting, 2u);
  first.reset();  // 70 back: 50 and then 20 fit
  ASSERT_TRUE(second);
  ASSERT_TRUE(third);
  EXPECT_EQ(b.stats().used, 70u);
  EXPECT_LE(b.stats().peak, 100u);
}

TEST(ByteBudget, CancelledWaiterIsDroppedAndLetsOthersIn) {
  ByteBudget b(100);
  std::optional<ByteLease> holder, big, small;
  b.acquire(50, [&](ByteLease l) { holder = std::move(l); });
  const uint64_t t_big = b.acquire(90, [&](ByteLease l) { big = std::move(l); });
  b.acquire(40, [&](ByteLease l) { small = std::move(l); });
  EXPECT_FALSE(small);  // behind the big one
  EXPECT_TRUE(b.cancel(t_big));
  ASSERT_TRUE(small);  // the head left, the next one fits
  EXPECT_FALSE(big);
  EXPECT_FALSE(b.cancel(t_big));
  EXPECT_EQ(b.stats().num_timed_out, 1u);
  holder.reset();
  small.reset();
  EXPECT_FALSE(big);
  EXPECT_EQ(b.stats().used, 0u);
}

TEST(ByteBudget, MovedLeaseReturnsItsBytesOnce) {
  ByteBudget b(10);
  std::vector<ByteLease> leases;
  b.acquire(10, [&](ByteLease l) { leases.push_back(std::move(l)); });
  ByteLease moved = std::move(leases.back());
  leases.clear();
  EXPECT_EQ(b.stats().used, 10u);
  moved = ByteLease();
  EXPECT_EQ(b.stats().used, 0u);
}

// A request's holdings become known after its body: the lease grows only into free room (never
// waiting, never overtaking a waiter's claim on what is free) and shrinking hands bytes on.
TEST(ByteBudget, LeaseGrowsOnlyIntoFreeRoomAndShrinkingLetsWaitersIn) {
  ByteBudget b(100);
  std::optional<ByteLease> held, waiter;
  b.acquire(40, [&](ByteLease l) { held = std::move(l); });
  ASSERT_TRUE(held);
  EXPECT_TRUE(held->resize(90));
  EXPECT_EQ(b.stats().used, 90u);
  EXPECT_FALSE(held->resize(101));  // more than the room: unchanged
  EXPECT_EQ(held->bytes(), 90u);
  EXPECT_EQ(b.stats().used, 90u);
  b.acquire(30, [&](ByteLease l) { waiter = std::move(l); });
  EXPECT_FALSE(waiter);
  EXPECT_TRUE(held->resize(70));  // 30 free now: the waiter gets them
  ASSERT_TRUE(waiter);
  EXPECT_EQ(b.stats().used, 100u);
  EXPECT_EQ(b.stats().peak, 100u);
  held.reset();
  waiter.reset();
  EXPECT_EQ(b.stats().used, 0u);
  ByteLease empty;
  EXPECT_FALSE(empty.resize(1));
}

}  // namespace
}  // namespace kvw::http
