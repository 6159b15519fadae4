#include "core/thread_name.h"

#include <gtest/gtest.h>

#include <mutex>
#include <set>
#include <string>

#include "core/thread_pool.h"

namespace kvw {
namespace {

TEST(ThreadName, PoolWorkersCarryTheirPrefixAndIndex) {
  ThreadPool pool(3, "kvw-test");
  std::mutex mu;
  std::set<std::string> names;
  pool.run([&](int ith, int) {
    if (ith == 0) return;  // the caller keeps its own name
    std::lock_guard<std::mutex> lock(mu);
    names.insert(thread_name());
  });
  EXPECT_EQ(names, (std::set<std::string>{"kvw-test-1", "kvw-test-2"}));
}

TEST(ThreadName, LongNamesAreCutToFifteenBytes) {
  const std::string before = thread_name();
  set_thread_name("kvw-a-name-longer-than-fifteen");
  EXPECT_EQ(thread_name(), "kvw-a-name-long");
  set_thread_name(before);
}

}  // namespace
}  // namespace kvw
