#include "obs/obs_context.h"

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "core/thread_name.h"
#include "obs/debug_json.h"
#include "obs/memory_snapshot.h"

namespace kvw::obs {

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Owners holding the most blocks (a dump should name the request eating the pool).
nlohmann::json top_owners(const KvSnapshot& kv, size_t n) {
  std::unordered_map<uint64_t, uint32_t> count;
  for (const BlockRecord& r : kv.blocks)
    if (r.owner) ++count[index_of(*r.owner)];
  std::vector<std::pair<uint64_t, uint32_t>> v(count.begin(), count.end());
  std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.second > b.second; });
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < v.size() && i < n; ++i)
    out.push_back({{"request_id", v[i].first}, {"blocks", v[i].second}});
  return out;
}

}  // namespace

ObservabilityContext::ObservabilityContext(ObsConfig cfg)
    : cfg_(std::move(cfg)),
      metrics_(cfg_.metrics),
      trace_(cfg_.trace_capacity),
      diag_(cfg_.diagnostics, steady_seconds) {}

ObservabilityContext::~ObservabilityContext() {
  stop_watcher();
}

void ObservabilityContext::attach(ObsProviders p) {
  std::lock_guard<std::mutex> lock(mu_);
  providers_ = std::move(p);
}

ObsProviders ObservabilityContext::providers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return providers_;
}

EngineStats ObservabilityContext::read_stats() const {
  const ObsProviders p = providers();
  return p.stats ? p.stats() : EngineStats{};
}

std::function<void(const StepObservation&)> ObservabilityContext::step_observer() {
  return [this](const StepObservation& s) {
    metrics_.observe_step(s);
    trace_.record(s);
    diag_.record_preemptions(uint32_t(s.preempted_swap.size() + s.preempted_recompute.size()));
  };
}

void ObservabilityContext::observe_shed(std::string_view reason, bool server_fault) {
  metrics_.observe_shed(reason);
  if (server_fault) diag_.record_shed();
}

std::vector<std::string> ObservabilityContext::check_diagnostics() {
  const EngineStats s = read_stats();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (s.num_numerics_errors > last_numerics_)
      diag_.record_numerics_events(s.num_numerics_errors - last_numerics_);
    last_numerics_ = std::max(last_numerics_, s.num_numerics_errors);
  }
  return diag_.check(s.kv.block_usage(), [this] { return diagnostics_body(); });
}

void ObservabilityContext::start_watcher() {
  if (cfg_.diagnostics.dir.empty() || watcher_.joinable()) return;
  watcher_stop_ = false;
  watcher_ = std::thread([this] {
    set_thread_name("kvw-diag-watch");
    std::unique_lock<std::mutex> lock(watcher_mu_);
    while (!watcher_stop_) {
      watcher_cv_.wait_for(lock, std::chrono::milliseconds(cfg_.watcher_period_ms));
      if (watcher_stop_) break;
      lock.unlock();
      check_diagnostics();
      lock.lock();
    }
  });
}

void ObservabilityContext::stop_watcher() {
  {
    std::lock_guard<std::mutex> lock(watcher_mu_);
    watcher_stop_ = true;
  }
  watcher_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

std::string ObservabilityContext::metrics_text() {
  const ObsProviders p = providers();
  if (p.stats) metrics_.update_engine(p.stats());
  if (p.transport) metrics_.update_transport(p.transport());
  if (p.kv_events) metrics_.update_kv_events(p.kv_events());
  if (p.grammar_cache) metrics_.update_grammar_cache(p.grammar_cache());
  if (p.budget) metrics_.update_budget(p.budget());
  if (p.weights_huge_page_bytes) metrics_.update_weights_huge_pages(p.weights_huge_page_bytes());
  metrics_.update_process();
  return metrics_.render();
}

std::string ObservabilityContext::kv_body() {
  const ObsProviders p = providers();
  const std::shared_ptr<const KvSnapshot> kv = p.kv_snapshot ? p.kv_snapshot() : nullptr;
  if (!p.budget) return kv_json(kv.get(), nullptr);
  const planner::BudgetTable b = p.budget();
  return kv_json(kv.get(), &b);
}

std::string ObservabilityContext::stats_body() {
  const ObsProviders p = providers();
  nlohmann::json j = stats_json(read_stats(), metrics_, unix_ms());
  if (p.budget) j["budget"] = budget_json(p.budget());
  j["trace_dropped_events"] = trace_.num_dropped();
  return j.dump();
}

std::string ObservabilityContext::memory_snapshot_body() {
  const ObsProviders p = providers();
  const std::shared_ptr<const KvSnapshot> kv = p.kv_snapshot ? p.kv_snapshot() : nullptr;
  return memory_snapshot_pickle(p.budget ? p.budget() : planner::BudgetTable{}, kv.get());
}

std::string ObservabilityContext::trace_body() {
  return trace_.to_json();
}

nlohmann::json ObservabilityContext::diagnostics_body() {
  const ObsProviders p = providers();
  const EngineStats s = read_stats();
  nlohmann::json j;
  j["stats"] = stats_json(s, metrics_, unix_ms());
  if (p.budget) j["budget"] = budget_json(p.budget());
  j["queue"] = {{"running", s.num_running}, {"waiting", s.num_waiting}, {"swapped", s.num_swapped}};
  if (const auto kv = p.kv_snapshot ? p.kv_snapshot() : nullptr) {
    j["block_map"] = {{"step", kv->step},
                      {"layout", layout_stats_json(kv->stats)},
                      {"top_owners", top_owners(*kv, 16)}};
  }
  nlohmann::json trace = nlohmann::json::parse(trace_.to_json())["traceEvents"];
  if (trace.size() > cfg_.diagnostics_trace_events)
    trace.erase(trace.begin(), trace.end() - ptrdiff_t(cfg_.diagnostics_trace_events));
  j["recent_trace"] = std::move(trace);
  j["config"] = p.config ? p.config() : nlohmann::json::object();
  return j;
}

}  // namespace kvw::obs
