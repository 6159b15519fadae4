// /debug/kv, /debug/stats and the routes, served by a real httplib server on loopback.
#include "obs/debug_json.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "obs/obs_context.h"
#include "obs/routes.h"
#include "test_util.h"

namespace kvw::obs {
namespace {

TEST(DebugKv, ColumnsDescribeEveryBlock) {
  const KvSnapshot kv = test::make_snapshot(100'000);
  const planner::BudgetTable b = test::make_budget(100'000);
  const std::string body = kv_json(&kv, &b);
  EXPECT_LT(body.size(), 4u << 20);  // compact: ~6 short numbers per block
  const auto j = nlohmann::json::parse(body);
  EXPECT_EQ(j["num_blocks"], 100'000);
  for (const char* col : {"state", "owner", "ref_count", "num_tokens", "alloc_step",
                          "last_access_step", "block_hash"})
    ASSERT_EQ(j[col].size(), 100'000u) << col;
  EXPECT_EQ(j["state"][0], 0);  // free
  EXPECT_EQ(j["state"][5], 1);  // cached
  EXPECT_EQ(j["state"][7], 2);  // used
  EXPECT_EQ(j["owner"][7], 2);  // request 7 / 7 + 1
  EXPECT_EQ(j["owner"][0], -1);
  EXPECT_EQ(j["stats"]["num_free_blocks"], kv.stats.num_free_blocks);
  EXPECT_DOUBLE_EQ(j["stats"]["block_usage"].get<double>(), kv.stats.block_usage());
  EXPECT_EQ(j["budget"]["kv_pool_bytes"], b.kv_pool_bytes);
}

TEST(DebugKv, BlockHashColumnIsExactOrNull) {
  KvSnapshot kv = test::make_snapshot(3);
  kv.blocks[1].block_hash = 0xffffffffffffffffull;  // beyond a double's 53 bits: printed exactly
  const auto j = nlohmann::json::parse(kv_json(&kv, nullptr));
  ASSERT_EQ(j["block_hash"].size(), 3u);
  EXPECT_TRUE(j["block_hash"][0].is_null());
  EXPECT_EQ(j["block_hash"][1].get<uint64_t>(), 0xffffffffffffffffull);
  EXPECT_TRUE(j["block_hash"][2].is_null());
}

TEST(DebugKv, NoSnapshotIsAnEmptyMap) {
  const auto j = nlohmann::json::parse(kv_json(nullptr, nullptr));
  EXPECT_EQ(j["num_blocks"], 0);
  EXPECT_TRUE(j["state"].empty());
  EXPECT_FALSE(j.contains("budget"));
}

class RoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    snapshot_ = std::make_shared<KvSnapshot>(test::make_snapshot(2000));
    ctx_.attach({.stats = [] { return test::make_stats(); },
                 .kv_snapshot = [this] { return snapshot_; },
                 .budget = [] { return test::make_budget(2000); }});
    StepObservation s;
    s.start_ns = 5000;
    s.duration_ns = 1000;
    s.preempted_swap = {3};
    ctx_.step_observer()(s);
    test::serve_routes(server_, ctx_);
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  void TearDown() override {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }
  httplib::Result get(const std::string& path) {
    httplib::Client c("127.0.0.1", port_);
    return c.Get(path.c_str());
  }

  ObservabilityContext ctx_{ObsConfig{}};
  std::shared_ptr<const KvSnapshot> snapshot_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

TEST_F(RoutesTest, ServesEveryEndpointWithItsContentType) {
  auto m = get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_EQ(m->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(m->body.find("kvwarden_kv_blocks{state=\"total\"} 300"), std::string::npos);
  EXPECT_NE(m->body.find("kvwarden_memory_budget_bytes{component=\"kv_pool\"}"), std::string::npos);

  auto d = get("/dashboard");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->status, 200);
  EXPECT_NE(d->body.find("<canvas id=\"heat\""), std::string::npos);
  EXPECT_EQ(d->body.find("http://"), std::string::npos);  // no external assets
  EXPECT_EQ(d->body.find("https://"), std::string::npos);

  auto kv = get("/debug/kv");
  ASSERT_TRUE(kv);
  EXPECT_EQ(nlohmann::json::parse(kv->body)["num_blocks"], 2000);

  auto st = get("/debug/stats");
  ASSERT_TRUE(st);
  const auto j = nlohmann::json::parse(st->body);
  EXPECT_EQ(j["requests"]["waiting"], 11);
  EXPECT_EQ(j["preemptions"]["total"], 9);
  EXPECT_EQ(j["budget"]["num_blocks"], 2000);
  EXPECT_EQ(j["breaker"], "ok");

  auto snap = get("/debug/memory_snapshot");
  ASSERT_TRUE(snap);
  ASSERT_GT(snap->body.size(), 2u);
  EXPECT_EQ(snap->body.substr(0, 2), std::string("\x80\x02", 2));  // pickle protocol 2
  EXPECT_EQ(snap->body.back(), '.');

  auto tr = get("/debug/trace");
  ASSERT_TRUE(tr);
  const auto t = nlohmann::json::parse(tr->body);
  ASSERT_EQ(t["traceEvents"].size(), 2u);  // the step and its preemption
  EXPECT_EQ(t["traceEvents"][1]["name"], "preempt_swap");
}

TEST_F(RoutesTest, DiagnosticsBodyHasTheDumpSections) {
  const nlohmann::json j = ctx_.diagnostics_body();
  for (const char* k : {"stats", "budget", "queue", "block_map", "recent_trace", "config"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["block_map"]["top_owners"].size(), 16u);
  EXPECT_EQ(j["recent_trace"].size(), 2u);
}

}  // namespace
}  // namespace kvw::obs
