// TraceRing: valid trace-event JSON, ordered by ts, bounded memory (oldest dropped).
#include "obs/trace_ring.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvw::obs {
namespace {

StepObservation step(uint64_t i) {
  StepObservation s;
  s.step = i;
  s.start_ns = 1'000'000'000 + i * 10'000'000;  // 10 ms apart
  s.duration_ns = 4'000'000;
  s.num_seqs = 3;
  s.num_tokens = 3;
  s.blocks_allocated = i % 2;
  s.blocks_freed = 0;
  if (i == 2) s.preempted_recompute = {41};
  if (i == 3) s.preempted_swap = {42, 43};
  if (i == 4) s.swapped_in = {42};
  if (i == 5) s.finished = {41};
  return s;
}

TEST(TraceRing, RendersChromeTraceEventsOrderedByTs) {
  TraceRing ring(1000);
  for (uint64_t i = 0; i < 6; ++i) ring.record(step(i));
  const auto j = nlohmann::json::parse(ring.to_json());
  const auto& ev = j.at("traceEvents");
  int steps = 0, preempts = 0, swap_ins = 0, allocs = 0;
  double prev_ts = -1;
  for (const auto& e : ev) {
    for (const char* k : {"name", "cat", "ph", "ts", "pid", "tid", "args"})
      ASSERT_TRUE(e.contains(k)) << e.dump();
    EXPECT_GE(e["ts"].get<double>(), prev_ts);
    prev_ts = e["ts"].get<double>();
    const std::string name = e["name"];
    if (name == "step") {
      ++steps;
      EXPECT_EQ(e["ph"], "X");
      EXPECT_EQ(e["dur"], 4000);
      EXPECT_EQ(e["args"]["seqs"], 3);
    }
    if (name.starts_with("preempt")) ++preempts;
    if (name == "swap_in") {
      ++swap_ins;
      EXPECT_EQ(e["args"]["request_id"], 42);
    }
    if (name == "kv_alloc") ++allocs;
  }
  EXPECT_EQ(steps, 6);
  EXPECT_EQ(preempts, 3);
  EXPECT_EQ(swap_ins, 1);
  EXPECT_EQ(allocs, 3);
  EXPECT_EQ(j["otherData"]["dropped_events"], 0);
}

TEST(TraceRing, FullRingDropsOldestAndCountsThem) {
  TraceRing ring(8);
  for (uint64_t i = 0; i < 20; ++i) {
    StepObservation s;
    s.step = i;
    s.start_ns = i * 1000;
    ring.record(s);  // one event per step
  }
  const auto ev = ring.events();
  ASSERT_EQ(ev.size(), 8u);
  EXPECT_EQ(ev.front().ts_us, 12u);  // steps 12..19 remain
  EXPECT_EQ(ev.back().ts_us, 19u);
  EXPECT_EQ(ring.num_dropped(), 12u);
  const auto j = nlohmann::json::parse(ring.to_json());
  EXPECT_EQ(j["traceEvents"].size(), 8u);
  EXPECT_EQ(j["otherData"]["dropped_events"], 12);
}

}  // namespace
}  // namespace kvw::obs
