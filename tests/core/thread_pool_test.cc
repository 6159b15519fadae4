#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace kvw {
namespace {

TEST(ThreadPool, RunCallsEveryThreadIndexOnceAndWaits) {
  ThreadPool pool(4);
  for (int iter = 0; iter < 200; ++iter) {
    std::vector<std::atomic<int>> hits(4);
    pool.run([&](int ith, int nth) {
      ASSERT_EQ(nth, 4);
      hits[ith].fetch_add(1);
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, SingleThreadRunsInline) {
  ThreadPool pool(1);
  int calls = 0;
  pool.run([&](int ith, int nth) {
    EXPECT_EQ(ith, 0);
    EXPECT_EQ(nth, 1);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace kvw
