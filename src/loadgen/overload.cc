// loadgen/overload.cc: retry-storm accounting and the /proc CPU reader (see overload.h).
#include "loadgen/overload.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace kvw::loadgen {

namespace {
nlohmann::json num_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

bool client_left(const RequestResult& r) {
  return r.aborted || r.error == "timeout";
}
}  // namespace

nlohmann::json summarize_overload(const std::vector<RequestResult>& results, double duration_s,
                                  const OverloadOptions& options) {
  int64_t goodput_tokens = 0, left_tokens = 0, aborted = 0, timed_out = 0, admitted = 0;
  int64_t admitted_then_left = 0, impatient = 0, refusals = 0, no_retry_after = 0;
  int64_t unanswered = 0;
  std::vector<double> waits;
  for (const auto& r : results) {
    if (r.warmup) continue;
    refusals += r.refusals;
    no_retry_after += r.refusals_without_retry_after;
    if (r.impatient) ++impatient;
    if (r.longest_unanswered_ms > options.answer_bound_ms) ++unanswered;
    if (r.aborted) ++aborted;
    if (!r.aborted && r.error == "timeout") ++timed_out;
    if (r.admitted) {
      ++admitted;
      if (r.admitted_wait_ms >= 0) waits.push_back(r.admitted_wait_ms);
      if (client_left(r)) ++admitted_then_left;
    }
    if (r.ok()) {
      goodput_tokens += r.output_tokens;
    } else if (client_left(r)) {
      left_tokens += r.output_tokens;
    }
  }
  const double d = duration_s > 0 ? duration_s : 1e-9;
  nlohmann::json out;
  out["goodput_output_tokens"] = goodput_tokens;
  out["goodput_tokens_per_s"] = static_cast<double>(goodput_tokens) / d;
  out["left_output_tokens"] = left_tokens;
  out["requests_aborted"] = aborted;
  out["requests_timed_out"] = timed_out;
  out["admitted"] = admitted;
  out["admitted_then_left"] = admitted_then_left;
  out["impatient_requests"] = impatient;
  out["refusals"] = refusals;
  out["refusals_per_s"] = static_cast<double>(refusals) / d;
  out["refusals_without_retry_after"] = no_retry_after;
  for (double p : options.percentiles)
    out["p" + percentile_name(p) + "_admitted_wait_ms"] = percentile(waits, p);
  out["max_admitted_wait_ms"] = waits.empty() ? 0.0 : *std::max_element(waits.begin(), waits.end());
  out["unanswered_past_bound"] = unanswered;
  out["answer_bound_s"] = options.answer_bound_ms / 1e3;
  out.update(completed_mix(results));
  return out;
}

nlohmann::json completed_mix(const std::vector<RequestResult>& results) {
  int64_t n = 0, input = 0, output = 0;
  for (const auto& r : results) {
    if (r.warmup || !r.ok()) continue;
    ++n;
    input += r.input_tokens;
    output += r.output_tokens;
  }
  const double d = n > 0 ? static_cast<double>(n) : 1;
  return {{"completed_requests", n},
          {"completed_mean_input_tokens", static_cast<double>(input) / d},
          {"completed_mean_output_tokens", static_cast<double>(output) / d}};
}

nlohmann::json workload_mix(const std::vector<RequestSpec>& specs) {
  double output = 0;
  for (const auto& s : specs) output += static_cast<double>(s.max_tokens) * std::max(s.n, 1);
  return {{"workload_mean_output_tokens", specs.empty() ? 0.0 : output / specs.size()}};
}

nlohmann::json compare_to_quiet(double goodput_tokens_per_s, double quiet_capacity_tokens_per_s,
                                int64_t refusals, const CpuWindow& storm, const CpuWindow& quiet) {
  nlohmann::json out;
  out["quiet_capacity_tokens_per_s"] = num_or_null(quiet_capacity_tokens_per_s);
  if (std::isfinite(quiet_capacity_tokens_per_s) && quiet_capacity_tokens_per_s > 0)
    out["goodput_ratio"] = goodput_tokens_per_s / quiet_capacity_tokens_per_s;
  if (quiet.measured()) {
    out["quiet_server_cpu_s"] = quiet.cpu_s;
    out["quiet_server_cpu_cores"] = quiet.cpu_s / quiet.wall_s;
  }
  if (!storm.measured()) return out;
  out["server_cpu_s"] = storm.cpu_s;
  out["server_cpu_cores"] = storm.cpu_s / storm.wall_s;
  if (refusals <= 0) return out;
  const auto n = static_cast<double>(refusals);
  out["server_cpu_per_refusal_us"] = storm.cpu_s / n * 1e6;
  if (quiet.measured()) {
    const double extra = storm.cpu_s - quiet.cpu_s / quiet.wall_s * storm.wall_s;
    out["server_cpu_per_refusal_marginal_us"] = std::max(0.0, extra) / n * 1e6;
  }
  return out;
}

CpuWindow cpu_from_snapshots(const std::vector<ServerSnapshot>& samples) {
  const ServerSnapshot* first = nullptr;
  const ServerSnapshot* last = nullptr;
  for (const auto& s : samples) {
    if (!std::isfinite(s.cpu_seconds_total)) continue;
    if (first == nullptr) first = &s;
    last = &s;
  }
  if (first == nullptr || last == first) return {};
  return {last->cpu_seconds_total - first->cpu_seconds_total, last->t_s - first->t_s};
}

std::string format_overload(const nlohmann::json& r) {
  if (!r.contains("goodput_tokens_per_s")) return {};
  std::ostringstream os;
  char line[160];
  auto row = [&](const char* name, const char* key, const char* fmt = "%-42s %12.2f\n") {
    if (!r.contains(key) || !r[key].is_number()) return;
    std::snprintf(line, sizeof line, fmt, name, r[key].get<double>());
    os << line;
  };
  const char* kCount = "%-42s %12.0f\n";
  os << "---------------Overload (retry storm)---------------\n";
  row("Goodput (tok/s, completed requests):", "goodput_tokens_per_s");
  row("Quiet capacity (tok/s):", "quiet_capacity_tokens_per_s");
  row("Goodput / quiet capacity:", "goodput_ratio", "%-42s %12.3f\n");
  row("Tokens sent to clients that left:", "left_output_tokens", kCount);
  // Which requests completed: a different mix of prompt and output lengths (n included)
  // changes tokens/s at the same efficiency, so the two phases compare only when these agree.
  row("Completed requests:", "completed_requests", kCount);
  row("  mean prompt tokens:", "completed_mean_input_tokens", "%-42s %12.0f\n");
  row("  mean output tokens (all choices):", "completed_mean_output_tokens", "%-42s %12.1f\n");
  row("Quiet phase: completed requests:", "quiet_completed_requests", kCount);
  row("  mean prompt tokens:", "quiet_completed_mean_input_tokens", "%-42s %12.0f\n");
  row("  mean output tokens (all choices):", "quiet_completed_mean_output_tokens",
      "%-42s %12.1f\n");
  row("Workload: mean output tokens asked:", "workload_mean_output_tokens", "%-42s %12.1f\n");
  row("Admitted requests:", "admitted", kCount);
  row("P50 admitted wait (ms):", "p50_admitted_wait_ms");
  row("P99 admitted wait (ms):", "p99_admitted_wait_ms");
  row("Max admitted wait (ms):", "max_admitted_wait_ms");
  row("Answer bound (s):", "answer_bound_s", "%-42s %12.1f\n");
  row("Requests unanswered past the bound:", "unanswered_past_bound", kCount);
  row("Admitted, then the client left:", "admitted_then_left", kCount);
  row("Aborted by the client (on purpose):", "requests_aborted", kCount);
  row("Timed out at the client:", "requests_timed_out", kCount);
  row("Impatient requests (ignore Retry-After):", "impatient_requests", kCount);
  row("Refusals (429/503 attempts):", "refusals", kCount);
  row("Refusals/s:", "refusals_per_s");
  row("Refusals without Retry-After:", "refusals_without_retry_after", kCount);
  row("Server CPU during the run (s):", "server_cpu_s");
  row("Server CPU (cores busy):", "server_cpu_cores");
  row("Server CPU in the quiet phase (cores):", "quiet_server_cpu_cores");
  row("Server CPU per refusal, all (us):", "server_cpu_per_refusal_us", "%-42s %12.1f\n");
  row("Server CPU per refusal, marginal (us):", "server_cpu_per_refusal_marginal_us",
      "%-42s %12.1f\n");
  return os.str();
}

double parse_proc_stat_cpu_s(std::string_view stat, long ticks_per_s) {
  const auto close = stat.rfind(')');
  if (close == std::string_view::npos || ticks_per_s <= 0) return NAN;
  // After "pid (comm)": field 3 (state) is the first; utime and stime are fields 14 and 15.
  std::istringstream in{std::string(stat.substr(close + 1))};
  std::string field;
  double utime = NAN, stime = NAN;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i < 14) continue;
    char* end = nullptr;
    const double v = std::strtod(field.c_str(), &end);
    if (end == field.c_str() || *end != '\0') return NAN;
    (i == 14 ? utime : stime) = v;
  }
  if (!std::isfinite(utime) || !std::isfinite(stime)) return NAN;
  return (utime + stime) / static_cast<double>(ticks_per_s);
}

double read_process_cpu_s(int pid) {
  if (pid <= 0) return NAN;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return NAN;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_proc_stat_cpu_s(text, sysconf(_SC_CLK_TCK));
}

}  // namespace kvw::loadgen
