// `promtool check metrics` on our /metrics text (the linter Prometheus ships).
#include <gtest/gtest.h>

#include <sstream>

#include "obs/serving_metrics.h"
#include "test_util.h"

namespace kvw::obs {
namespace {

// promtool lints the names and format; vllm:* names are left out because promtool flags colons
// (reserved for recording rules) by design.
TEST(ServingMetrics, PromtoolCheckMetricsPassesOnKvwardenNames) {
  KVW_REQUIRE_TOOL(test::have_program("/usr/bin/promtool"), "promtool");
  ServingMetrics m(ServingMetricsConfig{.model_name = "tiny"});
  m.update_engine(test::make_stats());
  m.update_budget(test::make_budget(300));
  m.update_process();
  RequestTiming t;
  t.arrival_ns = 1'000'000;
  t.first_token_ns = 2'000'000;
  t.finish_ns = 3'000'000;
  m.observe_request(t);
  m.observe_shed("queue_full");
  std::string text, line;
  std::istringstream in(m.render());
  while (std::getline(in, line))
    if (line.find("vllm:") == std::string::npos) text += line + "\n";
  const std::string dir = test::temp_dir("promtool");
  test::write_file(dir + "/metrics.txt", text);
  std::string out;
  const int rc =
      test::run_command("/usr/bin/promtool check metrics < " + dir + "/metrics.txt", &out);
  EXPECT_EQ(rc, 0) << out;
}

}  // namespace
}  // namespace kvw::obs
