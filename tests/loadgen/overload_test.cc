// Retry-storm accounting (loadgen/overload.h) and the client mix (workload.h): goodput counts
// only completed requests, refusals and waits are counted per attempt, CPU per refusal, the
// /proc stat parser, and the per-request stream/n/abort/impatient draws.
#include "loadgen/overload.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "loadgen/runner.h"
#include "loadgen/workload.h"

namespace kvw::loadgen {
namespace {

RequestResult completed(int tokens, double wait_ms) {
  RequestResult r;
  r.status = 200;
  r.output_tokens = tokens;
  r.admitted = true;
  r.admitted_wait_ms = wait_ms;
  r.longest_unanswered_ms = wait_ms;
  return r;
}

TEST(Overload, GoodputCountsOnlyRequestsWhoseClientGotTheWholeAnswer) {
  std::vector<RequestResult> rs;
  rs.push_back(completed(100, 10));
  rs.push_back(completed(50, 20));
  RequestResult aborted = completed(30, 5);  // streamed 30 tokens, then the client left
  aborted.status = 0;
  aborted.error = "aborted";
  aborted.aborted = true;
  rs.push_back(aborted);
  RequestResult timed_out = completed(7, 400);
  timed_out.status = 0;
  timed_out.error = "timeout";
  rs.push_back(timed_out);
  RequestResult warm = completed(1000, 1);  // warm-up: not counted at all
  warm.warmup = true;
  rs.push_back(warm);
  const auto j = summarize_overload(rs, 10.0, OverloadOptions{});
  EXPECT_EQ(j["goodput_output_tokens"], 150);
  EXPECT_DOUBLE_EQ(j["goodput_tokens_per_s"].get<double>(), 15.0);
  EXPECT_EQ(j["left_output_tokens"], 37);
  EXPECT_EQ(j["requests_aborted"], 1);
  EXPECT_EQ(j["requests_timed_out"], 1);
  EXPECT_EQ(j["admitted"], 4);
  EXPECT_EQ(j["admitted_then_left"], 2);
}

// The mix of what completed, so a storm's goodput is compared with a quiet phase of the same mix.
TEST(Overload, CompletedMixIsTheMeanPromptAndOutputOfCompletedRequests) {
  std::vector<RequestResult> rs;
  rs.push_back(completed(100, 10));
  rs.back().input_tokens = 1000;
  rs.push_back(completed(20, 10));
  rs.back().input_tokens = 3000;
  RequestResult left = completed(30, 5);
  left.input_tokens = 9000;
  left.status = 0;
  left.error = "aborted";
  rs.push_back(left);
  const auto j = completed_mix(rs);
  EXPECT_EQ(j["completed_requests"], 2);
  EXPECT_DOUBLE_EQ(j["completed_mean_input_tokens"].get<double>(), 2000.0);
  EXPECT_DOUBLE_EQ(j["completed_mean_output_tokens"].get<double>(), 60.0);
  EXPECT_EQ(summarize_overload(rs, 1.0, OverloadOptions{})["completed_requests"], 2);
}

TEST(Overload, WorkloadMixIsTheMeanOutputAskedOverThePoolCountingChoices) {
  std::vector<RequestSpec> specs(3);
  specs[0].max_tokens = 100, specs[0].n = 0;  // n not sent: one choice
  specs[1].max_tokens = 20, specs[1].n = 4;
  specs[2].max_tokens = 60, specs[2].n = 2;
  EXPECT_DOUBLE_EQ(workload_mix(specs)["workload_mean_output_tokens"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(workload_mix({})["workload_mean_output_tokens"].get<double>(), 0.0);
}

TEST(Overload, RefusalsWaitsAndTheBoundArePerAttempt) {
  std::vector<RequestResult> rs;
  for (int i = 1; i <= 100; ++i) rs.push_back(completed(1, i));  // waits 1..100 ms
  RequestResult refused;  // three refusals, one of them without Retry-After, never admitted
  refused.status = 429;
  refused.error = "http 429";
  refused.refusals = 3;
  refused.refusals_without_retry_after = 1;
  refused.longest_unanswered_ms = 2;
  refused.impatient = true;
  rs.push_back(refused);
  RequestResult stuck;  // an attempt that heard nothing for 90 s, then the client gave up
  stuck.status = 0;
  stuck.error = "timeout";
  stuck.longest_unanswered_ms = 90000;
  rs.push_back(stuck);
  OverloadOptions o;
  o.answer_bound_ms = 60000;
  const auto j = summarize_overload(rs, 2.0, o);
  EXPECT_EQ(j["refusals"], 3);
  EXPECT_DOUBLE_EQ(j["refusals_per_s"].get<double>(), 1.5);
  EXPECT_EQ(j["refusals_without_retry_after"], 1);
  EXPECT_EQ(j["impatient_requests"], 1);
  EXPECT_EQ(j["admitted"], 100);  // the refused and the stuck one were never admitted
  EXPECT_NEAR(j["p50_admitted_wait_ms"].get<double>(), 50.5, 1e-9);
  EXPECT_NEAR(j["p99_admitted_wait_ms"].get<double>(), 99.01, 1e-9);
  EXPECT_DOUBLE_EQ(j["max_admitted_wait_ms"].get<double>(), 100.0);
  EXPECT_EQ(j["unanswered_past_bound"], 1);
  o.answer_bound_ms = 50;  // now the admitted ones waiting 51..100 ms count too
  EXPECT_EQ(summarize_overload(rs, 2.0, o)["unanswered_past_bound"], 51);
}

TEST(Overload, GoodputRatioAndCpuPerRefusal) {
  // 4 cores busy in the storm (40 s over 10 s), 1.5 in the quiet phase; 1e6 refusals.
  const auto j = compare_to_quiet(900, 1000, 1000000, {40, 10}, {15, 10});
  EXPECT_DOUBLE_EQ(j["goodput_ratio"].get<double>(), 0.9);
  EXPECT_DOUBLE_EQ(j["server_cpu_cores"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(j["quiet_server_cpu_cores"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["server_cpu_per_refusal_us"].get<double>(), 40.0);
  EXPECT_DOUBLE_EQ(j["server_cpu_per_refusal_marginal_us"].get<double>(), 25.0);
  // A storm that used less CPU than the quiet phase adds nothing per refusal (not negative).
  EXPECT_DOUBLE_EQ(
      compare_to_quiet(1, 1, 10, {1, 10}, {15, 10})["server_cpu_per_refusal_marginal_us"]
          .get<double>(),
      0.0);
  // Nothing measured: no ratio, no CPU figures (a criterion on them then fails).
  const auto none = compare_to_quiet(900, NAN, 10, {}, {});
  EXPECT_FALSE(none.contains("goodput_ratio"));
  EXPECT_FALSE(none.contains("server_cpu_per_refusal_us"));
  EXPECT_TRUE(none["quiet_capacity_tokens_per_s"].is_null());
}

TEST(Overload, ReadsCpuFromProcStatEvenWithOddCommandNames) {
  // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
  const std::string stat = "4242 (kvw) serve (x)) S 1 2 3 4 5 6 7 8 9 10 250 150 0 0 20 0 9";
  EXPECT_DOUBLE_EQ(parse_proc_stat_cpu_s(stat, 100), 4.0);
  EXPECT_TRUE(std::isnan(parse_proc_stat_cpu_s("4242 (kvw) S 1 2", 100)));
  EXPECT_TRUE(std::isnan(parse_proc_stat_cpu_s("no parenthesis 1 2 3", 100)));
  EXPECT_TRUE(std::isnan(
      parse_proc_stat_cpu_s("1 (a) S 1 2 3 4 5 6 7 8 9 10 x 150 0", 100)));  // utime not a number
  EXPECT_TRUE(std::isnan(read_process_cpu_s(0)));
  // This process has used some CPU, and the count does not run backwards.
  const double a = read_process_cpu_s(getpid());
  ASSERT_TRUE(std::isfinite(a));
  volatile double x = 0;
  for (int i = 0; i < 20000000; ++i) x = x + std::sqrt(static_cast<double>(i));
  EXPECT_GE(read_process_cpu_s(getpid()), a);
}

TEST(Overload, CpuFromScrapesUsesTheFirstAndLastThatCarriedIt) {
  std::vector<ServerSnapshot> s(4);
  for (int i = 0; i < 4; ++i) s[i].t_s = i;
  EXPECT_FALSE(cpu_from_snapshots(s).measured());
  s[1].cpu_seconds_total = 10;
  EXPECT_FALSE(cpu_from_snapshots(s).measured());  // one sample is no window
  s[3].cpu_seconds_total = 13;
  const CpuWindow w = cpu_from_snapshots(s);
  EXPECT_DOUBLE_EQ(w.cpu_s, 3.0);
  EXPECT_DOUBLE_EQ(w.wall_s, 2.0);
  const auto samples = parse_prometheus_text("process_cpu_seconds_total 12.5\n");
  EXPECT_DOUBLE_EQ(snapshot_from_samples(samples, 0).cpu_seconds_total, 12.5);
}

TEST(ClientMix, DrawsEachBehaviourAtItsShareAndReproducibly) {
  std::vector<RequestSpec> specs(4000);
  ClientMix mix;
  mix.stream_fraction = 0.25;
  mix.has_num_choices = true;
  mix.num_choices = LengthDist::parse("uniform:1:4").value();
  mix.abort_fraction = 0.1;
  mix.abort_after_ms = LengthDist::parse("uniform:500:1500").value();
  mix.impatient_fraction = 0.5;
  Rng rng(7);
  ASSERT_TRUE(assign_client_mix(specs, mix, rng).ok());
  int streamed = 0, aborted = 0, impatient = 0;
  std::vector<int> by_n(5, 0);
  for (const auto& s : specs) {
    streamed += s.stream == 1;
    EXPECT_TRUE(s.stream == 0 || s.stream == 1);
    ASSERT_GE(s.n, 1);
    ASSERT_LE(s.n, 4);
    ++by_n[s.n];
    if (s.abort_after_s >= 0) {
      ++aborted;
      EXPECT_GE(s.abort_after_s, 0.5);
      EXPECT_LE(s.abort_after_s, 1.5);
    }
    impatient += s.impatient;
  }
  EXPECT_NEAR(streamed / 4000.0, 0.25, 0.03);
  EXPECT_NEAR(aborted / 4000.0, 0.1, 0.02);
  EXPECT_NEAR(impatient / 4000.0, 0.5, 0.03);
  for (int n = 1; n <= 4; ++n) EXPECT_NEAR(by_n[n] / 4000.0, 0.25, 0.03) << n;
  // Same seed, same mix; a different abort share leaves the other draws alone.
  std::vector<RequestSpec> again(4000);
  mix.abort_fraction = 0;
  Rng rng2(7);
  ASSERT_TRUE(assign_client_mix(again, mix, rng2).ok());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(again[i].stream, specs[i].stream);
    EXPECT_EQ(again[i].n, specs[i].n);
    EXPECT_EQ(again[i].impatient, specs[i].impatient);
    EXPECT_LT(again[i].abort_after_s, 0);
  }
}

TEST(ClientMix, DefaultsLeaveTheRunsSettingsAndBadSharesAreRefused) {
  std::vector<RequestSpec> specs(10);
  Rng rng(1);
  ASSERT_TRUE(assign_client_mix(specs, ClientMix{}, rng).ok());
  for (const auto& s : specs) {
    EXPECT_EQ(s.stream, -1);
    EXPECT_EQ(s.n, 0);
    EXPECT_LT(s.abort_after_s, 0);
    EXPECT_FALSE(s.impatient);
  }
  ClientMix bad;
  bad.impatient_fraction = 1.5;
  EXPECT_FALSE(assign_client_mix(specs, bad, rng).ok());
  bad = ClientMix{};
  bad.stream_fraction = 2;
  EXPECT_FALSE(assign_client_mix(specs, bad, rng).ok());
}

TEST(ClientMix, RequestBodyCarriesNAndThePerRequestStreamChoice) {
  RunConfig c;
  c.stream = true;
  RequestSpec s;
  s.prompt = "hi";
  auto body = nlohmann::json::parse(build_request_body(c, s, {}));
  EXPECT_TRUE(body["stream"].get<bool>());
  EXPECT_TRUE(body.contains("stream_options"));
  EXPECT_FALSE(body.contains("n"));
  s.stream = 0;
  s.n = 3;
  body = nlohmann::json::parse(build_request_body(c, s, {}));
  EXPECT_FALSE(body["stream"].get<bool>());
  EXPECT_FALSE(body.contains("stream_options"));
  EXPECT_EQ(body["n"], 3);
  c.extra_body = {{"top_p", 0.9}, {"top_k", 0}};  // the run's extras, then the request's
  s.extra = {{"top_k", 5}};
  body = nlohmann::json::parse(build_request_body(c, s, {}));
  EXPECT_DOUBLE_EQ(body["top_p"].get<double>(), 0.9);
  EXPECT_EQ(body["top_k"], 5);
}

TEST(Workload, InputLengthInWordsGivesExactlyThatManyWords) {
  WorkloadSpec w;
  w.input_in_words = true;
  w.input_len = LengthDist::parse("uniform:1:5000").value();
  EstimatingCounter counter;
  Rng rng(3);
  auto specs = build_workload(w, 50, rng, counter);
  ASSERT_TRUE(specs.ok());
  int longest = 0;
  for (const auto& s : specs.value()) {
    const int words = static_cast<int>(std::count(s.prompt.begin(), s.prompt.end(), ' ')) + 1;
    EXPECT_GE(words, 1);
    EXPECT_LE(words, 5000);
    longest = std::max(longest, words);
    EXPECT_EQ(s.input_tokens, counter.count(s.prompt));
  }
  EXPECT_GT(longest, 4000);  // 50 draws from 1..5000 reach the top tenth
  const std::string seven = make_words(rng, 7);
  EXPECT_EQ(std::count(seven.begin(), seven.end(), ' '), 6);
}

}  // namespace
}  // namespace kvw::loadgen
