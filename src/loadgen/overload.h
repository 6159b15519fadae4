// loadgen/overload.h: how a server fares when offered far more than it can serve (a retry
// storm): goodput (tokens of completed requests whose client was still waiting) against the
// same server's quiet capacity, how long admitted requests waited for their first token,
// refusals per second and whether they said when to come back, requests left unanswered past a
// bound, and the server's CPU per refusal. Pure functions over finished results, plus a reader
// of a process's CPU time from /proc/<pid>/stat.
#pragma once

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "loadgen/prom.h"
#include "loadgen/stats.h"
#include "loadgen/workload.h"

namespace kvw::loadgen {

struct OverloadOptions {
  std::vector<double> percentiles = {50, 90, 95, 99};
  // An attempt that waited longer than this for its answer (the status line, or a 200 stream's
  // first token) counts in unanswered_past_bound.
  double answer_bound_ms = 60000;
};

// Over the measured (non-warm-up) requests and duration_s:
//   goodput_output_tokens, goodput_tokens_per_s: output tokens of completed requests (the client
//     got the whole answer while still waiting); left_output_tokens: tokens streamed to requests
//     whose client then left (aborted or timed out).
//   requests_aborted (client left on purpose), requests_timed_out (client gave up), admitted
//     (some attempt got a 200), admitted_then_left (admitted, then aborted or timed out),
//     impatient_requests (clients that ignore Retry-After).
//   refusals (attempts answered 429/503, retried ones included), refusals_per_s,
//     refusals_without_retry_after.
//   {pNN,max}_admitted_wait_ms: admitted requests' final attempt, send to first token (streamed)
//     or first byte (not streamed); one that never got it counts with the time it waited.
//   unanswered_past_bound: requests with an attempt unanswered past the bound; answer_bound_s.
//   and completed_mix's fields.
nlohmann::json summarize_overload(const std::vector<RequestResult>& results, double duration_s,
                                  const OverloadOptions& options);

// The measured requests that completed: completed_requests, completed_mean_input_tokens and
// completed_mean_output_tokens (all choices). Goodput in tokens/s depends on this mix, so a
// storm compares with its quiet phase only where the two mixes agree.
nlohmann::json completed_mix(const std::vector<RequestResult>& results);

// What the workload asks for on average: workload_mean_output_tokens (max_tokens x choices over
// every request of the pool). Both phases draw from this pool, so whichever completed mix sits
// far from it is the phase whose sample is off (a short quiet phase completes a few hundred).
nlohmann::json workload_mix(const std::vector<RequestSpec>& specs);

// Server CPU seconds used over a window of wall_s seconds (NaN: not measured).
struct CpuWindow {
  double cpu_s = NAN;
  double wall_s = NAN;
  bool measured() const { return std::isfinite(cpu_s) && std::isfinite(wall_s) && wall_s > 0; }
};

// Goodput against the quiet capacity and CPU per refusal:
//   quiet_capacity_tokens_per_s, goodput_ratio (goodput / capacity; absent without a capacity),
//   server_cpu_s, server_cpu_cores (CPU / wall) for both windows, server_cpu_per_refusal_us (all
//   the storm's server CPU / refusals: an upper bound, as it includes the admitted work) and
//   server_cpu_per_refusal_marginal_us ((storm CPU - quiet CPU rate x storm wall) / refusals:
//   what the refusals added; meaningful only while the server has idle cores, since on a
//   saturated one a refusal's CPU displaces model work, which shows in goodput_ratio instead).
nlohmann::json compare_to_quiet(double goodput_tokens_per_s, double quiet_capacity_tokens_per_s,
                                int64_t refusals, const CpuWindow& storm, const CpuWindow& quiet);

// The CPU used between the first and last scrapes that carried process CPU (NaN: none did).
CpuWindow cpu_from_snapshots(const std::vector<ServerSnapshot>& samples);

// The terminal section for the figures above (empty when the report has none of them).
std::string format_overload(const nlohmann::json& report);

// utime + stime in seconds from the text of /proc/<pid>/stat; NaN when malformed. The command
// name (field 2) may hold spaces and parentheses: fields are counted after the last ')'.
double parse_proc_stat_cpu_s(std::string_view stat, long ticks_per_s);
// The same read from /proc/<pid>/stat now; NaN when the process is gone or pid <= 0.
double read_process_cpu_s(int pid);

}  // namespace kvw::loadgen
