// loadgen/stats.cc: summary maths (see stats.h).
#include "loadgen/stats.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace kvw::loadgen {

double RequestResult::tpot_ms() const {
  if (ttft_ms < 0) return -1;
  if (output_tokens <= 1) return 0;
  return (e2el_ms - ttft_ms) / (output_tokens - 1);
}

Result<std::vector<Slo>> parse_slos(const std::vector<std::string>& specs) {
  std::vector<Slo> slos;
  for (const auto& spec : specs) {
    const auto colon = spec.find(':');
    if (colon == std::string::npos) return Error{"--goodput '" + spec + "': expected NAME:MS"};
    Slo slo{spec.substr(0, colon), 0};
    if (slo.metric != "ttft" && slo.metric != "tpot" && slo.metric != "e2el")
      return Error{"--goodput '" + spec + "': metric must be ttft, tpot or e2el"};
    try {
      slo.limit_ms = std::stod(spec.substr(colon + 1));
    } catch (...) {
      return Error{"--goodput '" + spec + "': '" + spec.substr(colon + 1) + "' is not a number"};
    }
    if (!(slo.limit_ms >= 0)) return Error{"--goodput '" + spec + "': limit must be >= 0"};
    slos.push_back(slo);
  }
  return slos;
}

bool meets_slos(const RequestResult& r, const std::vector<Slo>& slos) {
  for (const auto& slo : slos) {
    double v = slo.metric == "ttft" ? r.ttft_ms : slo.metric == "tpot" ? r.tpot_ms() : r.e2el_ms;
    if (slo.metric != "e2el" && v < 0) v = r.e2el_ms;  // not streamed: the whole wait counts
    if (v > slo.limit_ms) return false;
  }
  return true;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double pos = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (pos - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

double mean_of(const std::vector<double>& values) {
  if (values.empty()) return 0;
  double sum = 0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

double std_of(const std::vector<double>& values) {
  if (values.empty()) return 0;
  const double m = mean_of(values);
  double ss = 0;
  for (double v : values) ss += (v - m) * (v - m);
  return std::sqrt(ss / static_cast<double>(values.size()));
}

std::string percentile_name(double p) {
  if (p == std::floor(p)) return std::to_string(static_cast<long long>(p));
  std::ostringstream os;
  os << p;
  return os.str();
}

namespace {
void add_metric(nlohmann::json& out, const std::string& name, const std::vector<double>& v,
                const SummaryOptions& options) {
  out["mean_" + name + "_ms"] = mean_of(v);
  out["median_" + name + "_ms"] = percentile(v, 50);
  out["std_" + name + "_ms"] = std_of(v);
  const auto& m = options.percentile_metrics;
  if (std::find(m.begin(), m.end(), name) == m.end()) return;
  for (double p : options.percentiles) {
    std::string key = "p";  // built by append: GCC 12 warns falsely on "p" + std::string&&
    key += percentile_name(p);
    key += "_" + name + "_ms";
    out[key] = percentile(v, p);
  }
}

// A server fault: 5xx except 503, which kvwarden (and vLLM) use to refuse cleanly.
bool is_server_error(int status) {
  return status >= 500 && status != 503;
}

std::string error_key(const RequestResult& r) {
  if (r.status != 0) return std::to_string(r.status);
  const auto colon = r.error.find(':');
  return colon == std::string::npos ? r.error : r.error.substr(0, colon);
}
}  // namespace

nlohmann::json summarize(const std::vector<RequestResult>& results, double duration_s,
                         const SummaryOptions& options) {
  std::vector<double> ttft, tpot, itl, e2el, retry_wait;
  int64_t completed = 0, failed = 0, good = 0, refused = 0, errors_5xx = 0, measured = 0;
  int64_t in_tokens = 0, out_tokens = 0, retries = 0, refused_after_retries = 0;
  std::map<std::string, int64_t> errors, retries_by_status;
  for (const auto& r : results) {
    if (r.warmup) continue;
    ++measured;
    const bool is_refused = !r.ok() && (r.status == 429 || r.status == 503);
    bool saw_5xx = is_server_error(r.status);
    retries += r.num_retries;
    for (int s : r.retried_statuses) {
      ++retries_by_status[s == 0 ? "no_response" : std::to_string(s)];
      saw_5xx |= is_server_error(s);
    }
    if (r.num_retries > 0) retry_wait.push_back(r.retry_wait_ms);
    if (saw_5xx) ++errors_5xx;
    if (!r.ok()) {
      ++failed;
      ++errors[error_key(r)];
      if (is_refused) ++refused;
      if (is_refused && r.num_retries > 0) ++refused_after_retries;
      continue;
    }
    ++completed;
    in_tokens += r.input_tokens;
    out_tokens += r.output_tokens;
    e2el.push_back(r.e2el_ms);
    if (r.streamed && r.ttft_ms >= 0) {
      ttft.push_back(r.ttft_ms);
      tpot.push_back(r.tpot_ms());
      itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
    }
    if (meets_slos(r, options.slos)) ++good;
  }
  const double d = duration_s > 0 ? duration_s : 1e-9;
  nlohmann::json out;
  out["duration"] = duration_s;
  out["num_requests"] = measured;
  out["completed"] = completed;
  out["failed"] = failed;
  out["total_input_tokens"] = in_tokens;
  out["total_output_tokens"] = out_tokens;
  out["request_throughput"] = completed / d;
  if (!options.slos.empty()) out["request_goodput"] = good / d;
  out["output_throughput"] = out_tokens / d;
  out["total_token_throughput"] = (in_tokens + out_tokens) / d;
  add_metric(out, "ttft", ttft, options);
  add_metric(out, "tpot", tpot, options);
  add_metric(out, "itl", itl, options);
  add_metric(out, "e2el", e2el, options);
  out["errors_by_status"] = errors;
  out["refused"] = refused;
  out["errors_5xx"] = errors_5xx;
  const auto ratio = [measured](int64_t n) {
    return measured ? static_cast<double>(n) / static_cast<double>(measured) : 1.0;
  };
  out["completed_ratio"] = ratio(completed);
  out["completed_or_refused_ratio"] = ratio(completed + refused);
  out["retries"] = retries;
  out["requests_retried"] = static_cast<int64_t>(retry_wait.size());
  out["refused_after_retries"] = refused_after_retries;
  out["retries_by_status"] = retries_by_status;
  out["mean_retry_wait_ms"] = mean_of(retry_wait);
  return out;
}

}  // namespace kvw::loadgen
