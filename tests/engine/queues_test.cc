// RequestQueue back-pressure, TokenChannel ordering, and the --memory-budget parser.
#include "engine/queues.h"

#include <gtest/gtest.h>

#include <thread>

#include "engine/engine_config.h"

namespace kvw {
namespace {

PendingRequest pending(uint64_t id) {
  PendingRequest p;
  p.request_id = id;
  return p;
}

TEST(RequestQueue, TryPushRefusesWhenFullAndAfterClose) {
  RequestQueue q(2);
  EXPECT_TRUE(q.try_push(pending(1)));
  EXPECT_TRUE(q.try_push(pending(2)));
  EXPECT_FALSE(q.try_push(pending(3)));
  EXPECT_TRUE(q.push_cancel(1));
  std::vector<PendingRequest> rs;
  std::vector<uint64_t> cs;
  q.drain(rs, cs);
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[1].request_id, 2u);
  EXPECT_EQ(cs, std::vector<uint64_t>{1});
  EXPECT_TRUE(q.try_push(pending(3)));
  q.close();
  EXPECT_FALSE(q.try_push(pending(4)));
  EXPECT_FALSE(q.push_cancel(3));
}

TEST(TokenChannel, DeliversTokensInOrderThenFinalEventAcrossThreads) {
  TokenChannel ch(9, 3);
  std::thread producer([&] {
    for (int32_t t : {4, 5, 6}) ch.push_token(t);
    ch.finish(FinishReason::kLength);
    ch.finish(FinishReason::kError, "ignored: first reason wins");
  });
  std::vector<int32_t> got;
  for (;;) {
    ChannelEvent ev = ch.next();
    if (ev.kind == ChannelEvent::Kind::kFinished) {
      EXPECT_EQ(ev.reason, FinishReason::kLength);
      break;
    }
    got.push_back(ev.token_id);
  }
  producer.join();
  EXPECT_EQ(got, (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(ch.next().kind, ChannelEvent::Kind::kFinished);
  EXPECT_FALSE(TokenChannel(1, 1).next_for(std::chrono::milliseconds(1)).has_value());
}

TEST(MemoryBudget, ParsesBytesUnitsAndPercentOfMachineLimit) {
  EXPECT_EQ(*parse_memory_budget("1048576", 0), 1048576u);
  EXPECT_EQ(*parse_memory_budget("8G", 0), uint64_t{8} << 30);
  EXPECT_EQ(*parse_memory_budget("512MiB", 0), uint64_t{512} << 20);
  EXPECT_EQ(*parse_memory_budget("1.5gb", 0), uint64_t{3} << 29);
  EXPECT_EQ(*parse_memory_budget("50%", uint64_t{4} << 30), uint64_t{2} << 30);
  EXPECT_FALSE(parse_memory_budget("50%", 0).ok());
  EXPECT_FALSE(parse_memory_budget("150%", 1000).ok());
  EXPECT_FALSE(parse_memory_budget("lots", 0).ok());
  auto bad = parse_memory_budget("3 parsecs", 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("--memory-budget"), std::string::npos);
}

TEST(MemoryBudget, SizeOrOffTakesZeroInAnyUnitAndParsesTheRestAsABudget) {
  EXPECT_EQ(*parse_size_or_off("--grammar-cache", "0", 0), 0u);
  EXPECT_EQ(*parse_size_or_off("--grammar-cache", " 0MiB ", 0), 0u);
  EXPECT_EQ(*parse_size_or_off("--grammar-cache", "16MiB", 0), uint64_t{16} << 20);
  EXPECT_FALSE(parse_size_or_off("--grammar-cache", "-1", 0).ok());
  auto bad = parse_size_or_off("--grammar-cache", "off", 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.message().find("--grammar-cache 'off'"), 0u) << bad.message();
}

TEST(MemoryBudget, MachineLimitIsSmallerOfMemTotalAndCgroup) {
  EXPECT_EQ(parse_meminfo_total("MemTotal:       16384 kB\nMemFree: 1 kB\n"), 16384u * 1024);
  EXPECT_EQ(parse_meminfo_total("MemFree: 1 kB\n"), 0u);
  EXPECT_EQ(parse_cgroup_memory_max("max\n"), 0u);
  EXPECT_EQ(parse_cgroup_memory_max("2147483648\n"), 2147483648u);
  EXPECT_GT(machine_memory_limit_bytes(), 0u);
}

TEST(MemoryBudget, AvailableMemoryIsMemAvailableAndAtMostTheMachine) {
  EXPECT_EQ(parse_meminfo_available("MemTotal: 16384 kB\nMemAvailable:    2048 kB\n"),
            2048u * 1024);
  EXPECT_EQ(parse_meminfo_available("MemTotal: 16384 kB\n"), 0u);
  EXPECT_GT(available_memory_bytes(), 0u);
  EXPECT_LE(available_memory_bytes(), machine_memory_limit_bytes());
}

}  // namespace
}  // namespace kvw
