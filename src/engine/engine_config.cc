#include "engine/engine_config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

namespace kvw {
namespace {

std::string read_small_file(const char* path) {
  std::ifstream f(path);
  if (!f) return {};
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace((unsigned char)s.front())) s.remove_prefix(1);
  while (!s.empty() && std::isspace((unsigned char)s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

Status EngineConfig::validate() const {
  if (model_path.empty()) return Error{"--model: a GGUF path is required"};
  if (n_threads < 0) return Error{"--threads must be >= 0"};
  if (block_size < 1) return Error{"--block-size must be >= 1"};
  if (!kv_dtype_on_cpu(kv_dtype)) {
    return Error{std::string("--kv-cache-dtype ") + kv_dtype_name(kv_dtype) +
                 ": the CPU engine has no such KV cache (use f16, bf16, f32 or int8)"};
  }
  if (swap_bytes > 0 && swap_path.empty()) {
    return Error{"--swap-space needs a swap file path (--swap-path)"};
  }
  if (request_queue_capacity < 1) return Error{"request queue capacity must be >= 1"};
  if (!(defrag_threshold >= 0 && defrag_threshold <= 1)) {
    return Error{"--defrag-threshold must be in [0, 1]"};
  }
  if (defrag_max_moves < 1) return Error{"--defrag-max-moves must be >= 1"};
  if (kv_stats_interval_ms < 0) return Error{"kv_stats_interval_ms must be >= 0"};
  return sched.validate();
}

Result<uint64_t> parse_memory_budget(std::string_view text, uint64_t machine_limit_bytes) {
  const std::string s(trim(text));
  auto bad = [&](const std::string& why) { return Error{"--memory-budget '" + s + "': " + why}; };
  if (s.empty()) return bad("empty");
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc()) return bad("not a number");
  const size_t used = (size_t)(end - s.data());
  if (!std::isfinite(v) || v <= 0) return bad("must be > 0");
  std::string suffix(trim(std::string_view(s).substr(used)));
  std::transform(suffix.begin(), suffix.end(), suffix.begin(),
                 [](unsigned char c) { return (char)std::tolower(c); });
  if (suffix == "%") {
    if (v > 100) return bad("a percentage must be <= 100");
    if (machine_limit_bytes == 0) return bad("machine memory unknown; give bytes");
    return (uint64_t)((double)machine_limit_bytes * v / 100.0);
  }
  double mult = 1;
  if (suffix.empty() || suffix == "b") {
    mult = 1;
  } else if (suffix == "k" || suffix == "kb" || suffix == "kib") {
    mult = 1024.0;
  } else if (suffix == "m" || suffix == "mb" || suffix == "mib") {
    mult = 1024.0 * 1024;
  } else if (suffix == "g" || suffix == "gb" || suffix == "gib") {
    mult = 1024.0 * 1024 * 1024;
  } else if (suffix == "t" || suffix == "tb" || suffix == "tib") {
    mult = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return bad("unknown unit '" + suffix + "' (use B, K, M, G, T or %)");
  }
  return (uint64_t)(v * mult);
}

namespace {
uint64_t meminfo_field(std::string_view meminfo, std::string_view field) {
  std::istringstream is{std::string(meminfo)};
  std::string key, unit;
  uint64_t kb = 0;
  while (is >> key >> kb >> unit) {
    if (key == field) return kb * 1024;
  }
  return 0;
}
}  // namespace

uint64_t parse_meminfo_total(std::string_view meminfo) {
  return meminfo_field(meminfo, "MemTotal:");
}

uint64_t parse_meminfo_available(std::string_view meminfo) {
  return meminfo_field(meminfo, "MemAvailable:");
}

uint64_t parse_cgroup_memory_max(std::string_view text) {
  const std::string_view t = trim(text);
  if (t.empty() || !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return 0;  // "max" = no limit
  }
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  return ec == std::errc() ? v : 0;
}

Result<uint64_t> parse_size_or_off(std::string_view flag, std::string_view text,
                                   uint64_t machine_limit_bytes) {
  const std::string s(trim(text));
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc() && v == 0) return uint64_t{0};
  auto r = parse_memory_budget(s, machine_limit_bytes);
  if (r.ok()) return r;
  const std::string_view budget = "--memory-budget";
  std::string msg = r.message();
  if (msg.starts_with(budget)) msg = std::string(flag) + msg.substr(budget.size());
  return Error{msg};
}

uint64_t machine_memory_limit_bytes() {
  const uint64_t total = parse_meminfo_total(read_small_file("/proc/meminfo"));
  const uint64_t cgroup = parse_cgroup_memory_max(read_small_file("/sys/fs/cgroup/memory.max"));
  if (total == 0) return cgroup;
  if (cgroup == 0) return total;
  return std::min(total, cgroup);
}

uint64_t available_memory_bytes() {
  const uint64_t avail = parse_meminfo_available(read_small_file("/proc/meminfo"));
  const uint64_t max = parse_cgroup_memory_max(read_small_file("/sys/fs/cgroup/memory.max"));
  if (max == 0) return avail;
  const uint64_t used = parse_cgroup_memory_max(read_small_file("/sys/fs/cgroup/memory.current"));
  const uint64_t room = max > used ? max - used : 0;
  return avail == 0 ? room : std::min(avail, room);
}

}  // namespace kvw
