// Metrics primitives and ServingMetrics, checked through the rendered Prometheus text.
#include "obs/metrics.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <ctime>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "core/thread_name.h"
#include "obs/serving_metrics.h"
#include "prom_text.h"
#include "test_util.h"

namespace kvw::obs {
namespace {

using test::parse_prometheus_text;

const test::Sample* find_sample(const test::Parsed& p, const std::string& family,
                                const std::string& name,
                                const std::map<std::string, std::string>& labels) {
  auto it = p.families.find(family);
  if (it == p.families.end()) return nullptr;
  for (const auto& s : it->second.samples) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : labels)
      if (!s.labels.count(k) || s.labels.at(k) != v) match = false;
    if (match) return &s;
  }
  return nullptr;
}

double value_of(const test::Parsed& p, const std::string& name,
                const std::map<std::string, std::string>& labels = {}) {
  const test::Sample* s = find_sample(p, name, name, labels);
  return s ? s->value : NAN;
}

TEST(Histogram, RenderedBucketsAreCumulativeAndInfEqualsCount) {
  Registry r;
  auto& h = r.histogram("t_seconds", "test", {0.1, 0.5, 1.0}, {"k"});
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> d(0, 2);
  double sum = 0;
  for (int i = 0; i < 1000; ++i) {
    const double v = d(rng);
    h.with({"a"}).observe(v);
    sum += v;
  }
  h.with({"b"}).observe(0.5);  // exactly on a bound: counts in le="0.5"
  const test::Parsed p = parse_prometheus_text(r.render());
  ASSERT_TRUE(p.errors.empty()) << p.errors[0];
  EXPECT_TRUE(test::check_histograms(p).empty());
  const test::Sample* inf =
      find_sample(p, "t_seconds", "t_seconds_bucket", {{"k", "a"}, {"le", "+Inf"}});
  ASSERT_NE(inf, nullptr);
  EXPECT_EQ(inf->value, 1000);
  EXPECT_NEAR(find_sample(p, "t_seconds", "t_seconds_sum", {{"k", "a"}})->value, sum, 1e-6);
  EXPECT_EQ(find_sample(p, "t_seconds", "t_seconds_bucket", {{"k", "b"}, {"le", "0.1"}})->value, 0);
  EXPECT_EQ(find_sample(p, "t_seconds", "t_seconds_bucket", {{"k", "b"}, {"le", "0.5"}})->value, 1);
}

TEST(Histogram, InvariantCheckerRejectsBrokenText) {
  // The checker the other tests rely on must catch each violation.
  const std::string head = "# HELP h x\n# TYPE h histogram\n";
  auto problems = [&](const std::string& body) {
    return test::check_histograms(parse_prometheus_text(head + body)).size();
  };
  EXPECT_EQ(problems("h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n"), 0u);
  EXPECT_GT(problems("h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 3\n"), 0u);
  EXPECT_GT(problems("h_bucket{le=\"1\"} 3\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n"), 0u);
  EXPECT_GT(problems("h_bucket{le=\"1\"} 1\nh_sum 3\nh_count 1\n"), 0u);
  EXPECT_GT(problems("h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n"), 0u);
  EXPECT_FALSE(parse_prometheus_text("x 1\n").errors.empty());  // sample without TYPE
}

TEST(Histogram, ConcurrentObserversLoseNothing) {
  Histogram h({1, 2, 3});
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) h.observe(i % 5);
    });
  for (auto& t : ts) t.join();
  const auto s = h.snapshot();
  EXPECT_EQ(s.count, 40000u);
  EXPECT_EQ(s.cumulative[0], 16000u);  // values 0 and 1
  EXPECT_DOUBLE_EQ(s.sum, 4 * 2000 * (0 + 1 + 2 + 3 + 4));
}

TEST(Histogram, QuantileInterpolatesInsideTheBucket) {
  Histogram h({1, 2, 4});
  for (int i = 0; i < 10; ++i) h.observe(1.5);  // all in (1, 2]
  EXPECT_DOUBLE_EQ(histogram_quantile(0.5, h.snapshot()), 1.5);
  EXPECT_DOUBLE_EQ(histogram_quantile(1.0, h.snapshot()), 2.0);
  EXPECT_TRUE(std::isnan(histogram_quantile(0.5, Histogram({1}).snapshot())));
}

TEST(Counter, SetTotalNeverMovesBackwards) {
  Counter c;
  c.set_total(10);
  c.set_total(4);
  EXPECT_EQ(c.value(), 10);
  c.inc(2);
  EXPECT_EQ(c.value(), 12);
}

TEST(PrometheusText, LabelValuesAndHelpAreEscaped) {
  Registry r;
  r.gauge("g", "help with \\ and\nnewline", {"v"}).with({"a\"b\\c\nd"}).set(1.5);
  const std::string text = r.render();
  EXPECT_NE(text.find("# HELP g help with \\\\ and\\nnewline\n"), std::string::npos) << text;
  EXPECT_NE(text.find("g{v=\"a\\\"b\\\\c\\nd\"} 1.5\n"), std::string::npos) << text;
  const test::Parsed p = parse_prometheus_text(text);
  ASSERT_TRUE(p.errors.empty()) << p.errors[0];
  EXPECT_EQ(p.families.at("g").samples.at(0).labels.at("v"), "a\"b\\c\nd");
}

TEST(PrometheusText, SpecialValuesFormat) {
  EXPECT_EQ(format_value(INFINITY), "+Inf");
  EXPECT_EQ(format_value(-INFINITY), "-Inf");
  EXPECT_EQ(format_value(NAN), "NaN");
  EXPECT_EQ(format_value(3), "3");
  EXPECT_EQ(format_value(0.25), "0.25");
  EXPECT_EQ(format_value(0.1), "0.1");
  EXPECT_EQ(std::stod(format_value(1.0 / 3)), 1.0 / 3);
}

// ServingMetrics holds atomics (not movable): tests construct it with this config and fill it.
const ServingMetricsConfig kCfg{.model_name = "tiny", .num_gpu_blocks = 300};

void fill(ServingMetrics& m) {
  m.update_engine(test::make_stats());
  m.update_budget(test::make_budget(300));
  m.update_process();
  StepObservation step;
  step.duration_ns = 3'000'000;
  step.num_seqs = 6;
  step.num_tokens = 40;
  m.observe_step(step);
  RequestTiming t;
  t.arrival_ns = 1'000'000'000;
  t.scheduled_ns = 1'100'000'000;
  t.first_token_ns = 1'250'000'000;
  t.token_ns = {1'250'000'000, 1'300'000'000, 1'360'000'000};
  t.finish_ns = 1'400'000'000;
  t.num_prompt_tokens = 12;
  t.num_generation_tokens = 3;
  t.reason = FinishReason::kLength;
  m.observe_request(t);
  m.observe_shed("queue_full");
  m.observe_shed("queue_full");
  m.set_breaker_state(BreakerState::kWarn);
}

TEST(ServingMetrics, EveryFamilyHasHelpTypeAndValidHistograms) {
  ServingMetrics m(kCfg);
  fill(m);
  const test::Parsed p = parse_prometheus_text(m.render());
  ASSERT_TRUE(p.errors.empty()) << p.errors[0];
  EXPECT_GT(p.families.size(), 40u);
  for (const auto& [name, f] : p.families) {
    EXPECT_TRUE(f.has_help) << name;
    EXPECT_TRUE(f.has_type) << name;
    EXPECT_FALSE(f.samples.empty()) << name;
    if (f.type == "counter") {
      EXPECT_TRUE(name.ends_with("_total")) << name;
    }
  }
  const auto bad = test::check_histograms(p);
  EXPECT_TRUE(bad.empty()) << bad[0];
}

TEST(ServingMetrics, ExportsEngineFiguresInBaseUnits) {
  ServingMetrics m(kCfg);
  fill(m);
  const test::Parsed p = parse_prometheus_text(m.render());
  const EngineStats s = test::make_stats();
  EXPECT_EQ(value_of(p, "kvwarden_kv_blocks", {{"state", "total"}}), 300);
  EXPECT_EQ(value_of(p, "kvwarden_kv_blocks", {{"state", "free"}}), s.kv.num_free_blocks);
  EXPECT_DOUBLE_EQ(value_of(p, "kvwarden_kv_usage_ratio"), s.kv.block_usage());
  EXPECT_DOUBLE_EQ(value_of(p, "kvwarden_kv_fragmentation_ratio"), s.kv.fragmentation());
  EXPECT_DOUBLE_EQ(value_of(p, "kvwarden_kv_internal_waste_ratio"), s.kv.internal_waste());
  EXPECT_EQ(value_of(p, "kvwarden_kv_alloc_failures_total"), 3);
  EXPECT_EQ(value_of(p, "kvwarden_kv_alloc_retries_total"), 8);
  EXPECT_EQ(value_of(p, "kvwarden_preemptions_total", {{"mode", "swap"}}), 4);
  EXPECT_EQ(value_of(p, "kvwarden_preemptions_total", {{"mode", "recompute"}}), 5);
  EXPECT_EQ(value_of(p, "kvwarden_forward_tokens_total"), 9000);
  EXPECT_EQ(value_of(p, "kvwarden_forward_tokens_finished_total", {{"reason", "length"}}), 6000);
  EXPECT_EQ(value_of(p, "kvwarden_forward_tokens_finished_total", {{"reason", "cancelled"}}), 1500);
  EXPECT_EQ(value_of(p, "kvwarden_forward_tokens_finished_total", {{"reason", "stop"}}), 0);
  EXPECT_EQ(value_of(p, "kvwarden_recomputed_tokens_total"), 700);
  EXPECT_EQ(value_of(p, "kvwarden_swap_bytes_total", {{"direction", "out"}}), 1 << 20);
  EXPECT_EQ(value_of(p, "kvwarden_prefix_cache_hits_total"), 250);
  EXPECT_EQ(value_of(p, "kvwarden_prefix_cache_evictions_total"), 17);
  EXPECT_DOUBLE_EQ(value_of(p, "kvwarden_engine_step_seconds_total", {{"phase", "schedule"}}),
                   0.25);
  EXPECT_DOUBLE_EQ(value_of(p, "kvwarden_engine_step_seconds_total", {{"phase", "forward"}}), 7.5);
  EXPECT_DOUBLE_EQ(value_of(p, "kvwarden_engine_step_seconds_total", {{"phase", "sample"}}), 1.25);
  EXPECT_EQ(value_of(p, "kvwarden_requests", {{"state", "waiting"}}), 11);
  EXPECT_EQ(value_of(p, "kvwarden_requests_shed_total", {{"reason", "queue_full"}}), 2);
  EXPECT_EQ(value_of(p, "kvwarden_breaker_state"), 1);
  EXPECT_EQ(value_of(p, "kvwarden_breaker_state_info", {{"state", "warn"}}), 1);
  EXPECT_EQ(value_of(p, "kvwarden_breaker_state_info", {{"state", "ok"}}), 0);
  EXPECT_EQ(value_of(p, "kvwarden_numerics_events_total"), 2);
  EXPECT_EQ(value_of(p, "kvwarden_memory_budget_bytes", {{"component", "weights"}}), 300 << 20);
  EXPECT_GT(value_of(p, "kvwarden_process_resident_memory_bytes"), 1 << 20);
  EXPECT_EQ(value_of(p, "kvwarden_requests_finished_total", {{"reason", "length"}}), 1);
  EXPECT_EQ(value_of(p, "kvwarden_prompt_tokens_total"), 12);
  EXPECT_EQ(value_of(p, "kvwarden_generation_tokens_total"), 4321);
  // vLLM names carry the same numbers and a model_name label.
  EXPECT_DOUBLE_EQ(value_of(p, "vllm:kv_cache_usage_perc", {{"model_name", "tiny"}}),
                   s.kv.block_usage());
  EXPECT_DOUBLE_EQ(value_of(p, "vllm:gpu_cache_usage_perc"), s.kv.block_usage());
  EXPECT_EQ(value_of(p, "vllm:num_requests_running"), 6);
  EXPECT_EQ(value_of(p, "vllm:num_requests_swapped"), 2);
  EXPECT_EQ(value_of(p, "vllm:num_preemptions_total"), 9);
  EXPECT_EQ(value_of(p, "vllm:prefix_cache_queries_total"), 1000);
  EXPECT_EQ(value_of(p, "vllm:spec_decode_num_drafts_total"), 40);
  EXPECT_EQ(value_of(p, "vllm:spec_decode_num_draft_tokens_total"), 130);
  EXPECT_EQ(value_of(p, "vllm:spec_decode_num_accepted_tokens_total"), 70);
  EXPECT_EQ(value_of(p, "vllm:spec_decode_num_accepted_tokens_per_pos_total", {{"position", "0"}}),
            38);
  EXPECT_EQ(value_of(p, "vllm:spec_decode_num_accepted_tokens_per_pos_total", {{"position", "1"}}),
            32);
  EXPECT_EQ(value_of(p, "vllm:request_success_total", {{"finished_reason", "length"}}), 1);
  EXPECT_EQ(
      value_of(p, "vllm:cache_config_info", {{"num_gpu_blocks", "300"}, {"block_size", "16"}}), 1);
}

TEST(ServingMetrics, ExportsProcessCpuAndCpuByThreadRole) {
  // A live thread named like ours ("<role>-<index>") burns 0.15 s of CPU; its role's counter and
  // the process counter must show it (how CPU per refusal is told apart from the forward's).
  ServingMetrics m(kCfg);
  std::atomic<bool> stop{false}, burned{false};
  std::thread live([&] {
    set_thread_name("kvw-burn-1");
    // Burn 150 ms of this thread's own CPU time, however loaded the machine is.
    volatile uint64_t x = 0;
    timespec t{};
    do {
      for (int i = 0; i < 100000; ++i) x = x + 1;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    } while (t.tv_sec == 0 && t.tv_nsec < 150'000'000);
    burned = true;
    while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (!burned.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  m.update_process();
  stop = true;
  live.join();
  const test::Parsed p = parse_prometheus_text(m.render());
  ASSERT_TRUE(p.errors.empty()) << p.errors[0];
  const double role = value_of(p, "kvwarden_thread_cpu_seconds_total", {{"thread", "kvw-burn"}});
  EXPECT_GT(role, 0.1);
  EXPECT_LT(role, 2.0);
  EXPECT_GE(value_of(p, "kvwarden_process_cpu_seconds_total"), role);
}

TEST(ServingMetrics, ExportsKvEventsPublisherCounters) {
  ServingMetrics m(kCfg);
  m.update_kv_events({.num_events_published = 40,
                      .num_batches_published = 12,
                      .num_events_dropped = 7,
                      .num_batches_dropped = 2,
                      .num_events_queued = 3});
  const test::Parsed p = parse_prometheus_text(m.render());
  EXPECT_EQ(value_of(p, "kvwarden_kv_events_published_total"), 40);
  EXPECT_EQ(value_of(p, "kvwarden_kv_event_batches_published_total"), 12);
  EXPECT_EQ(value_of(p, "kvwarden_kv_events_dropped_total"), 7);
  EXPECT_EQ(value_of(p, "kvwarden_kv_event_batches_dropped_total"), 2);
  EXPECT_EQ(value_of(p, "kvwarden_kv_events_queued"), 3);
}

// Issue 29: the weights' bytes on 2 MiB pages; unknown (smaps unreadable) is NaN, never a 0
// that would read as "THP refused".
TEST(ServingMetrics, ExportsWeightsOnHugePagesAndNaNWhenUnknown) {
  const char* name = "kvwarden_weights_huge_page_bytes";
  ServingMetrics m(kCfg);
  m.update_weights_huge_pages(uint64_t{608} << 20);
  EXPECT_EQ(value_of(parse_prometheus_text(m.render()), name), 608 << 20);
  m.update_weights_huge_pages(std::nullopt);
  const test::Parsed p = parse_prometheus_text(m.render());
  const test::Sample* s = find_sample(p, name, name, {});
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(std::isnan(s->value)) << s->value;
}

TEST(ServingMetrics, RequestTimingFeedsLatencyHistograms) {
  ServingMetrics m(kCfg);
  fill(m);
  const test::Parsed p = parse_prometheus_text(m.render());
  auto count = [&](const std::string& fam) {
    const test::Sample* s = find_sample(p, fam, fam + "_count", {});
    return s ? s->value : NAN;
  };
  auto sum = [&](const std::string& fam) { return find_sample(p, fam, fam + "_sum", {})->value; };
  EXPECT_EQ(count("kvwarden_time_to_first_token_seconds"), 1);
  EXPECT_NEAR(sum("kvwarden_time_to_first_token_seconds"), 0.25, 1e-9);
  EXPECT_NEAR(sum("kvwarden_queue_time_seconds"), 0.1, 1e-9);
  EXPECT_NEAR(sum("kvwarden_e2e_request_latency_seconds"), 0.4, 1e-9);
  EXPECT_EQ(count("kvwarden_inter_token_latency_seconds"), 2);  // 3 tokens, 2 gaps
  EXPECT_NEAR(sum("kvwarden_inter_token_latency_seconds"), 0.11, 1e-9);
  EXPECT_NEAR(sum("kvwarden_time_per_output_token_seconds"), 0.055, 1e-9);  // 0.11 / 2
  EXPECT_EQ(count("vllm:time_to_first_token_seconds"), 1);
  EXPECT_EQ(count("vllm:inter_token_latency_seconds"), 2);
  EXPECT_NEAR(sum("kvwarden_step_duration_seconds"), 0.003, 1e-12);
  // vLLM's TTFT boundaries.
  EXPECT_NE(find_sample(p, "vllm:time_to_first_token_seconds",
                        "vllm:time_to_first_token_seconds_bucket", {{"le", "2560"}}),
            nullptr);
}

}  // namespace
}  // namespace kvw::obs
