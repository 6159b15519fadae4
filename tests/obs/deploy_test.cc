// deploy/: the Prometheus rules pass promtool (check + unit tests), the Grafana dashboard only
// queries metrics we export, the Kubernetes manifests (llm-d example included) agree with each
// other and with the image, and the HAProxy configuration is valid.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "obs/serving_metrics.h"
#include "prom_text.h"
#include "test_util.h"

namespace kvw::obs {
namespace {

const std::string kDeploy = KVW_DEPLOY_DIR;

TEST(DeployRules, PromtoolCheckRulesAndUnitTestsPass) {
  KVW_REQUIRE_TOOL(test::have_program("/usr/bin/promtool"), "promtool");
  std::string out;
  EXPECT_EQ(
      test::run_command(
          "/usr/bin/promtool check rules " + kDeploy + "/prometheus/kvwarden-rules.yml", &out),
      0)
      << out;
  out.clear();
  EXPECT_EQ(test::run_command("cd " + kDeploy +
                                  "/prometheus && /usr/bin/promtool test rules "
                                  "kvwarden-rules.test.yml",
                              &out),
            0)
      << out;
}

// Every name the exporter emits, including histogram series suffixes.
std::set<std::string> exported_names() {
  ServingMetrics m;
  m.update_engine(test::make_stats());
  m.update_budget(test::make_budget(10));
  m.observe_shed("queue_full");
  std::set<std::string> names;
  for (const auto& [name, f] : test::parse_prometheus_text(m.render()).families) {
    names.insert(name);
    if (f.type == "histogram")
      for (const char* sfx : {"_bucket", "_sum", "_count"}) names.insert(name + sfx);
  }
  return names;
}

std::set<std::string> recorded_names() {
  const std::string rules = test::read_file(kDeploy + "/prometheus/kvwarden-rules.yml");
  std::set<std::string> out;
  const std::regex re(R"(record:\s*(\S+))");
  for (auto it = std::sregex_iterator(rules.begin(), rules.end(), re); it != std::sregex_iterator();
       ++it)
    out.insert((*it)[1]);
  return out;
}

TEST(DeployGrafana, DashboardQueriesOnlyExportedMetrics) {
  const auto dash =
      nlohmann::json::parse(test::read_file(kDeploy + "/grafana/kvwarden-dashboard.json"));
  ASSERT_TRUE(dash.contains("panels"));
  EXPECT_EQ(dash["uid"], "kvwarden");
  const std::set<std::string> exported = exported_names();
  const std::set<std::string> recorded = recorded_names();
  EXPECT_EQ(recorded.count("kvwarden:sla_e2e_p95_seconds"), 1u);
  const std::regex metric(R"((kvwarden[a-zA-Z0-9_:]*|vllm:[a-zA-Z0-9_:]+))");
  std::set<int> ids;
  size_t queried = 0;
  for (const auto& p : dash["panels"]) {
    EXPECT_TRUE(ids.insert(p["id"].get<int>()).second) << "duplicate panel id";
    ASSERT_FALSE(p["targets"].empty()) << p["title"];
    for (const auto& t : p["targets"]) {
      const std::string expr = t["expr"];
      for (auto it = std::sregex_iterator(expr.begin(), expr.end(), metric);
           it != std::sregex_iterator(); ++it) {
        const std::string name = (*it)[1];
        ++queried;
        EXPECT_TRUE(exported.count(name) || recorded.count(name))
            << name << " in panel '" << p["title"] << "' is not exported";
      }
    }
  }
  EXPECT_GT(queried, 20u);
  // And the important families are on the dashboard.
  const std::string all = dash.dump();
  for (const char* m : {"kvwarden_kv_fragmentation_ratio", "kvwarden_preemptions_total",
                        "kvwarden_time_to_first_token_seconds_bucket",
                        "kvwarden_memory_budget_bytes", "kvwarden_requests"})
    EXPECT_NE(all.find(m), std::string::npos) << m;
}

// deploy_manifests_check.py: probes, memory limit and args of both Deployments, the image
// scripts/image.sh builds, and the llm-d InferencePool, endpoint picker and KV-events wiring.
TEST(DeployKubernetes, ManifestsAgreeWithEachOtherAndTheImage) {
  const char* py = "/usr/bin/python3";
  KVW_REQUIRE_TOOL(test::have_program(py), "python3");
  KVW_REQUIRE_TOOL(test::run_command(std::string(py) + " -c 'import yaml'", nullptr) == 0,
                   "python3-yaml");
  std::string out;
  EXPECT_EQ(test::run_command(std::string(py) + " " + KVW_TEST_DIR + "/deploy_manifests_check.py " +
                                  kDeploy + "/..",
                              &out),
            0)
      << out;
}

TEST(DeployHaproxy, ConfigIsValid) {
  KVW_REQUIRE_TOOL(test::have_program("/usr/sbin/haproxy"), "haproxy");
  std::string out;
  EXPECT_EQ(test::run_command("/usr/sbin/haproxy -c -f " + kDeploy + "/haproxy/haproxy.cfg", &out),
            0)
      << out;
}

}  // namespace
}  // namespace kvw::obs
