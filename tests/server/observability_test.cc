// `kvwarden serve` with observability wired as serve wires it (server/observability.h): after
// real requests, /metrics shows the server's request timings and refusals next to the engine's
// gauges, /debug/kv shows the block map, /dashboard is HTML.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>

#include "harness.h"

namespace kvw::server {
namespace {

using harness::Harness;
using nlohmann::json;

// The value of the first sample line that starts with `series` (name + labels), or -1.
double sample(const std::string& text, const std::string& series) {
  size_t at = 0;
  while ((at = text.find(series, at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') {
      const size_t sp = text.find(' ', at + series.size());
      if (sp == at + series.size()) return std::stod(text.substr(sp + 1));
    }
    at += series.size();
  }
  return -1;
}

struct Wired {
  std::unique_ptr<obs::ObservabilityContext> ctx;  // outlives the harness (declared first)
  std::unique_ptr<ObsBridge> bridge;
  std::unique_ptr<Harness> h;

  Wired() {
    h = std::make_unique<Harness>(
        ServerConfig{}, harness::small_model(), 4, OverflowPolicy::kError, [this](Harness& hh) {
          ctx = std::make_unique<obs::ObservabilityContext>(
              make_obs_config(hh.ecfg, hh.engine->budget(), {.model_name = "tiny"}));
          hh.relay.connect(ctx->step_observer());
          bridge = std::make_unique<ObsBridge>(*ctx);
          wire_observability(*hh.server, *hh.engine, *ctx, *bridge, json{{"test", true}});
        });
  }
};

TEST(ServerObservability, MetricsShowRequestsTimingsRefusalsAndEngineState) {
  Wired w;
  Harness& h = *w.h;
  for (int i = 0; i < 2; ++i) {
    h.post_ok("/v1/completions",
              {{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"ignore_eos", true}});
  }
  // One streamed request: its tokens are timed as they are read.
  auto s = h.post("/v1/completions",
                  {{"prompt", "Hello"}, {"max_tokens", 4}, {"ignore_eos", true}, {"stream", true}});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->status, 200);
  auto bad = h.post("/v1/completions", {{"prompt", "x"}, {"max_tokens", "many"}});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);

  auto m = h.client->Get("/metrics");
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200);
  const std::string& t = m->body;
  EXPECT_EQ(sample(t, R"(kvwarden_requests_finished_total{reason="length"})"), 3) << t;
  EXPECT_EQ(sample(t, R"(vllm:time_to_first_token_seconds_count{model_name="tiny"})"), 3);
  EXPECT_EQ(sample(t, "kvwarden_time_to_first_token_seconds_count"), 3);
  // 3 requests x 3 gaps between their 4 tokens.
  EXPECT_EQ(sample(t, "kvwarden_inter_token_latency_seconds_count"), 9);
  EXPECT_GE(sample(t, R"(vllm:num_requests_running{model_name="tiny"})"), 0) << t;
  EXPECT_EQ(sample(t, R"(kvwarden_requests_shed_total{reason="invalid_request"})"), 1) << t;
  // Queue time is not observed by the server (it cannot see scheduling).
  EXPECT_EQ(sample(t, "kvwarden_queue_time_seconds_count"), 0);
  EXPECT_NE(t.find("num_gpu_blocks=\"" + std::to_string(h.engine->budget().num_blocks) + "\""),
            std::string::npos);
  // The weights' share on 2 MiB pages, as the model reads it (khugepaged may collapse pages
  // between two readings, so the scrape lies between a reading before and one after).
  const Model& model = h.engine->model();
  const std::optional<uint64_t> before = model.weights_huge_page_bytes();
  const double huge = sample(h.client->Get("/metrics")->body, "kvwarden_weights_huge_page_bytes");
  const std::optional<uint64_t> after = model.weights_huge_page_bytes();
  ASSERT_TRUE(before && after) << "/proc/self/smaps unreadable";
  EXPECT_GE(huge, double(std::min(*before, *after)));
  EXPECT_LE(huge, double(std::max(*before, *after)));
  EXPECT_LE(huge, double(model.weights_memory_bytes()));
  EXPECT_EQ(std::fmod(huge, double(2 << 20)), 0);
}

// The grammar cache (--grammar-cache): nothing before the first grammar (the trie is not built
// for a scrape), then one miss that keeps the grammar and one hit that reads it.
TEST(ServerObservability, GrammarCacheLookupsAndBytesShowInMetrics) {
  Wired w;
  Harness& h = *w.h;
  auto before = h.client->Get("/metrics");
  ASSERT_TRUE(before);
  EXPECT_EQ(sample(before->body, R"(kvwarden_grammar_cache_lookups_total{result="miss"})"), 0);
  EXPECT_EQ(sample(before->body, R"(kvwarden_grammar_cache_bytes{state="used"})"), 0);
  EXPECT_EQ(sample(before->body, R"(kvwarden_grammar_cache_bytes{state="capacity"})"),
            double(ServerConfig{}.grammar_cache_bytes));
  const json body = {{"messages", json::array({{{"role", "user"}, {"content", "JSON please"}}})},
                     {"max_tokens", 4},
                     {"response_format", {{"type", "json_object"}}}};
  for (int i = 0; i < 2; ++i) h.post_ok("/v1/chat/completions", body);
  auto m = h.client->Get("/metrics");
  ASSERT_TRUE(m);
  const std::string& t = m->body;
  EXPECT_EQ(sample(t, R"(kvwarden_grammar_cache_lookups_total{result="miss"})"), 1) << t;
  EXPECT_EQ(sample(t, R"(kvwarden_grammar_cache_lookups_total{result="hit"})"), 1) << t;
  EXPECT_EQ(sample(t, "kvwarden_grammar_cache_entries"), 1);
  const double used = sample(t, R"(kvwarden_grammar_cache_bytes{state="used"})");
  EXPECT_GT(used, 0);
  EXPECT_LE(used, double(ServerConfig{}.grammar_cache_bytes));
}

TEST(ServerObservability, DebugKvDashboardAndTrace) {
  Wired w;
  Harness& h = *w.h;
  h.post_ok("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 2}});
  auto kv = h.client->Get("/debug/kv");
  ASSERT_TRUE(kv);
  ASSERT_EQ(kv->status, 200);
  json j = json::parse(kv->body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << kv->body.substr(0, 200);
  EXPECT_EQ(j["num_blocks"], h.engine->budget().num_blocks);
  auto dash = h.client->Get("/dashboard");
  ASSERT_TRUE(dash);
  EXPECT_EQ(dash->status, 200);
  EXPECT_NE(dash->get_header_value("Content-Type").find("text/html"), std::string::npos);
  EXPECT_NE(dash->body.find("<html"), std::string::npos);
  for (const char* path : {"/debug/stats", "/debug/trace"}) {
    auto r = h.client->Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 200) << path;
    EXPECT_TRUE(json::parse(r->body, nullptr, false).is_object()) << path;
  }
}

}  // namespace
}  // namespace kvw::server
