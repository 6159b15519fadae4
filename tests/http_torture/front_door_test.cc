// tests/http_torture/front_door_test.cc: the front door keeps the memory promise against a real
// `kvwarden serve` on the embedded default model:
//  - 1000 concurrent streaming clients each end with [DONE] or a clean 429/503, a /health probe
//    every 100 ms always answers within its 1 s timeout, and /metrics sees the requests
//    (running + waiting), not a transport-sized subset of them;
//  - 64 concurrent 8 MiB prompts under --memory-budget 256MiB: the process lives, every client
//    gets an answer, and its peak RSS (VmHWM) stays within the budget plus the fixed overhead;
//  - 200 clients that read one byte a second do not hold up 16 normal streaming clients.
// Timings are printed for the note, not asserted (except the probe's own 1 s timeout).
// Sanitized builds run fewer streams, prompts and background tokens (kSanitized, each below).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <thread>

#include "torture_util.h"

namespace kvw::torture {
namespace {

std::string stream_body(int max_tokens, bool ignore_eos = false) {
  return R"({"prompt":"And God said","max_tokens":)" + std::to_string(max_tokens) +
         R"(,"temperature":0.8,"stream":true)" + (ignore_eos ? R"(,"ignore_eos":true)" : "") + "}";
}

// Polls /health every 100 ms (1 s timeout each) and /metrics every 200 ms until stopped.
class Prober {
 public:
  explicit Prober(uint16_t port) : port_(port), th_([this] { run(); }) {}
  ~Prober() { stop(); }
  void stop() {
    stop_ = true;
    if (th_.joinable()) th_.join();
  }
  int probes = 0, failures = 0;
  double worst_ms = 0;
  double max_accounted = 0;  // running + waiting, most seen
  std::string first_failure;

 private:
  void run() {
    int tick = 0;
    while (!stop_) {
      const auto t0 = Clock::now();
      RawResponse r = torture::exchange(port_, make_get("/health"), Millis{1000});
      ++probes;
      worst_ms = std::max(worst_ms, r.latency_ms);
      if (!(r.answered() && r.status == 200)) {
        if (failures++ == 0) first_failure = r.describe();
      }
      if (++tick % 2 == 0) {
        RawResponse m = torture::exchange(port_, make_get("/metrics"), Millis{1000});
        if (m.answered() && m.status == 200) {
          const double acc = metric_sum(m.body, "kvwarden_requests{state=\"running\"}") +
                             metric_sum(m.body, "kvwarden_requests{state=\"waiting\"}");
          max_accounted = std::max(max_accounted, acc);
        }
      }
      std::this_thread::sleep_until(t0 + Millis{100});
    }
  }
  const uint16_t port_;
  std::atomic<bool> stop_{false};
  std::thread th_;
};

TEST(FrontDoor, ThousandStreamsEndCleanlyWhileProbesAnswer) {
  auto served = serve_default_model({});
  ASSERT_TRUE(served->server && served->server->alive());
  const uint16_t port = served->server->port();
  // Sanitized: 400 streams of 8 tokens (34 s -> ~10 s under ASan) still overflow the default
  // running and waiting places, so both refusals and [DONE] are checked; 1000 run in Release.
  const int num_streams = kSanitized ? 400 : 1000;
  const int max_tokens = kSanitized ? 8 : 16;
  std::vector<PlannedRequest> reqs;
  for (int i = 0; i < num_streams; ++i) {
    reqs.push_back(
        {make_post_json("/v1/completions", stream_body(max_tokens)), Millis{i / 10}, "stream"});
  }
  Prober prober(port);
  const auto t0 = Clock::now();
  std::vector<RawResponse> out = run_batch(port, reqs, Millis{150000});
  const double wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  prober.stop();
  int done = 0, refused = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const RawResponse& r = out[i];
    ASSERT_TRUE(r.answered()) << "request " << i << " lost: " << r.describe();
    if (r.status == 429 || r.status == 503) {
      expect_openai_error(r, r.status, "refused stream");
      expect_retry_after(r, "refused stream");
      ++refused;
      continue;
    }
    ASSERT_EQ(r.status, 200) << r.describe();
    expect_stream_shape(r, "stream " + std::to_string(i));
    ++done;
  }
  std::printf(
      "  %d streams: %d completed, %d refused in %.1f s; /health %d probes, worst %.1f ms;"
      " max running+waiting %.0f\n",
      num_streams, done, refused, wall_s, prober.probes, prober.worst_ms, prober.max_accounted);
  EXPECT_EQ(prober.failures, 0) << "a /health probe failed or took over 1 s: "
                                << prober.first_failure;
  EXPECT_GT(done, 0);
  // The old thread-per-stream transport let at most its 128 threads' worth reach the engine.
  EXPECT_GE(prober.max_accounted, std::min(done, 400) / 2.0)
      << "requests in flight must show in kvwarden_requests{state=running|waiting}";
  expect_server_healthy(*served, "1000 streams");
  stop_and_expect_clean_exit(*served);
}

TEST(FrontDoor, SixtyFourHugePromptsStayWithinTheMemoryBudget) {
  constexpr uint64_t kBudget = 256ull << 20;
  auto served = serve_default_model({"--memory-budget", "256MiB", "--max-num-seqs", "16",
                                     "--max-queue", "48", "--body-timeout", "120"});
  ASSERT_TRUE(served->server && served->server->alive());
  const uint16_t port = served->server->port();
  std::string text;
  const std::string words = "and the earth was without form and void ";
  while (text.size() + words.size() < (8u << 20) - 256) text += words;
  const std::string completions =
      make_post_json("/v1/completions", R"({"prompt":")" + text + R"(","max_tokens":4})");
  const std::string chat =
      make_post_json("/v1/chat/completions", R"({"messages":[{"role":"user","content":")" + text +
                                                 R"("}],"max_tokens":4})");
  const std::string tokenize = make_post_json("/tokenize", R"({"prompt":")" + text + R"("})");
  // Sanitized: 24 prompts (8 of each kind), still 192 MiB of bodies in flight at once; the
  // RSS bounds, the reason for 64, are Release-only (below).
  const int num_prompts = kSanitized ? 24 : 64;
  std::vector<PlannedRequest> reqs;
  for (int i = 0; i < num_prompts; ++i) {
    const std::string& raw = i % 3 == 0 ? completions : i % 3 == 1 ? chat : tokenize;
    reqs.push_back({raw, Millis{0}, i % 3 == 0 ? "completions" : i % 3 == 1 ? "chat" : "tokenize"});
  }
  // Warm up (first requests touch code and buffers), then take the resting RSS.
  torture::exchange(port, make_post_json("/v1/completions", R"({"prompt":"In","max_tokens":2})"));
  torture::exchange(port, completions);
  std::this_thread::sleep_for(Millis{1000});
  const uint64_t rss_before = vm_rss_bytes(served->server->pid());
  const uint64_t hwm_before = vm_hwm_bytes(served->server->pid());
  const auto t0 = Clock::now();
  std::vector<RawResponse> out = run_batch(port, reqs, Millis{150000});
  const double wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_TRUE(served->server->alive())
      << "the server died under " << num_prompts << " x 8 MiB prompts";
  std::map<int, int> by_status;
  for (size_t i = 0; i < out.size(); ++i) {
    const RawResponse& r = out[i];
    ASSERT_TRUE(r.answered()) << reqs[i].label << " " << i << " lost: " << r.describe();
    ++by_status[r.status];
    if (r.status == 400) {
      expect_openai_error(r, 400, reqs[i].label);
      EXPECT_NE(r.body.find("context_length_exceeded"), std::string::npos) << r.describe();
    } else {
      ASSERT_EQ(r.status, 503) << r.describe();
      expect_retry_after(r, reqs[i].label);
    }
  }
  const uint64_t hwm = vm_hwm_bytes(served->server->pid());
  std::this_thread::sleep_for(Millis{1500});  // the server trims its heap after a burst
  const uint64_t rss_after = vm_rss_bytes(served->server->pid());
  std::printf("  %d x 8 MiB prompts in %.1f s:", num_prompts, wall_s);
  for (auto [status, n] : by_status) std::printf(" %d x %d", n, status);
  std::printf(
      "; VmHWM %.1f MiB before, %.1f MiB after (budget %.0f MiB + %.0f MiB overhead); "
      "VmRSS %.1f MiB before the burst, %.1f MiB 1.5 s after\n",
      hwm_before / 1048576.0, hwm / 1048576.0, kBudget / 1048576.0, kFixedOverheadBytes / 1048576.0,
      rss_before / 1048576.0, rss_after / 1048576.0);
  if (!kSanitized) {  // sanitizers' shadow memory and ASan's quarantine inflate RSS
    EXPECT_LE(hwm, kBudget + kFixedOverheadBytes);
    // Freed request memory goes back to the OS (mmapped bodies, heap trimmed after bursts).
    EXPECT_LE(rss_after, rss_before + (16ull << 20));
  }
  // A normal request is served afterwards.
  RawResponse ok = torture::exchange(
      port, make_post_json("/v1/completions", R"({"prompt":"In the beginning","max_tokens":4})"));
  EXPECT_EQ(ok.status, 200) << ok.describe();
  expect_server_healthy(*served, "64 huge prompts");
  stop_and_expect_clean_exit(*served);
}

TEST(FrontDoor, SlowReadersDoNotHoldUpNormalStreams) {
  auto served = serve_default_model({});
  ASSERT_TRUE(served->server && served->server->alive());
  const uint16_t port = served->server->port();
  std::vector<PlannedRequest> normal;
  // A sanitized server decodes ~10x slower; the deadline below stays. Its 400 background clients
  // take 25 tokens each, not 100 (76 s -> ~35 s under ASan): a 1 byte/s reader still cannot read
  // a whole answer, and their buffers still fill.
  const int tokens = kSanitized ? 8 : 32;
  const int background_tokens = kSanitized ? 25 : 100;
  for (int i = 0; i < 16; ++i) {
    normal.push_back(
        {make_post_json("/v1/completions", stream_body(tokens, true)), Millis{0}, "normal"});
  }
  auto run_normal = [&](const char* when) {
    const auto t0 = Clock::now();
    // Well under --write-timeout (30 s): a server that waited on the slow clients would fail.
    std::vector<RawResponse> out = run_batch(port, normal, Millis{20000});
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    for (const RawResponse& r : out) {
      EXPECT_TRUE(r.answered() && r.status == 200) << when << ": " << r.describe();
      if (r.status == 200) expect_stream_shape(r, when);
    }
    return s;
  };
  const double alone_s = run_normal("alone");
  // The same generation work from 200 clients that read at full speed: the fair comparison
  // (the engine batches all 216 sequences either way).
  std::vector<PlannedRequest> fast;
  for (int i = 0; i < 200; ++i) {
    fast.push_back({make_post_json("/v1/completions", stream_body(background_tokens, true)),
                    Millis{0}, "fast"});
  }
  std::thread fast_clients([&] { run_batch(port, fast, Millis{60000}); });
  std::this_thread::sleep_for(Millis{500});
  const double with_fast_s = run_normal("beside 200 fast readers");
  fast_clients.join();
  // 200 clients with a tiny receive window that read one byte a second.
  std::vector<int> slow;
  for (int i = 0; i < 200; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    int rcv = 2048;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    const std::string req = make_post_json("/v1/completions", stream_body(background_tokens, true));
    ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), (ssize_t)req.size());
    slow.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::atomic<int> slow_finished{0};
  std::thread reader([&] {
    while (!stop) {
      for (int fd : slow) {
        char c;
        if (::recv(fd, &c, 1, MSG_DONTWAIT) == 0) ++slow_finished;
      }
      std::this_thread::sleep_for(Millis{1000});
    }
  });
  std::this_thread::sleep_for(Millis{500});
  const double with_slow_s = run_normal("beside 200 slow readers");
  RawResponse m = torture::exchange(port, make_get("/metrics"));
  const double buffered = metric_sum(m.body, "kvwarden_http_stream_buffered_bytes");
  const double streams = metric_sum(m.body, "kvwarden_http_streams");
  stop = true;
  reader.join();
  std::printf(
      "  16 normal streams: %.2f s alone, %.2f s beside 200 fast readers, %.2f s beside 200 "
      "slow readers (%.0f streams open, %.0f bytes buffered for them)\n",
      alone_s, with_fast_s, with_slow_s, streams, buffered);
  EXPECT_EQ(slow_finished.load(), 0) << "a 1 byte/s reader cannot have read a whole answer";
  EXPECT_LE(buffered, 200.0 * (64 << 10)) << "slow clients cost at most --stream-buffer-bytes";
  for (int fd : slow) ::close(fd);
  expect_server_healthy(*served, "slow readers");
  stop_and_expect_clean_exit(*served);
}

}  // namespace
}  // namespace kvw::torture
