// loadgen/prom.cc: Prometheus text format 0.0.4 sample lines: name{k="v",...} value [timestamp].
#include "loadgen/prom.h"

#include <cstdlib>

namespace kvw::loadgen {

namespace {
// Parses `k="v",...}` starting after '{'; returns the position after '}' or npos.
size_t parse_labels(std::string_view line, size_t pos, std::map<std::string, std::string>& out) {
  while (pos < line.size()) {
    while (pos < line.size() && (line[pos] == ' ' || line[pos] == ',')) ++pos;
    if (pos < line.size() && line[pos] == '}') return pos + 1;
    const size_t eq = line.find('=', pos);
    if (eq == std::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"')
      return std::string_view::npos;
    std::string key(line.substr(pos, eq - pos));
    std::string value;
    size_t i = eq + 2;
    for (; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) {
        ++i;
        value.push_back(line[i] == 'n' ? '\n' : line[i]);
      } else {
        value.push_back(line[i]);
      }
    }
    if (i >= line.size()) return std::string_view::npos;
    out[std::move(key)] = std::move(value);
    pos = i + 1;
  }
  return std::string_view::npos;
}

double sum_of(const std::vector<PromSample>& samples, std::string_view name) {
  double total = NAN;
  for (const auto& s : samples) {
    if (s.name != name) continue;
    total = std::isnan(total) ? s.value : total + s.value;
  }
  return total;
}

double labelled(const std::vector<PromSample>& samples, std::string_view name,
                const std::string& key, const std::string& value) {
  for (const auto& s : samples) {
    if (s.name != name) continue;
    auto it = s.labels.find(key);
    if (it != s.labels.end() && it->second == value) return s.value;
  }
  return NAN;
}

double first_of(double a, double b) {
  return std::isnan(a) ? b : a;
}
}  // namespace

std::vector<PromSample> parse_prometheus_text(std::string_view text) {
  std::vector<PromSample> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    PromSample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = std::string(line.substr(0, i));
    if (i < line.size() && line[i] == '{') {
      i = parse_labels(line, i + 1, s.labels);
      if (i == std::string_view::npos) continue;
    }
    while (i < line.size() && line[i] == ' ') ++i;
    if (i >= line.size() || s.name.empty()) continue;
    std::string value(line.substr(i, line.find(' ', i) - i));
    char* end = nullptr;
    s.value = std::strtod(value.c_str(), &end);  // also reads NaN, +Inf, -Inf
    if (end == value.c_str()) continue;
    out.push_back(std::move(s));
  }
  return out;
}

ServerSnapshot snapshot_from_samples(const std::vector<PromSample>& samples, double t_s) {
  ServerSnapshot s;
  s.t_s = t_s;
  s.kv_usage_ratio = first_of(sum_of(samples, "kvwarden_kv_usage_ratio"),
                              first_of(sum_of(samples, "vllm:kv_cache_usage_perc"),
                                       sum_of(samples, "vllm:gpu_cache_usage_perc")));
  s.kv_fragmentation_ratio = sum_of(samples, "kvwarden_kv_fragmentation_ratio");
  s.num_waiting = first_of(labelled(samples, "kvwarden_requests", "state", "waiting"),
                           sum_of(samples, "vllm:num_requests_waiting"));
  s.num_running = first_of(labelled(samples, "kvwarden_requests", "state", "running"),
                           sum_of(samples, "vllm:num_requests_running"));
  s.preemptions_total = first_of(sum_of(samples, "kvwarden_preemptions_total"),
                                 sum_of(samples, "vllm:num_preemptions_total"));
  s.resident_memory_bytes = first_of(sum_of(samples, "kvwarden_process_resident_memory_bytes"),
                                     sum_of(samples, "process_resident_memory_bytes"));
  s.cpu_seconds_total = first_of(sum_of(samples, "kvwarden_process_cpu_seconds_total"),
                                 sum_of(samples, "process_cpu_seconds_total"));
  return s;
}

}  // namespace kvw::loadgen
