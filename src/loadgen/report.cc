// loadgen/report.cc: JSON report assembly, the terminal table and the HTML page.
#include "loadgen/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace kvw::loadgen {

namespace {
nlohmann::json num_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

// Per-second series of the client side, bucketed by completion time (tokens by arrival time).
nlohmann::json client_series(const RunOutput& run) {
  double end = 0;
  for (const auto& r : run.results) end = std::max(end, r.start_s + r.e2el_ms / 1e3);
  const size_t n =
      std::max<size_t>(static_cast<size_t>(std::ceil(end)), run.tokens_per_second.size());
  std::vector<std::vector<double>> ttft(n), e2el(n), itl(n);
  std::vector<int64_t> completed(n, 0), errors(n, 0);
  for (const auto& r : run.results) {
    const auto s = std::min(n - 1, static_cast<size_t>(r.start_s + r.e2el_ms / 1e3));
    if (!r.ok()) {
      ++errors[s];
      continue;
    }
    ++completed[s];
    e2el[s].push_back(r.e2el_ms);
    if (r.ttft_ms >= 0) ttft[s].push_back(r.ttft_ms);
    itl[s].insert(itl[s].end(), r.itl_ms.begin(), r.itl_ms.end());
  }
  nlohmann::json j;
  auto& t = j["t"] = nlohmann::json::array();
  for (size_t i = 0; i < n; ++i) t.push_back(static_cast<double>(i) + 1.0);
  j["completed_per_s"] = completed;
  j["errors_per_s"] = errors;
  std::vector<int64_t> tokens(n, 0);
  std::copy(run.tokens_per_second.begin(), run.tokens_per_second.end(), tokens.begin());
  j["output_tokens_per_s"] = tokens;
  auto pct = [&](const std::vector<std::vector<double>>& v, double p) {
    auto a = nlohmann::json::array();
    for (const auto& b : v)
      a.push_back(b.empty() ? nlohmann::json() : nlohmann::json(percentile(b, p)));
    return a;
  };
  j["ttft_p50_ms"] = pct(ttft, 50);
  j["ttft_p99_ms"] = pct(ttft, 99);
  j["itl_p50_ms"] = pct(itl, 50);
  j["itl_p99_ms"] = pct(itl, 99);
  j["e2el_p50_ms"] = pct(e2el, 50);
  j["e2el_p99_ms"] = pct(e2el, 99);
  return j;
}

nlohmann::json server_series(const std::vector<ServerSnapshot>& s) {
  nlohmann::json j;
  for (const char* k : {"t", "kv_usage_ratio", "kv_fragmentation_ratio", "num_waiting",
                        "num_running", "preemptions_total", "resident_memory_bytes"})
    j[k] = nlohmann::json::array();
  for (const auto& x : s) {
    j["t"].push_back(x.t_s);
    j["kv_usage_ratio"].push_back(num_or_null(x.kv_usage_ratio));
    j["kv_fragmentation_ratio"].push_back(num_or_null(x.kv_fragmentation_ratio));
    j["num_waiting"].push_back(num_or_null(x.num_waiting));
    j["num_running"].push_back(num_or_null(x.num_running));
    j["preemptions_total"].push_back(num_or_null(x.preemptions_total));
    j["resident_memory_bytes"].push_back(num_or_null(x.resident_memory_bytes));
  }
  return j;
}

double max_of(const std::vector<ServerSnapshot>& s, double ServerSnapshot::*field) {
  double m = NAN;
  for (const auto& x : s)
    if (std::isfinite(x.*field)) m = std::isnan(m) ? x.*field : std::max(m, x.*field);
  return m;
}
}  // namespace

double rss_growth_mb_per_min(const std::vector<ServerSnapshot>& samples, double from_s) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& s : samples) {
    if (s.t_s < from_s || !std::isfinite(s.resident_memory_bytes)) continue;
    const double x = s.t_s / 60.0, y = s.resident_memory_bytes / 1e6;
    n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double denom = n * sxx - sx * sx;
  if (n < 2 || denom <= 0) return NAN;
  return (n * sxy - sx * sy) / denom;
}

nlohmann::json build_report(const RunOutput& run, const SummaryOptions& options,
                            const nlohmann::json& context, double warmup_s) {
  nlohmann::json r = summarize(run.results, run.measured_duration_s, options);
  for (auto& [k, v] : context.items()) r[k] = v;
  r["wall_s"] = run.wall_s;
  r["connections_opened"] = run.connections_opened;
  r["peak_in_flight"] = run.peak_in_flight;
  r["drain_timed_out"] = run.drain_timed_out;
  r["server_metrics_available"] = run.metrics_available;
  const auto& s = run.server;
  if (run.metrics_available && !s.empty()) {
    r["max_server_kv_usage_ratio"] = num_or_null(max_of(s, &ServerSnapshot::kv_usage_ratio));
    r["max_server_kv_fragmentation_ratio"] =
        num_or_null(max_of(s, &ServerSnapshot::kv_fragmentation_ratio));
    r["max_server_num_waiting"] = num_or_null(max_of(s, &ServerSnapshot::num_waiting));
    const double p0 = s.front().preemptions_total, p1 = s.back().preemptions_total;
    r["server_preemptions"] = num_or_null(p1 - p0);
    r["server_rss_start_bytes"] = num_or_null(s.front().resident_memory_bytes);
    r["server_rss_end_bytes"] = num_or_null(s.back().resident_memory_bytes);
    r["server_rss_growth_mb_per_min"] = num_or_null(rss_growth_mb_per_min(s, warmup_s));
  }
  int64_t oom = 0;
  for (const auto& x : run.results) {
    std::string b = x.error_body;
    for (char& c : b) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (b.find("out of memory") != std::string::npos || b.find("oom") != std::string::npos) ++oom;
  }
  r["oom_errors"] = oom;
  r["timeseries"] = client_series(run);
  r["server_timeseries"] = server_series(s);
  return r;
}

std::string format_summary(const nlohmann::json& r, const SummaryOptions& options) {
  std::ostringstream os;
  char line[160];
  auto row = [&](const char* name, double v, const char* fmt = "%-42s %12.2f\n") {
    std::snprintf(line, sizeof line, fmt, name, v);
    os << line;
  };
  os << "============ Serving Benchmark Result ============\n";
  row("Successful requests:", r.value("completed", 0.0), "%-42s %12.0f\n");
  row("Failed requests:", r.value("failed", 0.0), "%-42s %12.0f\n");
  row("Benchmark duration (s):", r.value("duration", 0.0));
  row("Total input tokens:", r.value("total_input_tokens", 0.0), "%-42s %12.0f\n");
  row("Total generated tokens:", r.value("total_output_tokens", 0.0), "%-42s %12.0f\n");
  row("Request throughput (req/s):", r.value("request_throughput", 0.0));
  if (r.contains("request_goodput"))
    row("Request goodput (req/s):", r["request_goodput"].get<double>());
  row("Output token throughput (tok/s):", r.value("output_throughput", 0.0));
  row("Total token throughput (tok/s):", r.value("total_token_throughput", 0.0));
  const std::pair<const char*, const char*> metrics[] = {
      {"ttft", "Time to First Token"},
      {"tpot", "Time per Output Token (excl. 1st token)"},
      {"itl", "Inter-token Latency"},
      {"e2el", "End-to-end Latency"}};
  for (const auto& [key, title] : metrics) {
    std::snprintf(line, sizeof line, "%s\n",
                  ("---------------" + std::string(title) + "---------------").c_str());
    os << line;
    const std::string k(key);
    const std::string suffix = " " + k + " (ms):";
    row(std::string("Mean").append(suffix).c_str(), r.value("mean_" + k + "_ms", 0.0));
    row(std::string("Median").append(suffix).c_str(), r.value("median_" + k + "_ms", 0.0));
    const auto& pm = options.percentile_metrics;
    if (std::find(pm.begin(), pm.end(), k) == pm.end()) continue;
    for (double p : options.percentiles) {
      const std::string name = percentile_name(p);
      row(std::string("P").append(name).append(suffix).c_str(),
          r.value("p" + name + "_" + k + "_ms", 0.0));
    }
  }
  os << "---------------Retries (SDK-style)---------------\n";
  row("Max retries per request:", r.value("max_retries", 0.0), "%-42s %12.0f\n");
  row("Retry attempts:", r.value("retries", 0.0), "%-42s %12.0f\n");
  row("Requests retried:", r.value("requests_retried", 0.0), "%-42s %12.0f\n");
  if (r.contains("retries_by_status"))
    for (auto& [k, v] : r["retries_by_status"].items())
      row(("  retried after " + k + ":").c_str(), v.get<double>(), "%-42s %12.0f\n");
  row("Refused after retries (429/503):", r.value("refused_after_retries", 0.0), "%-42s %12.0f\n");
  row("Mean retry wait of retried (ms):", r.value("mean_retry_wait_ms", 0.0));
  row("Completed ratio:", r.value("completed_ratio", 0.0), "%-42s %12.4f\n");
  row("Completed or refused ratio:", r.value("completed_or_refused_ratio", 0.0), "%-42s %12.4f\n");
  if (r.contains("errors_by_status") && !r["errors_by_status"].empty()) {
    os << "---------------Errors (final attempt)---------------\n";
    for (auto& [k, v] : r["errors_by_status"].items()) {
      std::snprintf(line, sizeof line, "%-42s %12lld\n", k.c_str(),
                    static_cast<long long>(v.get<int64_t>()));
      os << line;
    }
  }
  if (r.value("server_metrics_available", false)) {
    os << "---------------Server (/metrics)---------------\n";
    for (const char* k :
         {"max_server_kv_usage_ratio", "max_server_kv_fragmentation_ratio",
          "max_server_num_waiting", "server_preemptions", "server_rss_growth_mb_per_min"}) {
      if (r.contains(k) && r[k].is_number()) row(k, r[k].get<double>(), "%-42s %12.3f\n");
    }
  } else {
    os << "server /metrics: not available (server-side charts skipped)\n";
  }
  os << "==================================================\n";
  return os.str();
}
}  // namespace kvw::loadgen
