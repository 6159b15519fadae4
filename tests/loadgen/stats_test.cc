// Summary maths against hand-computed cases (numpy conventions, vLLM field names).
#include "loadgen/stats.h"

#include <gtest/gtest.h>

#include "loadgen/report.h"

namespace kvw::loadgen {
namespace {

RequestResult ok_result(double ttft, double e2el, int out_tokens, std::vector<double> itl = {}) {
  RequestResult r;
  r.status = 200;
  r.streamed = true;
  r.ttft_ms = ttft;
  r.e2el_ms = e2el;
  r.output_tokens = out_tokens;
  r.input_tokens = 10;
  r.itl_ms = std::move(itl);
  return r;
}

TEST(Stats, PercentileInterpolatesLikeNumpy) {
  const std::vector<double> v = {4, 1, 3, 2};  // sorted 1 2 3 4
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 99), 3.97);  // pos 2.97
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4.0);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 3.7);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7.0);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0.0);
}

TEST(Stats, MeanAndPopulationStd) {
  const std::vector<double> v = {2, 4, 4, 4, 5, 5, 7, 9};
  EXPECT_DOUBLE_EQ(mean_of(v), 5.0);
  EXPECT_DOUBLE_EQ(std_of(v), 2.0);
  EXPECT_DOUBLE_EQ(std_of({}), 0.0);
}

TEST(Stats, PercentileNamesMatchVllm) {
  EXPECT_EQ(percentile_name(99), "99");
  EXPECT_EQ(percentile_name(99.9), "99.9");
  EXPECT_EQ(percentile_name(50), "50");
}

TEST(Stats, TpotExcludesTheFirstToken) {
  auto r = ok_result(100, 500, 5);
  EXPECT_DOUBLE_EQ(r.tpot_ms(), 100.0);  // (500 - 100) / 4
  EXPECT_DOUBLE_EQ(ok_result(100, 100, 1).tpot_ms(), 0.0);
}

TEST(Stats, SummaryCountsThroughputErrorsAndPercentiles) {
  std::vector<RequestResult> rs = {
      ok_result(100, 500, 5, {100, 100, 100, 100}),
      ok_result(300, 1100, 9, {100, 100, 100, 100, 100, 100, 100, 100})};
  RequestResult refused;
  refused.status = 429;
  refused.error = "http 429";
  RequestResult broken;
  broken.status = 500;
  broken.error = "http 500";
  RequestResult reset;
  reset.error = "reset: closed";
  RequestResult warm = ok_result(5000, 9000, 100);
  warm.warmup = true;
  rs.insert(rs.end(), {refused, broken, reset, warm});
  SummaryOptions opt;
  opt.percentiles = {50, 99};
  auto j = summarize(rs, 2.0, opt);
  EXPECT_EQ(j["completed"], 2);
  EXPECT_EQ(j["failed"], 3);
  EXPECT_EQ(j["num_requests"], 5);  // the warm-up request is not counted
  EXPECT_EQ(j["total_output_tokens"], 14);
  EXPECT_EQ(j["total_input_tokens"], 20);
  EXPECT_DOUBLE_EQ(j["request_throughput"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["output_throughput"].get<double>(), 7.0);
  EXPECT_DOUBLE_EQ(j["total_token_throughput"].get<double>(), 17.0);
  EXPECT_DOUBLE_EQ(j["mean_ttft_ms"].get<double>(), 200.0);
  EXPECT_DOUBLE_EQ(j["median_ttft_ms"].get<double>(), 200.0);
  EXPECT_DOUBLE_EQ(j["std_ttft_ms"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(j["p99_ttft_ms"].get<double>(), 298.0);
  EXPECT_DOUBLE_EQ(j["mean_tpot_ms"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(j["mean_itl_ms"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(j["p50_e2el_ms"].get<double>(), 800.0);
  EXPECT_EQ(j["errors_by_status"]["429"], 1);
  EXPECT_EQ(j["errors_by_status"]["500"], 1);
  EXPECT_EQ(j["errors_by_status"]["reset"], 1);
  EXPECT_EQ(j["refused"], 1);
  EXPECT_EQ(j["errors_5xx"], 1);
  EXPECT_DOUBLE_EQ(j["completed_or_refused_ratio"].get<double>(), 3.0 / 5.0);
  EXPECT_FALSE(j.contains("request_goodput"));
}

TEST(Stats, PercentileMetricsChooseWhichMetricsGetPercentiles) {
  const std::vector<RequestResult> rs = {ok_result(100, 500, 5, {100, 100, 100, 100})};
  SummaryOptions opt;
  opt.percentiles = {25, 99.9};
  opt.percentile_metrics = {"ttft", "itl"};  // vLLM's --percentile-metrics ttft,itl
  auto j = summarize(rs, 1.0, opt);
  EXPECT_TRUE(j.contains("p25_ttft_ms"));
  EXPECT_TRUE(j.contains("p99.9_itl_ms"));
  EXPECT_FALSE(j.contains("p25_tpot_ms"));
  EXPECT_FALSE(j.contains("p99.9_e2el_ms"));
  EXPECT_TRUE(j.contains("mean_e2el_ms"));  // mean, median, std for every metric
  EXPECT_TRUE(j.contains("median_tpot_ms"));
}

TEST(Stats, GoodputCountsRequestsMeetingEverySlo) {
  std::vector<RequestResult> rs = {ok_result(100, 500, 5),    // tpot 100
                                   ok_result(600, 700, 2),    // ttft too slow
                                   ok_result(100, 2100, 11),  // tpot 200: too slow
                                   ok_result(50, 300, 6)};    // tpot 50
  auto slos = parse_slos({"ttft:500", "tpot:150"});
  ASSERT_TRUE(slos.ok());
  SummaryOptions opt;
  opt.slos = slos.value();
  auto j = summarize(rs, 4.0, opt);
  EXPECT_DOUBLE_EQ(j["request_goodput"].get<double>(), 0.5);  // 2 good in 4 s
  auto e2el = parse_slos({"e2el:400"});
  opt.slos = e2el.value();
  EXPECT_DOUBLE_EQ(summarize(rs, 1.0, opt)["request_goodput"].get<double>(), 1.0);
  EXPECT_FALSE(parse_slos({"ttft"}).ok());
  EXPECT_FALSE(parse_slos({"latency:5"}).ok());
  EXPECT_FALSE(parse_slos({"ttft:abc"}).ok());
}

TEST(Stats, RssGrowthIsTheLeastSquaresSlopePerMinute) {
  std::vector<ServerSnapshot> s;
  for (int i = 0; i <= 120; ++i) {
    ServerSnapshot x;
    x.t_s = i;
    // 2 MB per minute plus a sawtooth that averages out; the first 10 s are warm-up noise.
    x.resident_memory_bytes = 100e6 + 2e6 * i / 60.0 + (i % 2 ? 1e5 : -1e5) + (i < 10 ? 50e6 : 0);
    s.push_back(x);
  }
  EXPECT_NEAR(rss_growth_mb_per_min(s, 10), 2.0, 0.05);
  EXPECT_TRUE(std::isnan(rss_growth_mb_per_min({}, 0)));
}

}  // namespace
}  // namespace kvw::loadgen
