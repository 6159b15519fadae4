// loadgen/prom.h: reads the server's Prometheus text exposition (/metrics) into the handful of
// figures the benchmark charts: KV usage, fragmentation, queue, preemptions, resident memory,
// process CPU. kvwarden_* names are preferred; vLLM's names are the fallback, so a vLLM target
// charts too. Pure functions; a value the text lacks stays NaN.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kvw::loadgen {

struct PromSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses every sample line; comments and malformed lines are skipped.
std::vector<PromSample> parse_prometheus_text(std::string_view text);

// One scrape, t_s seconds from the start of the run.
struct ServerSnapshot {
  double t_s = 0;
  double kv_usage_ratio = NAN;          // 0..1
  double kv_fragmentation_ratio = NAN;  // 0..1
  double num_waiting = NAN;
  double num_running = NAN;
  double preemptions_total = NAN;  // summed over modes
  double resident_memory_bytes = NAN;
  double cpu_seconds_total = NAN;  // process CPU (user + system), where the target exports it
};
ServerSnapshot snapshot_from_samples(const std::vector<PromSample>& samples, double t_s);

}  // namespace kvw::loadgen
