// SSE and Prometheus text parsing edge cases.
#include <gtest/gtest.h>

#include "loadgen/prom.h"
#include "loadgen/sse.h"

namespace kvw::loadgen {
namespace {

TEST(Sse, EventSplitAcrossReadsByteByByte) {
  SseParser p;
  std::vector<std::string> ev;
  const std::string s = "data: {\"a\":1}\n\ndata: [DONE]\n\n";
  for (char c : s) p.feed(std::string_view(&c, 1), ev);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0], "{\"a\":1}");
  EXPECT_EQ(ev[1], "[DONE]");
  EXPECT_TRUE(p.done());
}

TEST(Sse, SeveralEventsInOneReadAndAPartialTail) {
  SseParser p;
  std::vector<std::string> ev;
  p.feed("data: one\n\ndata: two\n\ndata: thr", ev);
  EXPECT_EQ(ev, (std::vector<std::string>{"one", "two"}));
  EXPECT_FALSE(p.done());
  EXPECT_GT(p.num_pending_bytes(), 0u);
  p.feed("ee\n\n", ev);
  EXPECT_EQ(ev.back(), "three");
}

TEST(Sse, CrlfSplitBetweenReadsCommentsAndMultilineData) {
  SseParser p;
  std::vector<std::string> ev;
  p.feed(": keep-alive comment\r\n\r\nevent: x\r\ndata: a\r", ev);
  EXPECT_TRUE(ev.empty());  // a comment alone is not an event
  p.feed("\ndata:b\r\n\r", ev);
  p.feed("\n", ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0], "a\nb");
  EXPECT_FALSE(p.done());
}

TEST(Sse, DoneOnlyForExactMarker) {
  SseParser p;
  std::vector<std::string> ev;
  p.feed("data: [DONE] \n\n", ev);
  EXPECT_FALSE(p.done());
  p.feed("data: [DONE]\n\n", ev);
  EXPECT_TRUE(p.done());
}

TEST(Prometheus, ParsesLabelsEscapesAndSpecialValues) {
  const char* text =
      "# HELP kvwarden_kv_usage_ratio KV in use\n"
      "# TYPE kvwarden_kv_usage_ratio gauge\n"
      "kvwarden_kv_usage_ratio 0.25\n"
      "kvwarden_requests{state=\"waiting\"} 3\n"
      "kvwarden_requests{state=\"running\",model=\"a\\\"b\"} 5 1700000000\n"
      "kvwarden_preemptions_total{mode=\"swap\"} 2\n"
      "kvwarden_preemptions_total{mode=\"recompute\"} 4\n"
      "weird_nan NaN\n"
      "broken{state=\"x} 1\n"
      "kvwarden_process_resident_memory_bytes 1.5e+08\n";
  auto s = parse_prometheus_text(text);
  ASSERT_EQ(s.size(), 7u);
  EXPECT_EQ(s[2].labels.at("model"), "a\"b");
  auto snap = snapshot_from_samples(s, 3.0);
  EXPECT_DOUBLE_EQ(snap.t_s, 3.0);
  EXPECT_DOUBLE_EQ(snap.kv_usage_ratio, 0.25);
  EXPECT_DOUBLE_EQ(snap.num_waiting, 3);
  EXPECT_DOUBLE_EQ(snap.num_running, 5);
  EXPECT_DOUBLE_EQ(snap.preemptions_total, 6);
  EXPECT_DOUBLE_EQ(snap.resident_memory_bytes, 1.5e8);
  EXPECT_TRUE(std::isnan(snap.kv_fragmentation_ratio));
}

TEST(Prometheus, FallsBackToVllmNames) {
  auto snap = snapshot_from_samples(
      parse_prometheus_text("vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.5\n"
                            "vllm:num_requests_waiting{model_name=\"m\"} 7\n"
                            "vllm:num_preemptions_total{model_name=\"m\"} 1\n"
                            "process_resident_memory_bytes 42\n"),
      0);
  EXPECT_DOUBLE_EQ(snap.kv_usage_ratio, 0.5);
  EXPECT_DOUBLE_EQ(snap.num_waiting, 7);
  EXPECT_DOUBLE_EQ(snap.preemptions_total, 1);
  EXPECT_DOUBLE_EQ(snap.resident_memory_bytes, 42);
}

}  // namespace
}  // namespace kvw::loadgen
