// tests/http_torture/fault_test.cc: process-level faults against a real `kvwarden serve` on the
// default model:
//  - a tiny --memory-budget with a swap tier under 16 concurrent long prompts: every request
//    completes or gets 429/503 with Retry-After, nothing else; the engine preempted (swap);
//    peak RSS (VmHWM) stays within the budget (swap staging is a row of it) plus the overhead;
//  - SIGTERM while 10 streams are mid-generation: every stream finishes with [DONE], a new
//    request during the drain gets 503 + Retry-After, the process exits 0;
//  - the breaker flags trip (503 "overloaded", /ready 503) and recover (/ready 200) as set.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "torture_util.h"

namespace kvw::torture {
namespace {

constexpr uint64_t kFixedOverheadBytes = 64ull << 20;  // README, "Serving limits"

std::string long_prompt() {
  std::string p;
  while (p.size() < 700) p += "And God said, Let there be light: and there was light. ";
  return p;  // about 180 tokens of the default model's vocabulary
}

TEST(Faults, TinyBudgetWithSwapServesOrRefusesEveryLongPrompt) {
  // 137 MiB leaves about 35 KV blocks (~2 of these sequences) after the fixed rows (weights
  // 9.9, workspace 25.3, reserve 64.3, request 28.1 (32 streams' buffers and their kernel send
  // buffers), swap staging 8 MiB with these flags). Two
  // forward threads: the workspace holds each thread's GEMM scratch (~1 MiB here).
  constexpr uint64_t kBudget = 137ull << 20;
  TempDir tmp;
  auto served =
      serve_default_model({"--memory-budget", "137MiB", "--max-num-seqs",   "16",
                           "--max-queue",     "16",     "--request-memory", "8MiB",
                           "--grammar-cache", "0",      "--max-body-bytes", "1048576",
                           "--swap-space",    "8MiB",   "--swap-path",      tmp.path() + "/swap",
                           "--max-model-len", "256",    "--threads",        "2"});
  ASSERT_TRUE(served->server && served->server->alive());
  const uint16_t port = served->server->port();
  std::vector<PlannedRequest> reqs;
  for (int i = 0; i < 16; ++i) {
    const std::string body = R"({"prompt":")" + long_prompt() +
                             R"(","max_tokens":48,"ignore_eos":true)" +
                             (i % 2 ? R"(,"stream":true)" : "") + "}";
    reqs.push_back(
        {make_post_json("/v1/completions", body), Millis{0}, i % 2 ? "stream" : "whole"});
  }
  std::vector<RawResponse> out = run_batch(port, reqs, Millis{120000});
  int ok = 0, refused = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const RawResponse& r = out[i];
    ASSERT_TRUE(r.answered()) << i << " lost: " << r.describe();
    if (r.status == 429 || r.status == 503) {
      expect_openai_error(r, r.status, "refused");
      expect_retry_after(r, "refused");
      ++refused;
      continue;
    }
    ASSERT_EQ(r.status, 200) << r.describe();
    if (reqs[i].label == "stream") {
      expect_stream_shape(r, "stream");
    } else {
      expect_completion_shape(r, false, "whole");
    }
    ++ok;
  }
  RawResponse m = torture::exchange(port, make_get("/metrics"));
  const double swapped = metric_sum(m.body, "kvwarden_preemptions_total{mode=\"swap\"}");
  const double recomputed = metric_sum(m.body, "kvwarden_preemptions_total{mode=\"recompute\"}");
  const uint64_t hwm = vm_hwm_bytes(served->server->pid());
  std::printf(
      "  16 long prompts, 135 MiB budget: %d completed, %d refused; preemptions swap %.0f "
      "recompute %.0f; VmHWM %.1f MiB (budget + overhead = %.0f MiB)\n",
      ok, refused, swapped, recomputed, hwm / 1048576.0,
      (kBudget + kFixedOverheadBytes) / 1048576.0);
  EXPECT_GT(ok, 0);
  EXPECT_GT(swapped + recomputed, 0) << "16 x ~230 tokens cannot fit ~512 tokens of KV at once";
  if (!kSanitized) {  // sanitizers' shadow memory inflates RSS
    EXPECT_LE(hwm, kBudget + kFixedOverheadBytes);
  }
  stop_and_expect_clean_exit(*served);
}

TEST(Faults, SigtermMidStreamFinishesEveryStreamRefusesNewWorkAndExitsZero) {
  // A drain timeout far above the streams' run time, so a loaded machine (a shared CI runner)
  // still sees them finish rather than be cancelled by the drain.
  auto served = serve_default_model({"--drain-timeout", "200"});
  ASSERT_TRUE(served->server && served->server->alive());
  const uint16_t port = served->server->port();
  // The streams must still run when the late request arrives and end within the drain timeout:
  // a Release build with the O(vocabulary) sampler finishes 10 x 200 tokens in ~0.4 s, a
  // sanitized one needs all of its time for them.
  const std::string max_tokens = kSanitized ? "200" : "1500";
  std::vector<PlannedRequest> reqs;
  for (int i = 0; i < 10; ++i) {
    reqs.push_back(
        {make_post_json("/v1/completions", R"({"prompt":"And God said","max_tokens":)" +
                                               max_tokens + R"(,"ignore_eos":true,"stream":true})"),
         Millis{0}, "stream"});
  }
  std::vector<RawResponse> out;
  std::thread clients([&] { out = run_batch(port, reqs, Millis{180000}); });
  std::this_thread::sleep_for(Millis{400});  // the streams are running
  ASSERT_EQ(::kill(served->server->pid(), SIGTERM), 0);
  std::this_thread::sleep_for(Millis{100});
  RawResponse late = torture::exchange(
      port, make_post_json("/v1/completions", R"({"prompt":"In","max_tokens":2})"));
  clients.join();
  EXPECT_EQ(late.status, 503) << late.describe();
  if (late.status == 503) expect_retry_after(late, "request during the drain");
  for (const RawResponse& r : out) {
    EXPECT_TRUE(r.answered() && r.status == 200) << r.describe();
    if (r.status == 200) expect_stream_shape(r, "stream during SIGTERM");
  }
  stop_and_expect_clean_exit(*served);
}

TEST(Faults, BreakerFlagsTripAndRecover) {
  auto served = serve_default_model({"--max-num-seqs", "8", "--max-model-len", "256",
                                     "--breaker-kv-threshold", "0.3", "--breaker-kv-recover", "0.1",
                                     "--breaker-kv-seconds", "0.3", "--breaker-recover-seconds",
                                     "0.5", "--breaker-tick-ms", "50"});
  ASSERT_TRUE(served->server && served->server->alive());
  const uint16_t port = served->server->port();
  // 8 closed-loop clients, each its own loop so they never finish together, with ~100-token
  // prompts and 100 tokens out: from the first prefill on, the pool (8 x 256 tokens) stays over
  // 30% used for as long as they run. (One batch of 8 x 200 tokens from a 4-token prompt finished
  // in ~0.3 s on a Release build, under the 0.3 s the breaker waits.)
  std::string words;
  for (int i = 0; i < 25; ++i) words += "and the LORD said ";
  std::atomic<bool> stop_load{false};
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; ++i) {
    // A different first word per client: no prefix-cache sharing between them.
    const std::string load = make_post_json(
        "/v1/completions", R"({"prompt":")" + std::to_string(i) + " " + words +
                               R"(","max_tokens":100,"ignore_eos":true,"stream":true})");
    clients.emplace_back([&, load] {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!stop_load.load() && std::chrono::steady_clock::now() < until) {
        torture::exchange(port, load, Millis{30000});
      }
    });
  }
  bool shed = false;
  RawResponse refused;
  // Up to 20 s: a sanitized server on a shared 2-core machine fills the pool slowly.
  for (int i = 0; i < 400 && !shed; ++i) {
    std::this_thread::sleep_for(Millis{50});
    RawResponse ready = torture::exchange(port, make_get("/ready"));
    if (ready.status == 503 && ready.body.find("shedding") != std::string::npos) {
      shed = true;
      refused = torture::exchange(
          port, make_post_json("/v1/completions", R"({"prompt":"In","max_tokens":2})"));
    }
  }
  stop_load = true;
  for (std::thread& t : clients) t.join();
  EXPECT_TRUE(shed) << "KV usage over 0.3 for 0.3 s must shed";
  EXPECT_EQ(refused.status, 503) << refused.describe();
  EXPECT_NE(refused.body.find("overloaded"), std::string::npos) << refused.describe();
  expect_retry_after(refused, "shedding");
  bool recovered = false;
  for (int i = 0; i < 100 && !recovered; ++i) {
    std::this_thread::sleep_for(Millis{50});
    recovered = torture::exchange(port, make_get("/ready")).status == 200;
  }
  EXPECT_TRUE(recovered) << "below 0.1 for 0.5 s the breaker returns to ok";
  RawResponse ok = torture::exchange(
      port, make_post_json("/v1/completions", R"({"prompt":"In","max_tokens":2})"));
  EXPECT_EQ(ok.status, 200) << ok.describe();
  stop_and_expect_clean_exit(*served);
}

}  // namespace
}  // namespace kvw::torture
