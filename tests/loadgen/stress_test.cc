// How many concurrent streams one client thread sustains against the in-process fake server.
// Prints numbers (no timed assertions); asserts only that every stream completed intact.
// KVW_LOADGEN_STREAMS (default 1000), KVW_LOADGEN_TOKENS (50) and KVW_LOADGEN_GAP_MS (100).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <map>

#include "fake_server.h"
#include "loadgen/runner.h"
#include "loadgen/stats.h"

namespace kvw::loadgen {
namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

double thread_cpu_s() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

TEST(LoadgenStress, ThousandsOfConcurrentStreamsOnOneThread) {
  const int streams = env_int("KVW_LOADGEN_STREAMS", 1000);
  const int tokens = env_int("KVW_LOADGEN_TOKENS", 50);
  const int gap_ms = env_int("KVW_LOADGEN_GAP_MS", 100);
  testing::FakeServer server(static_cast<size_t>(streams) + 16, /*with_metrics=*/false);
  auto client = HttpClient::create("127.0.0.1", server.port());
  ASSERT_TRUE(client.ok());
  std::vector<RequestSpec> specs(streams);
  for (auto& s : specs) {
    s.prompt = "hello";
    s.max_tokens = tokens;
    s.extra = {{"fake_first_ms", gap_ms}, {"fake_gap_ms", gap_ms}};
  }
  RunConfig cfg;
  cfg.model = "fake";
  cfg.closed_loop = true;
  cfg.concurrency = streams;
  cfg.num_requests = static_cast<size_t>(streams);
  cfg.scrape_metrics = false;
  cfg.progress = false;
  const double cpu0 = thread_cpu_s();
  auto out = run_benchmark(*client.value(), cfg, specs);
  const double cpu = thread_cpu_s() - cpu0;
  size_t ok = 0;
  int64_t events = 0;
  std::vector<double> itl;
  std::map<std::string, int> errors;
  for (const auto& r : out.results) {
    if (!r.ok()) ++errors[r.error.substr(0, 40)];
    ok += r.ok() && r.output_tokens == tokens && static_cast<int>(r.itl_ms.size()) == tokens - 1;
    events += r.output_tokens;
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
  }
  std::printf(
      "streams %d (peak in flight %zu, connections %zu), %d tokens each at %d ms: wall %.2f s "
      "(ideal %.2f s), %lld chunks = %.0f chunks/s, client thread CPU %.2f s (%.1f us/chunk), "
      "ITL p50 %.1f ms p99 %.1f ms\n",
      streams, out.peak_in_flight, out.connections_opened, tokens, gap_ms, out.wall_s,
      tokens * gap_ms / 1e3, static_cast<long long>(events), events / out.wall_s, cpu,
      1e6 * cpu / std::max<int64_t>(1, events), percentile(itl, 50), percentile(itl, 99));
  for (const auto& [e, n] : errors) std::printf("  error '%s': %d\n", e.c_str(), n);
  EXPECT_EQ(ok, static_cast<size_t>(streams));
  EXPECT_EQ(out.peak_in_flight, static_cast<size_t>(streams));
}

}  // namespace
}  // namespace kvw::loadgen
