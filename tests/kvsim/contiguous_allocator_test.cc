// Tests for the contiguous baseline: first-fit offsets, holes, coalescing, fragmentation.
#include "kvsim/contiguous_allocator.h"

#include <gtest/gtest.h>

namespace kvw::kvsim {
namespace {

TEST(ContiguousAllocator, FirstFitTakesLowestHoleThatFits) {
  ContiguousAllocator a(1000);
  EXPECT_EQ(a.allocate(100), 0u);
  EXPECT_EQ(a.allocate(200), 100u);
  EXPECT_EQ(a.allocate(300), 300u);
  EXPECT_EQ(a.allocate(400), 600u);
  a.check_invariants();
  EXPECT_EQ(a.allocate(1), std::nullopt);  // full
  a.free(100);                             // hole [100, 300)
  a.check_invariants();
  EXPECT_EQ(a.allocate(50), 100u);  // first fit, not best fit: splits the hole
  EXPECT_EQ(a.stats().num_holes, 1u);
  EXPECT_EQ(a.stats().largest_hole_bytes, 150u);
  a.check_invariants();
}

TEST(ContiguousAllocator, RefusesWhenNoSingleHoleFitsAndChangesNothing) {
  ContiguousAllocator a(1000);
  for (uint64_t want : {0u, 250u, 500u, 750u}) EXPECT_EQ(a.allocate(250), want);
  a.free(0);
  a.free(500);  // 500 bytes free, in two 250-byte holes
  const ContiguousStats before = a.stats();
  EXPECT_EQ(before.free_bytes, 500u);
  EXPECT_EQ(before.largest_hole_bytes, 250u);
  EXPECT_DOUBLE_EQ(before.fragmentation, 0.5);
  EXPECT_EQ(a.allocate(300), std::nullopt);  // enough in total, no hole big enough
  const ContiguousStats after = a.stats();
  EXPECT_EQ(after.free_bytes, 500u);
  EXPECT_EQ(after.num_holes, 2u);
  EXPECT_EQ(after.num_allocations, 2u);
  a.check_invariants();
}

TEST(ContiguousAllocator, FreeCoalescesWithBothNeighbours) {
  ContiguousAllocator a(1000);
  EXPECT_EQ(a.allocate(100), 0u);
  EXPECT_EQ(a.allocate(100), 100u);
  EXPECT_EQ(a.allocate(100), 200u);
  EXPECT_EQ(a.allocate(100), 300u);
  a.free(0);
  a.free(200);
  EXPECT_EQ(a.stats().num_holes, 3u);  // [0,100) [200,300) [400,1000)
  EXPECT_NEAR(a.stats().fragmentation, 200.0 / 800.0, 1e-12);
  a.free(100);  // joins [0,100) and [200,300) into [0,300)
  EXPECT_EQ(a.stats().num_holes, 2u);
  EXPECT_EQ(a.stats().largest_hole_bytes, 600u);
  a.free(300);  // everything merges back into one hole
  const ContiguousStats s = a.stats();
  EXPECT_EQ(s.num_holes, 1u);
  EXPECT_EQ(s.largest_hole_bytes, 1000u);
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_DOUBLE_EQ(s.fragmentation, 0.0);
  a.check_invariants();
  EXPECT_EQ(a.allocate(1000), 0u);
  EXPECT_DOUBLE_EQ(a.stats().fragmentation, 0.0);  // nothing free: defined as 0
}

TEST(ContiguousAllocator, MaxLengthReservationsLeaveTailUnusable) {
  // 4.5 reservations' worth of bytes: the half-sized tail is free but never fits one.
  ContiguousAllocator a(4500);
  for (uint64_t want : {0u, 1000u, 2000u, 3000u}) EXPECT_EQ(a.allocate(1000), want);
  EXPECT_EQ(a.allocate(1000), std::nullopt);
  EXPECT_EQ(a.stats().free_bytes, 500u);
  a.check_invariants();
}

TEST(ContiguousAllocatorDeathTest, DoubleFreeAborts) {
  ContiguousAllocator a(100);
  ASSERT_EQ(a.allocate(10), 0u);
  a.free(0);
  EXPECT_DEATH(a.free(0), "not allocated");
}

}  // namespace
}  // namespace kvw::kvsim
