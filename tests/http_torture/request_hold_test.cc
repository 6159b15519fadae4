// tests/http_torture/request_hold_test.cc: issue 30's worst legal request mix against a real
// `kvwarden serve` on the default model: 8 concurrent non-streamed requests of 64 choices
// (4 prompts x n 16), each with maximal stop strings (16 strings, 4 KiB), a maximal logit_bias
// (1024 entries), logprobs 5 and max_tokens 128. Each holds megabytes of answer state until its
// last byte; under a small --request-memory the ones that do not fit get 503 request_memory +
// Retry-After instead, every answer that is given is whole, request memory never passes its
// capacity and the process's peak RSS (VmHWM) stays within the budget plus the fixed overhead.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "torture_util.h"

namespace kvw::torture {
namespace {

using nlohmann::json;

// Why 128: 8 x 64 choices x 128 tokens is ~65k tokens, tens of seconds on a busy 2-core machine.
constexpr int kMaxTokens = 128;
// The all-fit run under the sanitizers, whose RSS is not checked and which decode ~10x slower:
// 16 tokens reach every holding (bodies, stops, bias, logprob records, answer parts).
constexpr int kAllFitMaxTokens = kSanitized ? 16 : kMaxTokens;

std::string worst_body(int max_tokens) {
  json stops = json::array();
  for (int i = 0; i < 16; ++i) stops.push_back(std::string(256, (char)('!' + i)));
  json bias = json::object();
  for (int i = 0; i < 1024; ++i) bias[std::to_string(1000 + i)] = -1;
  return json{{"prompt", {"In the beginning", "And God said", "The earth was", "Let there be"}},
              {"n", 16},
              {"max_tokens", max_tokens},
              {"logprobs", 5},
              {"ignore_eos", true},
              {"stop", stops},
              {"logit_bias", bias}}
      .dump();
}

struct MixResult {
  std::map<int, int> by_status;
  double peak_used = 0, capacity = 0, hwm_mib = 0, wall_s = 0;
};

// Runs 8 worst requests at once; checks every answer; samples request memory meanwhile.
MixResult run_worst_mix(ServedModel& served, int max_tokens) {
  const uint16_t port = served.server->port();
  std::vector<PlannedRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    reqs.push_back({make_post_json("/v1/completions", worst_body(max_tokens)), Millis{0}, "64"});
  }
  MixResult m;
  std::atomic<bool> stop{false};
  std::thread sampler([&] {
    while (!stop) {
      RawResponse r = torture::exchange(port, make_get("/metrics"), Millis{2000});
      m.peak_used = std::max(m.peak_used,
                             metric_sum(r.body, "kvwarden_request_memory_bytes{state=\"used\"}"));
      m.capacity = metric_sum(r.body, "kvwarden_request_memory_bytes{state=\"capacity\"}");
      std::this_thread::sleep_for(Millis{50});
    }
  });
  const auto t0 = Clock::now();
  std::vector<RawResponse> out = run_batch(port, reqs, Millis{240000});
  m.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  stop = true;
  sampler.join();
  for (const RawResponse& r : out) {
    EXPECT_TRUE(r.answered()) << "lost: " << r.describe();
    ++m.by_status[r.status];
    if (r.status == 200) {
      const json j = json::parse(r.body, nullptr, false);
      EXPECT_TRUE(j.is_object()) << r.body.substr(0, 200);
      if (!j.is_object()) continue;
      EXPECT_EQ(j["choices"].size(), 64u);
      EXPECT_EQ(j["usage"]["completion_tokens"], 64 * max_tokens);
      EXPECT_EQ(j["choices"][63]["logprobs"]["tokens"].size(), (size_t)max_tokens);
    } else {
      expect_openai_error(r, 503, "worst mix");
      EXPECT_NE(r.body.find("request_memory_exhausted"), std::string::npos) << r.describe();
      expect_retry_after(r, "worst mix");
    }
  }
  m.hwm_mib = vm_hwm_bytes(served.server->pid()) / 1048576.0;
  return m;
}

void print(const char* what, const MixResult& m, double budget_mib) {
  std::printf("  %s: %.1f s,", what, m.wall_s);
  for (auto [status, n] : m.by_status) std::printf(" %d x %d", n, status);
  std::printf(
      "; request memory peak %.1f of %.1f MiB; VmHWM %.1f MiB (budget %.0f MiB + %.0f MiB "
      "overhead)\n",
      m.peak_used / 1048576.0, m.capacity / 1048576.0, m.hwm_mib, budget_mib,
      kFixedOverheadBytes / 1048576.0);
}

TEST(FrontDoor, SixtyFourChoiceRequestsWithMaximalStopsGetRequestMemoryRefusalsWithinBudget) {
  // Its point is VmHWM against the budget, which the sanitizers' shadow memory hides, and it
  // needs 128-token answers to refuse some (74 s under ASan). The same holdings and their 503
  // run under ASan in the all-fit mix below and in RequestHold.* (tests/server).
  if (kSanitized) GTEST_SKIP() << "RSS test; Release only";
  constexpr uint64_t kBudget = 384ull << 20;
  // 4.25 MiB per body reservation; 6 MiB holds the state of a few of these requests (~1.5 MiB
  // each) beside one body's reservation.
  auto served = serve_default_model({"--memory-budget", "384MiB", "--max-num-seqs", "64",
                                     "--max-queue", "512", "--max-body-bytes", "1048576",
                                     "--request-memory", "6MiB", "--max-queue-wait", "0"});
  ASSERT_TRUE(served->server && served->server->alive());
  MixResult m = run_worst_mix(*served, kMaxTokens);
  print("8 x 64 choices, 6 MiB request memory", m, kBudget / 1048576.0);
  EXPECT_GE(m.by_status[200], 1) << "at least one fits";
  EXPECT_GE(m.by_status[503], 1) << "the state was not charged: every request was taken";
  EXPECT_EQ(m.by_status[200] + m.by_status[503], 8);
  EXPECT_GT(m.peak_used, 2.0 * 1048576) << "answer state held in request memory meanwhile";
  EXPECT_LE(m.peak_used, m.capacity);
  if (!kSanitized) {
    EXPECT_LE(m.hwm_mib * 1048576.0, (double)(kBudget + kFixedOverheadBytes));
  }
  expect_server_healthy(*served, "the worst mix");
  stop_and_expect_clean_exit(*served);
}

// The same mix with the default request memory (64 MiB): all eight fit; the figure for the
// README's serving-limits table.
TEST(FrontDoor, WorstLegalMixWithDefaultRequestMemoryStaysWithinBudget) {
  // 576 streams (2 x 64 KiB buffers each), 64 MiB of request memory and the 16 MiB grammar
  // cache need ~368 MiB.
  constexpr uint64_t kBudget = 384ull << 20;
  auto served = serve_default_model({"--memory-budget", "384MiB", "--max-num-seqs", "64",
                                     "--max-queue", "512", "--max-queue-wait", "0"});
  ASSERT_TRUE(served->server && served->server->alive());
  MixResult m = run_worst_mix(*served, kAllFitMaxTokens);
  print("8 x 64 choices, default request memory", m, kBudget / 1048576.0);
  EXPECT_LE(m.peak_used, m.capacity);
  if (!kSanitized) {
    EXPECT_LE(m.hwm_mib * 1048576.0, (double)(kBudget + kFixedOverheadBytes));
  }
  stop_and_expect_clean_exit(*served);
}

}  // namespace
}  // namespace kvw::torture
