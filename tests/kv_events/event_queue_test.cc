// Tests for the engine -> publisher hand-off: bounded in events, a batch that does not fit is
// refused whole (never partly queued, never waited for), and pop_all returns batches in order.
#include "kv_events/event_queue.h"

#include <gtest/gtest.h>

namespace kvw::kv_events {
namespace {

KvEventBatch batch(uint64_t seq, size_t num_events) {
  KvEventBatch b{.seq = seq, .ts = 0, .events = {}};
  b.events.resize(num_events);
  return b;
}

TEST(KvEventQueue, RefusesABatchThatDoesNotFitAndKeepsTheRest) {
  KvEventQueue q(5);
  EXPECT_TRUE(q.try_push(batch(0, 2)));
  EXPECT_TRUE(q.try_push(batch(1, 3)));
  EXPECT_EQ(q.num_events(), 5u);
  EXPECT_FALSE(q.try_push(batch(2, 1)));  // full
  EXPECT_EQ(q.num_events(), 5u);
  std::vector<KvEventBatch> out;
  q.pop_all(out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].seq, 0u);
  EXPECT_EQ(out[1].seq, 1u);
  EXPECT_EQ(out[1].events.size(), 3u);
  EXPECT_EQ(q.num_events(), 0u);
  EXPECT_TRUE(q.try_push(batch(3, 5)));  // room again
}

TEST(KvEventQueue, BatchLargerThanTheQueueNeverFits) {
  KvEventQueue q(4);
  EXPECT_FALSE(q.try_push(batch(0, 5)));
  EXPECT_EQ(q.num_events(), 0u);
  std::vector<KvEventBatch> out;
  q.pop_all(out);
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace kvw::kv_events
