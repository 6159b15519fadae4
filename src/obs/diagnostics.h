// obs/diagnostics.h: writes a diagnostics dump (budget table, block map summary, queue, recent
// trace, config: whatever `collect` returns, as JSON) to --diagnostics-dir when a trigger fires:
//   preemption_storm  more than `preemption_storm_count` preemptions within `window_s`
//   shedding          any request shed or failed by the server since the last check (429 and
//                     5xx; client mistakes such as 400/401/404 are not recorded: see
//                     record_shed's callers)
//   numerics          any NaN/Inf event since the last check
//   kv_usage_high     KV block usage above `kv_usage_threshold`
// Each trigger writes at most one file per `min_interval_s`, and the process writes at most
// `max_files` files and `max_bytes` bytes in all (a storm must not fill the disk); past either
// cap dumps are skipped and counted. Every written file is logged with its path.
// Thread safety: record_*() may be called from any thread (the engine thread records
// preemptions); check() runs on one watcher thread, never the engine thread (it writes files).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvw::obs {

struct DiagnosticsConfig {
  std::string dir;                       // --diagnostics-dir; empty = disabled
  uint32_t preemption_storm_count = 50;  // more than this many ...
  double window_s = 10.0;                // ... within this window
  double kv_usage_threshold = 0.98;
  double min_interval_s = 60.0;      // per trigger (--diagnostics-min-interval)
  uint32_t max_files = 64;           // per process (--diagnostics-max-files)
  uint64_t max_bytes = 64ull << 20;  // per process, all files (--diagnostics-max-bytes)
};

enum class DiagTrigger { kPreemptionStorm, kShedding, kNumerics, kKvUsageHigh };
const char* to_string(DiagTrigger t);

class DiagnosticsWriter {
 public:
  using Clock = std::function<double()>;  // seconds, monotonic (tests inject one)
  DiagnosticsWriter(DiagnosticsConfig cfg, Clock clock);

  void record_preemptions(uint32_t n);
  void record_shed();
  void record_numerics_events(uint64_t n);

  // Evaluates every trigger at clock(); writes one file per firing trigger that is not rate
  // limited, named <dir>/kvwarden-diag-<unix_ms>-<seq>-<trigger>.json, containing
  // {"trigger","reason","time_s", ...collect()}. Returns the paths written (empty when disabled,
  // nothing fired or everything was rate limited). Write errors are logged, not returned.
  std::vector<std::string> check(double kv_usage, const std::function<nlohmann::json()>& collect);

  // Triggers that fire now, regardless of the rate limit (for tests and /debug/stats).
  std::vector<DiagTrigger> firing(double kv_usage);

  uint64_t num_files_written() const;
  uint64_t num_bytes_written() const;
  uint64_t num_skipped() const;  // dumps not written because a cap was reached

 private:
  std::vector<std::pair<DiagTrigger, std::string>> firing_locked(double now, double kv_usage);
  bool at_cap() const;
  bool reserve(uint64_t bytes);  // counts a file of `bytes` when it fits both caps
  void skip(uint64_t n);

  const DiagnosticsConfig cfg_;
  const Clock clock_;
  mutable std::mutex mu_;
  std::deque<std::pair<double, uint32_t>> preemptions_;  // (time, count), within window_s
  uint64_t sheds_ = 0;                                   // since the last check
  uint64_t numerics_ = 0;                                // since the last check
  double last_written_[4] = {-1e300, -1e300, -1e300, -1e300};
  uint64_t seq_ = 0;
  // Writes happen on the one watcher thread; mu_ guards these for the readers.
  uint64_t files_written_ = 0;
  uint64_t bytes_written_ = 0;
  uint64_t skipped_ = 0;
};

}  // namespace kvw::obs
