// The epoll client and the run loop against the in-process fake server: measured TTFT/ITL
// against the fake's known delays (lower bounds exact, upper bounds generous), error statuses,
// keep-alive reuse, multi-turn history, SDK-style retries (Retry-After honoured, retries running
// out, none with max_retries 0, 4xx not retried) and `kvwarden bench` end to end with a scenario.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "fake_server.h"
#include "loadgen/bench.h"
#include "loadgen/http_client.h"
#include "loadgen/overload.h"
#include "loadgen/runner.h"
#include "loadgen/workload.h"

namespace kvw::loadgen {
namespace {

std::unique_ptr<HttpClient> client_for(const testing::FakeServer& s) {
  auto c = HttpClient::create("127.0.0.1", s.port());
  EXPECT_TRUE(c.ok()) << c.message();
  return std::move(c.value());
}

std::vector<RequestSpec> specs(int n, int max_tokens,
                               nlohmann::json extra = nlohmann::json::object()) {
  std::vector<RequestSpec> v(n);
  for (auto& s : v) {
    s.prompt = "the cat sat";
    s.input_tokens = 3;
    s.max_tokens = max_tokens;
    s.extra = extra;
  }
  return v;
}

RunConfig closed_loop(int concurrency, size_t n) {
  RunConfig c;
  c.model = "fake-model";
  c.closed_loop = true;
  c.concurrency = concurrency;
  c.num_requests = n;
  c.progress = false;
  c.scrape_interval_s = 0.1;
  return c;
}

TEST(HttpClient, FetchesAndReusesKeepAliveConnections) {
  testing::FakeServer server;
  auto client = client_for(server);
  for (int i = 0; i < 5; ++i) {
    HttpRequest req;
    req.path = "/v1/models";
    auto r = fetch(*client, req);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r->status, 200);
    EXPECT_NE(r->body.find("fake-model"), std::string::npos);
  }
  EXPECT_EQ(client->num_connections_opened(), 1u);
}

TEST(HttpClient, ConnectionRefusedIsAnErrorNotACrash) {
  int port = 0;
  {
    testing::FakeServer gone;
    port = gone.port();
  }
  auto c = HttpClient::create("127.0.0.1", port);
  ASSERT_TRUE(c.ok());
  HttpRequest req;
  req.path = "/health";
  auto r = fetch(*c.value(), req);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("connect"), std::string::npos) << r.message();
}

TEST(HttpClient, ParsesUrls) {
  auto u = parse_url("http://localhost:8080/api/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "localhost");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->path_prefix, "/api");
  EXPECT_EQ(parse_url("127.0.0.1").value().port, 80);
  EXPECT_FALSE(parse_url("https://x").ok());
  EXPECT_FALSE(parse_url("http://x:99999").ok());
}

TEST(Runner, StreamingTtftAndItlMatchTheFakesDelays) {
  testing::FakeServer server;
  auto client = client_for(server);
  auto cfg = closed_loop(4, 12);
  auto s = specs(12, 6, {{"fake_first_ms", 150}, {"fake_gap_ms", 40}});
  auto out = run_benchmark(*client, cfg, s);
  ASSERT_EQ(out.results.size(), 12u);
  for (const auto& r : out.results) {
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(r.output_tokens, 6);  // from usage
    EXPECT_EQ(r.input_tokens, 7);   // usage.prompt_tokens wins over the estimate
    EXPECT_GE(r.ttft_ms, 150.0);
    EXPECT_LT(r.ttft_ms, 150.0 + 3000.0);
    ASSERT_EQ(r.itl_ms.size(), 5u);
    // One late chunk (a busy or sanitized CI runner) lengthens one gap and shortens the next,
    // so the median gap, not every gap, must reflect the fake's 40 ms sleep.
    auto gaps = r.itl_ms;
    std::sort(gaps.begin(), gaps.end());
    EXPECT_GE(gaps[gaps.size() / 2], 35.0);
    EXPECT_GE(r.e2el_ms, 150.0 + 5 * 40.0);
    EXPECT_NEAR(r.tpot_ms(), (r.e2el_ms - r.ttft_ms) / 5, 1e-9);
  }
  EXPECT_EQ(out.peak_in_flight, 4u);
  EXPECT_LE(out.connections_opened, 6u);  // 4 streams + the scraper, reused across requests
  EXPECT_TRUE(out.metrics_available);
  EXPECT_FALSE(out.server.empty());
  EXPECT_DOUBLE_EQ(out.server.back().resident_memory_bytes, 1e8);
}

TEST(Runner, CountsChunksWithoutUsageAndSkipsRoleOnlyChatDeltas) {
  testing::FakeServer server;
  auto client = client_for(server);
  auto cfg = closed_loop(2, 4);
  cfg.endpoint = "/v1/chat/completions";
  auto out = run_benchmark(
      *client, cfg,
      specs(4, 5, {{"fake_first_ms", 60}, {"fake_gap_ms", 5}, {"fake_no_usage", true}}));
  ASSERT_EQ(out.results.size(), 4u);
  for (const auto& r : out.results) {
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(r.output_tokens, 5);
    EXPECT_GE(r.ttft_ms, 60.0);  // the role delta came at once but is not a token
    EXPECT_EQ(r.itl_ms.size(), 4u);
  }
  auto body = nlohmann::json::parse(server.last_body());
  EXPECT_EQ(body["messages"][0]["role"], "user");
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
}

TEST(Runner, NonStreamingMeasuresEndToEnd) {
  testing::FakeServer server;
  auto client = client_for(server);
  auto cfg = closed_loop(3, 6);
  cfg.stream = false;
  auto out = run_benchmark(*client, cfg, specs(6, 4, {{"fake_first_ms", 80}, {"fake_gap_ms", 10}}));
  ASSERT_EQ(out.results.size(), 6u);
  for (const auto& r : out.results) {
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(r.output_tokens, 4);
    EXPECT_LT(r.ttft_ms, 0);  // not streamed: no TTFT
    EXPECT_GE(r.e2el_ms, 80.0 + 3 * 10.0);
  }
}

TEST(Runner, ErrorStatusesAreCountedByStatus) {
  testing::FakeServer server;
  auto client = client_for(server);
  auto s = specs(9, 2, {{"fake_first_ms", 1}, {"fake_gap_ms", 1}});
  for (int i = 0; i < 3; ++i) s[i].extra["fake_status"] = 429;
  s[3].extra["fake_status"] = 503;
  s[4].extra["fake_status"] = 500;
  auto cfg = closed_loop(2, 9);
  cfg.max_retries = 0;  // the raw statuses
  auto out = run_benchmark(*client, cfg, s);
  auto j = summarize(out.results, out.measured_duration_s, SummaryOptions{});
  EXPECT_EQ(j["completed"], 4);
  EXPECT_EQ(j["errors_by_status"]["429"], 3);
  EXPECT_EQ(j["errors_by_status"]["503"], 1);
  EXPECT_EQ(j["errors_by_status"]["500"], 1);
  EXPECT_EQ(j["refused"], 4);
  EXPECT_EQ(j["errors_5xx"], 1);
}

// Distinct prompts: the fake counts refused attempts per distinct body.
std::vector<RequestSpec> distinct(std::vector<RequestSpec> v) {
  for (size_t i = 0; i < v.size(); ++i) v[i].prompt += " #" + std::to_string(i);
  return v;
}

TEST(Runner, RetriesRefusalsAfterRetryAfterMsThenCompletes) {
  testing::FakeServer server;
  auto client = client_for(server);
  auto cfg = closed_loop(4, 4);  // default max_retries: 2
  auto s = distinct(specs(4, 2,
                          {{"fake_first_ms", 1},
                           {"fake_gap_ms", 1},
                           {"fake_refuse_first", 2},
                           {"fake_refuse_status", 429},
                           {"fake_retry_after_ms", 150}}));
  auto out = run_benchmark(*client, cfg, s);
  ASSERT_EQ(out.results.size(), 4u);
  for (const auto& r : out.results) {
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(r.num_retries, 2);
    EXPECT_EQ(r.retried_statuses, (std::vector<int>{429, 429}));
    EXPECT_GE(r.retry_wait_ms, 2 * 150.0);  // both waits honoured
    EXPECT_GE(r.e2el_ms, r.retry_wait_ms);  // latency counts from the first attempt
    EXPECT_GE(r.ttft_ms, r.retry_wait_ms);
  }
  EXPECT_EQ(server.num_completions(), 12);
  EXPECT_EQ(out.peak_in_flight, 4u);  // a request waiting to retry still holds its slot
  auto j = summarize(out.results, out.measured_duration_s, SummaryOptions{});
  EXPECT_EQ(j["completed"], 4);
  EXPECT_EQ(j["retries"], 8);
  EXPECT_EQ(j["requests_retried"], 4);
  EXPECT_EQ(j["refused_after_retries"], 0);
  EXPECT_EQ(j["refused"], 0);
  EXPECT_EQ(j["retries_by_status"]["429"], 8);
  EXPECT_DOUBLE_EQ(j["completed_ratio"].get<double>(), 1.0);
  EXPECT_GE(j["mean_retry_wait_ms"].get<double>(), 300.0);
}

TEST(Runner, HonoursRetryAfterSeconds) {
  testing::FakeServer server;
  auto client = client_for(server);
  auto cfg = closed_loop(1, 1);
  auto s = specs(1, 2, {{"fake_first_ms", 1}, {"fake_refuse_first", 1}, {"fake_retry_after", 1}});
  const double t0 = monotonic_s();
  auto out = run_benchmark(*client, cfg, s);
  const double elapsed_ms = (monotonic_s() - t0) * 1e3;
  ASSERT_EQ(out.results.size(), 1u);
  const auto& r = out.results[0];
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.retried_statuses, (std::vector<int>{503}));
  EXPECT_GE(r.retry_wait_ms, 1000.0);
  EXPECT_LT(r.retry_wait_ms, 1000.0 + 2000.0);
  EXPECT_GE(elapsed_ms, 1000.0);
}

TEST(Runner, BacksOffExponentiallyWithoutRetryAfter) {
  testing::FakeServer server;
  auto client = client_for(server);
  auto cfg = closed_loop(1, 1);
  // retry-after-ms 0 is no instruction (SDK): the client's own backoff applies.
  auto s =
      specs(1, 2, {{"fake_first_ms", 1}, {"fake_refuse_first", 2}, {"fake_retry_after_ms", 0}});
  auto out = run_benchmark(*client, cfg, s);
  ASSERT_EQ(out.results.size(), 1u);
  ASSERT_TRUE(out.results[0].ok()) << out.results[0].error;
  // 0.5 s then 1 s, each less up to 25% jitter.
  EXPECT_GE(out.results[0].retry_wait_ms, 0.75 * (500.0 + 1000.0));
  EXPECT_LT(out.results[0].retry_wait_ms, 1500.0 + 2000.0);
}

TEST(Runner, RefusedAfterRetriesWhenTheyRunOut) {
  testing::FakeServer server;
  auto client = client_for(server);
  auto cfg = closed_loop(3, 3);
  auto s = distinct(specs(3, 2, {{"fake_refuse_first", 9}, {"fake_retry_after_ms", 20}}));
  auto out = run_benchmark(*client, cfg, s);
  ASSERT_EQ(out.results.size(), 3u);
  for (const auto& r : out.results) {
    EXPECT_EQ(r.status, 503);
    EXPECT_EQ(r.num_retries, 2);
  }
  EXPECT_EQ(server.num_completions(), 9);  // 1 + 2 retries each
  auto j = summarize(out.results, out.measured_duration_s, SummaryOptions{});
  EXPECT_EQ(j["completed"], 0);
  EXPECT_EQ(j["refused"], 3);
  EXPECT_EQ(j["refused_after_retries"], 3);
  EXPECT_EQ(j["retries"], 6);
  EXPECT_EQ(j["errors_5xx"], 0);  // 503 is a refusal, not a fault
  EXPECT_DOUBLE_EQ(j["completed_ratio"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(j["completed_or_refused_ratio"].get<double>(), 1.0);
}

TEST(Runner, MaxRetriesZeroSendsEachRequestOnce) {
  testing::FakeServer server;
  auto client = client_for(server);
  auto cfg = closed_loop(3, 3);
  cfg.max_retries = 0;
  auto s = distinct(specs(3, 2, {{"fake_refuse_first", 1}, {"fake_retry_after_ms", 20}}));
  auto out = run_benchmark(*client, cfg, s);
  EXPECT_EQ(server.num_completions(), 3);
  auto j = summarize(out.results, out.measured_duration_s, SummaryOptions{});
  EXPECT_EQ(j["refused"], 3);
  EXPECT_EQ(j["retries"], 0);
  EXPECT_EQ(j["requests_retried"], 0);
  EXPECT_EQ(j["refused_after_retries"], 0);
}

TEST(Runner, ClientErrorsAreNotRetried) {
  testing::FakeServer server;
  auto client = client_for(server);
  auto cfg = closed_loop(2, 2);
  cfg.max_retries = 3;
  auto s = distinct(specs(2, 2, {{"fake_status", 400}}));
  s[1].extra["fake_status"] = 422;
  auto out = run_benchmark(*client, cfg, s);
  EXPECT_EQ(server.num_completions(), 2);
  ASSERT_EQ(out.results.size(), 2u);
  for (const auto& r : out.results) {
    EXPECT_GE(r.status, 400);
    EXPECT_EQ(r.num_retries, 0);
  }
}

TEST(Runner, RetriedRefusalsAreNotServerErrorsButAHiddenOrFinal500Is) {
  testing::FakeServer server;
  auto client = client_for(server);
  auto cfg = closed_loop(3, 3);
  auto s = distinct(specs(3, 2, {{"fake_first_ms", 1}, {"fake_retry_after_ms", 10}}));
  s[0].extra["fake_refuse_first"] = 1;  // 503, then ok
  s[1].extra["fake_refuse_first"] = 1;  // 500, then ok: a fault a retry hid
  s[1].extra["fake_refuse_status"] = 500;
  s[2].extra["fake_status"] = 500;  // 500 every time
  auto out = run_benchmark(*client, cfg, s);
  auto j = summarize(out.results, out.measured_duration_s, SummaryOptions{});
  EXPECT_EQ(j["completed"], 2);
  EXPECT_EQ(j["errors_5xx"], 2);
  EXPECT_EQ(j["errors_by_status"]["500"], 1);
  EXPECT_EQ(j["retries_by_status"]["503"], 1);
  EXPECT_EQ(j["retries_by_status"]["500"], 3);
  EXPECT_EQ(j["refused_after_retries"], 0);
}

TEST(Runner, AStreamCutAfterA200IsNotRetried) {
  testing::FakeServer server;
  auto client = client_for(server);
  auto cfg = closed_loop(1, 1);
  cfg.endpoint = "/v1/chat/completions";  // the fake sends the head and a role delta at once
  cfg.request_timeout_s = 0.2;
  auto out = run_benchmark(*client, cfg, specs(1, 2, {{"fake_first_ms", 800}}));
  ASSERT_EQ(out.results.size(), 1u);
  EXPECT_EQ(out.results[0].error, "timeout");
  EXPECT_EQ(out.results[0].num_retries, 0);  // the SDK call had returned: not retried
  EXPECT_EQ(server.num_completions(), 1);
}

TEST(Runner, DrainTimeoutEndsARequestWaitingToRetry) {
  testing::FakeServer server;
  auto client = client_for(server);
  auto cfg = closed_loop(1, 1);
  cfg.drain_timeout_s = 0.3;
  auto s = specs(1, 2, {{"fake_refuse_first", 1}, {"fake_retry_after", 5}});
  const double t0 = monotonic_s();
  auto out = run_benchmark(*client, cfg, s);
  EXPECT_LT(monotonic_s() - t0, 4.0);  // did not sit out the 5 s Retry-After
  EXPECT_TRUE(out.drain_timed_out);
  ASSERT_EQ(out.results.size(), 1u);
  EXPECT_EQ(out.results[0].error, "aborted: drain timeout");
  EXPECT_EQ(out.results[0].num_retries, 1);
  EXPECT_EQ(server.num_completions(), 1);
}

TEST(Runner, ImpatientClientsIgnoreRetryAfterAndRetryPastMaxRetries) {
  testing::FakeServer server;
  auto client = client_for(server);
  auto cfg = closed_loop(1, 1);
  cfg.impatient_retry_delay_s = 0.05;
  auto s = specs(1, 2, {{"fake_first_ms", 1}, {"fake_refuse_first", 4}, {"fake_retry_after", 5}});
  s[0].impatient = true;
  const double t0 = monotonic_s();
  auto out = run_benchmark(*client, cfg, s);
  EXPECT_LT(monotonic_s() - t0, 3.0);  // did not sit out a 5 s Retry-After
  ASSERT_EQ(out.results.size(), 1u);
  const auto& r = out.results[0];
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.num_retries, 4);  // more than the SDK's 2
  EXPECT_EQ(r.refusals, 4);
  EXPECT_EQ(r.refusals_without_retry_after, 0);
  EXPECT_TRUE(r.impatient);
  EXPECT_TRUE(r.admitted);
  EXPECT_GE(r.retry_wait_ms, 4 * 50.0);
  EXPECT_EQ(server.num_completions(), 5);
}

TEST(Runner, ImpatientClientsGiveUpAtTheirTimeout) {
  testing::FakeServer server;
  auto client = client_for(server);
  auto cfg = closed_loop(1, 1);
  cfg.impatient_retry_delay_s = 0.05;
  cfg.request_timeout_s = 0.6;
  auto s = specs(1, 2, {{"fake_refuse_first", 1000}, {"fake_retry_after_ms", 10}});
  s[0].impatient = true;
  auto out = run_benchmark(*client, cfg, s);
  ASSERT_EQ(out.results.size(), 1u);
  const auto& r = out.results[0];
  EXPECT_EQ(r.status, 503);
  EXPECT_GE(r.num_retries, 3);
  EXPECT_LE(r.num_retries, 12);
  EXPECT_LT(r.e2el_ms, 1000.0);
  EXPECT_EQ(r.refusals, r.num_retries + 1);
  EXPECT_FALSE(r.admitted);
}

TEST(Runner, AbortingClientsLeaveOnTimeAndAreNotRetried) {
  testing::FakeServer server;
  auto client = client_for(server);
  auto cfg = closed_loop(2, 2);
  auto s = distinct(specs(2, 2, {{"fake_first_ms", 1500}}));
  s[0].abort_after_s = 0.2;  // leaves while waiting for the first token
  s[1].abort_after_s = 0.3;  // leaves while waiting out a 5 s Retry-After
  s[1].extra["fake_refuse_first"] = 1;
  s[1].extra["fake_retry_after"] = 5;
  const double t0 = monotonic_s();
  auto out = run_benchmark(*client, cfg, s);
  EXPECT_LT(monotonic_s() - t0, 2.5);
  ASSERT_EQ(out.results.size(), 2u);
  for (const auto& r : out.results) {
    EXPECT_TRUE(r.aborted);
    EXPECT_EQ(r.error, "aborted");
    EXPECT_EQ(r.num_retries, 0);
  }
  EXPECT_EQ(server.num_completions(), 2);  // one attempt each
  const auto j = summarize_overload(out.results, out.measured_duration_s, OverloadOptions{});
  EXPECT_EQ(j["requests_aborted"], 2);
  EXPECT_EQ(j["refusals"], 1);
  EXPECT_EQ(j["goodput_output_tokens"], 0);
}

TEST(Runner, AdmittedWaitIsTheTimeToTheFirstTokenAndLateAnswersCount) {
  testing::FakeServer server;
  auto client = client_for(server);
  auto cfg = closed_loop(2, 2);
  auto s = distinct(specs(2, 2, {{"fake_first_ms", 300}, {"fake_gap_ms", 1}}));
  s[1].stream = 0;  // not streamed: the answer is the status line, after the whole completion
  auto out = run_benchmark(*client, cfg, s);
  ASSERT_EQ(out.results.size(), 2u);
  for (const auto& r : out.results) {
    EXPECT_TRUE(r.ok()) << r.error;
    EXPECT_TRUE(r.admitted);
    EXPECT_GE(r.admitted_wait_ms, 300.0);
    EXPECT_LT(r.admitted_wait_ms, 2000.0);
    EXPECT_GE(r.longest_unanswered_ms, r.admitted_wait_ms);
  }
  OverloadOptions o;
  o.answer_bound_ms = 100;
  EXPECT_EQ(summarize_overload(out.results, 1, o)["unanswered_past_bound"], 2);
  o.answer_bound_ms = 5000;
  EXPECT_EQ(summarize_overload(out.results, 1, o)["unanswered_past_bound"], 0);
}

TEST(Runner, AStormOfMixedClientsEndsWithEveryRequestAccountedFor) {
  testing::FakeServer server;
  auto client = client_for(server);
  auto cfg = closed_loop(40, 0);
  cfg.duration_s = 2;
  cfg.drain_timeout_s = 5;
  cfg.request_timeout_s = 1;
  cfg.impatient_retry_delay_s = 0.02;
  auto s = distinct(specs(200, 3, {{"fake_first_ms", 30}, {"fake_gap_ms", 5}}));
  Rng rng_words(5);
  for (size_t i = 0; i < s.size(); ++i) {
    s[i].extra["fake_refuse_first"] = static_cast<int>(i % 6);
    s[i].extra["fake_refuse_status"] = i % 2 ? 429 : 503;
    s[i].extra["fake_retry_after_ms"] = 40;
    if (i % 3 == 0) s[i].prompt += " " + make_words(rng_words, 5000);  // ~30 KB bodies
  }
  ClientMix mix;
  mix.stream_fraction = 0.5;
  mix.abort_fraction = 0.3;
  mix.abort_after_ms = LengthDist::parse("uniform:10:300").value();
  mix.impatient_fraction = 0.5;
  Rng rng(11);
  ASSERT_TRUE(assign_client_mix(s, mix, rng).ok());
  auto out = run_benchmark(*client, cfg, s);
  ASSERT_FALSE(out.drain_timed_out);
  ASSERT_GT(out.results.size(), 40u);
  int64_t refusals = 0, aborted = 0, ok = 0;
  for (const auto& r : out.results) {
    refusals += r.refusals;
    aborted += r.aborted;
    ok += r.ok();
    EXPECT_TRUE(r.ok() || !r.error.empty());
    if (r.aborted) {
      EXPECT_EQ(r.error, "aborted");
    }
    if (!r.impatient) {
      EXPECT_LE(r.num_retries, cfg.max_retries);
    }
  }
  EXPECT_GT(aborted, 0);
  EXPECT_GT(ok, 0);
  EXPECT_GT(refusals, 0);
  EXPECT_LE(refusals + ok, server.num_completions());
}

TEST(Runner, RetriesConnectionFailures) {
  int port = 0;
  {
    testing::FakeServer gone;
    port = gone.port();
  }
  auto c = HttpClient::create("127.0.0.1", port);
  ASSERT_TRUE(c.ok());
  auto cfg = closed_loop(1, 1);
  cfg.max_retries = 1;
  cfg.scrape_metrics = false;
  auto out = run_benchmark(*c.value(), cfg, specs(1, 2));
  ASSERT_EQ(out.results.size(), 1u);
  const auto& r = out.results[0];
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error.find("connect"), std::string::npos) << r.error;
  EXPECT_EQ(r.retried_statuses, (std::vector<int>{0}));
  EXPECT_GE(r.retry_wait_ms, 0.75 * 500.0);
}

TEST(Runner, OpenLoopSendsAtArrivalTimesAndHonoursTheCap) {
  testing::FakeServer server;
  auto client = client_for(server);
  RunConfig cfg;
  cfg.model = "m";
  cfg.progress = false;
  cfg.arrivals = {0.0, 0.2, 0.4, 0.6};
  cfg.num_requests = 4;
  auto out = run_benchmark(*client, cfg, specs(4, 2, {{"fake_first_ms", 1}, {"fake_gap_ms", 1}}));
  ASSERT_EQ(out.results.size(), 4u);
  std::vector<double> starts;
  for (const auto& r : out.results) starts.push_back(r.start_s);
  std::sort(starts.begin(), starts.end());
  for (size_t i = 0; i < 4; ++i) EXPECT_GE(starts[i], cfg.arrivals[i]);
  EXPECT_EQ(out.peak_in_flight, 1u);  // each finished long before the next arrival
}

TEST(Runner, MultiTurnResendsTheHistoryInOrder) {
  testing::FakeServer server;
  auto client = client_for(server);
  std::vector<RequestSpec> s;
  for (int round = 0; round < 3; ++round)
    for (int c = 0; c < 2; ++c) {
      RequestSpec r;
      r.prompt = "conv" + std::to_string(c) + " round" + std::to_string(round);
      r.max_tokens = 2;
      r.conversation_id = c;
      r.round = round;
      r.extra = {{"fake_first_ms", 5}, {"fake_gap_ms", 1}};
      s.push_back(r);
    }
  auto cfg = closed_loop(8, 6);
  cfg.endpoint = "/v1/chat/completions";
  auto out = run_benchmark(*client, cfg, s);
  ASSERT_EQ(out.results.size(), 6u);
  EXPECT_EQ(out.peak_in_flight, 2u);  // a round waits for the previous one of its conversation
  auto body = nlohmann::json::parse(server.last_body());
  const auto& m = body["messages"];
  ASSERT_EQ(m.size(), 5u);  // 2 earlier rounds (user + assistant) + this user message
  EXPECT_EQ(m[1]["role"], "assistant");
  EXPECT_EQ(m[1]["content"], " w0 w1");
  EXPECT_EQ(m[4]["content"].get<std::string>().substr(6), "round2");
}

TEST(Bench, ScenarioEndToEndWritesReportsAndJudgesCriteria) {
  testing::FakeServer server;
  const auto dir =
      std::filesystem::temp_directory_path() / ("kvw_loadgen_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto scenario = (dir / "s.json").string();
  std::ofstream(scenario) << R"({"name": "fake", "description": "test",
    "args": {"pattern": "constant", "request-rate": 40, "num-requests": 8, "input-len": "fixed:12",
             "output-len": "fixed:3", "seed": 5, "scrape-interval": 0.1, "quiet": true,
             "goodput": ["ttft:10000"], "percentiles": "50,99.9"},
    "criteria": [{"metric": "completed", "op": "==", "value": 8},
                 {"metric": "errors_5xx", "op": "==", "value": 0},
                 {"metric": "server_alive_after", "op": "==", "value": 1}]})";
  const std::string json_path = (dir / "r.json").string(), html_path = (dir / "r.html").string();
  const int rc = run_bench(
      scenario,
      {{"base-url", server.url()}, {"output-json", json_path}, {"output-html", html_path}});
  EXPECT_EQ(rc, 0);
  std::ifstream jin(json_path);
  auto j = nlohmann::json::parse(jin);
  for (const char* k : {"duration", "completed", "total_input_tokens", "total_output_tokens",
                        "request_throughput", "request_goodput", "output_throughput",
                        "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms",
                        "p99.9_ttft_ms", "p50_tpot_ms", "mean_itl_ms", "p99.9_e2el_ms"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["passed"], true);
  EXPECT_EQ(j["tokenizer"], "target /tokenize");
  EXPECT_EQ(j["total_input_tokens"], 8 * 7);  // usage from the fake
  EXPECT_GT(server.num_tokenize(), 0);
  std::ifstream hin(html_path);
  const std::string html((std::istreambuf_iterator<char>(hin)), std::istreambuf_iterator<char>());
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("KV cache"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  // The same run with an unmet criterion exits 1.
  std::ofstream(scenario)
      << R"({"name": "fake", "args": {"num-requests": 2, "request-rate": 100, "quiet": true},
    "criteria": [{"metric": "completed", "op": ">=", "value": 3}]})";
  EXPECT_EQ(run_bench(scenario, {{"base-url", server.url()},
                                 {"output-json", json_path},
                                 {"output-html", html_path}}),
            1);
  std::filesystem::remove_all(dir);
}

TEST(Bench, RetryStormScenarioReportsGoodputAgainstAQuietPhaseAndCpu) {
  testing::FakeServer server;  // answers everything: goodput is about the quiet capacity
  const auto dir =
      std::filesystem::temp_directory_path() / ("kvw_storm_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string json_path = (dir / "r.json").string();
  // The real scenario file, scaled down; this process stands in for the server's pid.
  const int rc = run_bench(std::string(KVW_SCENARIO_DIR) + "/retry_storm.json",
                           {{"base-url", server.url()},
                            {"duration", "2"},
                            {"quiet-phase", "1"},
                            {"concurrency", "30"},
                            {"input-len", "uniform:1:300"},
                            {"output-len", "fixed:3"},
                            {"abort-after-ms", "uniform:20:200"},
                            {"timeout", "5"},
                            {"drain-timeout", "10"},
                            {"server-pid", std::to_string(getpid())},
                            {"quiet", "true"},
                            {"output-json", json_path},
                            {"output-html", (dir / "r.html").string()}});
  EXPECT_LE(rc, 1);  // criteria may fail against a fake; the run itself must work
  std::ifstream jin(json_path);
  auto j = nlohmann::json::parse(jin);
  for (const char* k : {"goodput_tokens_per_s", "quiet_capacity_tokens_per_s", "goodput_ratio",
                        "p99_admitted_wait_ms", "refusals_per_s", "unanswered_past_bound",
                        "server_cpu_s", "requests_aborted", "impatient_requests"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["quiet_capacity_source"], "measured");
  EXPECT_GT(j["quiet_capacity_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["requests_aborted"].get<int>(), 0);
  EXPECT_GT(j["impatient_requests"].get<int>(), 0);
  // 3 tokens x n of 1-4 choices per request: the pool's mean lies strictly between the ends.
  EXPECT_GT(j["workload_mean_output_tokens"].get<double>(), 3.0);
  EXPECT_LT(j["workload_mean_output_tokens"].get<double>(), 12.0);
  EXPECT_GT(j["server_cpu_s"].get<double>(), 0);
  std::filesystem::remove_all(dir);
}

TEST(Bench, UnreachableTargetAndBadFlagsGiveDistinctExitCodes) {
  int port = 0;
  {
    testing::FakeServer gone;
    port = gone.port();
  }
  EXPECT_EQ(
      run_bench("", {{"base-url", "http://127.0.0.1:" + std::to_string(port)}, {"quiet", "true"}}),
      3);
  EXPECT_EQ(run_bench("", {{"pattern", "closed"}}), 2);
  EXPECT_EQ(run_bench("", {{"input-len", "gauss:3"}}), 2);
}

}  // namespace
}  // namespace kvw::loadgen
