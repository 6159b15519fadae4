// DiagnosticsWriter: each trigger fires on its condition, files are rate limited per trigger,
// all with an injected clock.
#include "obs/diagnostics.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace kvw::obs {
namespace {

struct Fixture {
  double now = 1000.0;
  std::string dir = test::temp_dir("diag");
  DiagnosticsWriter w{DiagnosticsConfig{.dir = dir,
                                        .preemption_storm_count = 5,
                                        .window_s = 10,
                                        .kv_usage_threshold = 0.98,
                                        .min_interval_s = 60},
                      [this] { return now; }};
  std::vector<std::string> check(double usage = 0.5) {
    return w.check(usage, [] { return nlohmann::json{{"budget", {{"total_bytes", 1}}}}; });
  }
};

TEST(Diagnostics, PreemptionStormNeedsMoreThanNWithinTheWindow) {
  Fixture f;
  f.w.record_preemptions(3);
  f.now += 20;  // the first 3 leave the window
  f.w.record_preemptions(5);
  EXPECT_TRUE(f.check().empty());  // 5 is not > 5
  f.w.record_preemptions(1);
  const auto paths = f.check();
  ASSERT_EQ(paths.size(), 1u);
  EXPECT_NE(paths[0].find("preemption_storm"), std::string::npos);
  const auto j = nlohmann::json::parse(test::read_file(paths[0]));
  EXPECT_EQ(j["trigger"], "preemption_storm");
  EXPECT_EQ(j["reason"], "6 preemptions in 10 s");
  EXPECT_EQ(j["budget"]["total_bytes"], 1);
}

TEST(Diagnostics, EachTriggerIsRateLimitedIndependently) {
  Fixture f;
  EXPECT_EQ(f.check(0.99).size(), 1u);  // kv_usage_high
  f.now += 30;
  EXPECT_TRUE(f.check(0.99).empty());  // within 60 s of the last kv_usage_high file
  f.w.record_shed();
  auto p = f.check(0.99);  // shedding is a different trigger: written
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("shedding"), std::string::npos);
  f.now += 31;  // 61 s after the first file
  p = f.check(0.99);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("kv_usage_high"), std::string::npos);
  size_t files = 0;
  for (auto& e : std::filesystem::directory_iterator(f.dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 3u);
}

TEST(Diagnostics, EventsAreConsumedByTheCheckThatSawThem) {
  Fixture f;
  f.w.record_numerics_events(2);
  EXPECT_EQ(f.w.firing(0.1), std::vector<DiagTrigger>{DiagTrigger::kNumerics});
  EXPECT_EQ(f.check().size(), 1u);
  f.now += 100;
  EXPECT_TRUE(f.check().empty());  // no new NaN since
  EXPECT_TRUE(f.w.firing(0.1).empty());
}

TEST(Diagnostics, NoDirectoryMeansNoFiles) {
  double now = 0;
  DiagnosticsWriter w({}, [&] { return now; });
  w.record_shed();
  EXPECT_TRUE(w.check(1.0, nullptr).empty());
}

// Issue 30: a storm of faults stops at the file cap, and the byte cap skips what would pass it.
TEST(Diagnostics, FilesAndBytesAreCappedPerProcess) {
  double now = 0;
  const std::string dir = test::temp_dir("diag_cap");
  DiagnosticsWriter w(DiagnosticsConfig{.dir = dir, .min_interval_s = 1, .max_files = 3},
                      [&] { return now; });
  for (int i = 0; i < 10; ++i, now += 2) {
    w.record_shed();
    w.check(0.1, [] { return nlohmann::json{{"x", 1}}; });
  }
  EXPECT_EQ(w.num_files_written(), 3u);
  EXPECT_EQ(w.num_skipped(), 7u);
  size_t files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 3u);

  const std::string dir2 = test::temp_dir("diag_bytes");
  DiagnosticsWriter b(DiagnosticsConfig{.dir = dir2, .min_interval_s = 0, .max_bytes = 1000},
                      [&] { return now; });
  const auto big = [] { return nlohmann::json{{"pad", std::string(400, 'x')}}; };
  for (int i = 0; i < 5; ++i) {
    b.record_shed();
    b.check(0.1, big);
  }
  EXPECT_EQ(b.num_files_written(), 2u);  // a third ~450-byte file would pass 1000 bytes
  EXPECT_LE(b.num_bytes_written(), 1000u);
  EXPECT_EQ(b.num_skipped(), 3u);
}

}  // namespace
}  // namespace kvw::obs
