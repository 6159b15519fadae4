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

}  // namespace
}  // namespace kvw::obs
