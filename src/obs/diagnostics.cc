#include "obs/diagnostics.h"

#include <chrono>
#include <filesystem>
#include <fstream>

#include "core/log.h"

namespace kvw::obs {

const char* to_string(DiagTrigger t) {
  switch (t) {
    case DiagTrigger::kPreemptionStorm:
      return "preemption_storm";
    case DiagTrigger::kShedding:
      return "shedding";
    case DiagTrigger::kNumerics:
      return "numerics";
    case DiagTrigger::kKvUsageHigh:
      return "kv_usage_high";
  }
  return "unknown";
}

DiagnosticsWriter::DiagnosticsWriter(DiagnosticsConfig cfg, Clock clock)
    : cfg_(std::move(cfg)), clock_(std::move(clock)) {}

void DiagnosticsWriter::record_preemptions(uint32_t n) {
  if (n == 0) return;
  const double now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  preemptions_.emplace_back(now, n);
}

void DiagnosticsWriter::record_shed() {
  std::lock_guard<std::mutex> lock(mu_);
  ++sheds_;
}

void DiagnosticsWriter::record_numerics_events(uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  numerics_ += n;
}

std::vector<std::pair<DiagTrigger, std::string>> DiagnosticsWriter::firing_locked(double now,
                                                                                  double kv_usage) {
  while (!preemptions_.empty() && preemptions_.front().first < now - cfg_.window_s)
    preemptions_.pop_front();
  uint64_t in_window = 0;
  for (const auto& p : preemptions_) in_window += p.second;
  std::vector<std::pair<DiagTrigger, std::string>> out;
  if (in_window > cfg_.preemption_storm_count)
    out.emplace_back(DiagTrigger::kPreemptionStorm, std::to_string(in_window) + " preemptions in " +
                                                        std::to_string(int(cfg_.window_s)) + " s");
  if (sheds_ > 0)
    out.emplace_back(DiagTrigger::kShedding, std::to_string(sheds_) + " requests shed");
  if (numerics_ > 0)
    out.emplace_back(DiagTrigger::kNumerics, std::to_string(numerics_) + " NaN/Inf events");
  if (kv_usage > cfg_.kv_usage_threshold)
    out.emplace_back(DiagTrigger::kKvUsageHigh, "KV usage " + std::to_string(kv_usage));
  return out;
}

std::vector<DiagTrigger> DiagnosticsWriter::firing(double kv_usage) {
  const double now = clock_();
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DiagTrigger> out;
  for (auto& [t, reason] : firing_locked(now, kv_usage)) out.push_back(t);
  return out;
}

bool DiagnosticsWriter::at_cap() const {
  std::lock_guard<std::mutex> lock(mu_);
  return files_written_ >= cfg_.max_files || bytes_written_ >= cfg_.max_bytes;
}

bool DiagnosticsWriter::reserve(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (files_written_ >= cfg_.max_files || bytes_written_ + bytes > cfg_.max_bytes) return false;
  ++files_written_;
  bytes_written_ += bytes;
  return true;
}

void DiagnosticsWriter::skip(uint64_t n) {
  uint64_t before = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    before = skipped_;
    skipped_ += n;
  }
  // Once, not per skipped dump: the log must not become the flood.
  if (before == 0) {
    LOG(WARN, obs) << "diagnostics: cap reached (--diagnostics-max-files " << cfg_.max_files
                   << ", --diagnostics-max-bytes " << cfg_.max_bytes
                   << "); further dumps are skipped";
  }
}

uint64_t DiagnosticsWriter::num_files_written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return files_written_;
}

uint64_t DiagnosticsWriter::num_bytes_written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_written_;
}

uint64_t DiagnosticsWriter::num_skipped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return skipped_;
}

std::vector<std::string> DiagnosticsWriter::check(double kv_usage,
                                                  const std::function<nlohmann::json()>& collect) {
  const double now = clock_();
  std::vector<std::pair<DiagTrigger, std::string>> due;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& f : firing_locked(now, kv_usage)) {
      double& last = last_written_[int(f.first)];
      if (now - last < cfg_.min_interval_s) continue;
      last = now;
      due.push_back(std::move(f));
    }
    // Events are consumed by the check that saw them, whether written or rate limited.
    sheds_ = 0;
    numerics_ = 0;
  }
  std::vector<std::string> paths;
  if (cfg_.dir.empty() || due.empty()) return paths;
  if (at_cap()) {
    skip(due.size());
    return paths;
  }
  std::error_code ec;
  std::filesystem::create_directories(cfg_.dir, ec);
  const nlohmann::json body = collect ? collect() : nlohmann::json::object();
  const auto unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  for (const auto& [trigger, reason] : due) {
    const std::string path = cfg_.dir + "/kvwarden-diag-" + std::to_string(unix_ms) + "-" +
                             std::to_string(seq_++) + "-" + to_string(trigger) + ".json";
    nlohmann::json j = body;
    j["trigger"] = to_string(trigger);
    j["reason"] = reason;
    j["time_s"] = now;
    const std::string text = j.dump(1) + "\n";
    if (!reserve(text.size())) {
      skip(1);
      continue;
    }
    std::ofstream f(path);
    f << text;
    f.close();
    if (!f) {
      LOG(ERROR, obs) << "diagnostics: cannot write " << path << " (" << reason << ")";
      continue;
    }
    LOG(WARN, obs) << "diagnostics: " << to_string(trigger) << " (" << reason << "), wrote "
                   << path;
    paths.push_back(path);
  }
  return paths;
}

}  // namespace kvw::obs
