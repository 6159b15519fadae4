#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <new>
#include <stdexcept>
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

// A worker's exception must not reach std::terminate: run() waits for the whole phase, then
// rethrows it on the calling thread, and the pool keeps working afterwards.
TEST(ThreadPool, WorkerExceptionIsRethrownOnTheCallerAfterThePhase) {
  ThreadPool pool(3);
  for (int iter = 0; iter < 50; ++iter) {
    std::atomic<int> done{0};
    EXPECT_THROW(pool.run([&](int ith, int) {
      if (ith == 2) throw std::bad_alloc();
      done.fetch_add(1);
    }),
                 std::bad_alloc);
    EXPECT_EQ(done.load(), 2) << "the other threads finished the phase before run() threw";
  }
  std::atomic<int> hits{0};
  pool.run([&](int, int) { hits.fetch_add(1); });
  EXPECT_EQ(hits.load(), 3);
}

TEST(ThreadPool, TaskHookFaultOnAWorkerIsRethrownOnce) {
  ThreadPool pool(2);
  pool.set_task_hook([](int ith) {
    if (ith == 1) throw std::runtime_error("injected");
  });
  EXPECT_THROW(pool.run([](int, int) {}), std::runtime_error);
  pool.set_task_hook({});
  EXPECT_NO_THROW(pool.run([](int, int) {}));
}

}  // namespace
}  // namespace kvw
