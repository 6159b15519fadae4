// obs/obs_context.h: everything observability needs at run time in one object: the metrics, the
// trace ring, the diagnostics writer, and the (abstract) providers that read the engine.
// Wiring (the lead, in `kvwarden serve`; a few lines):
//   obs::ObservabilityContext obs(obs_cfg);
//   engine_cfg.step_observer = obs.step_observer();           // before Engine::create
//   auto engine = Engine::create(engine_cfg);
//   obs.attach({.stats = [&] { return engine->stats(); },
//               .kv_snapshot = [&] { return engine->kv_snapshot(std::chrono::milliseconds(200)); },
//               .budget = [&] { return engine->budget(); }});
//   obs.start_watcher();                                      // diagnostics triggers
//   obs::register_observability_routes(                         // obs/routes.h
//       [&](const std::string& path, obs::RouteHandler h) {
//         server->add_route("GET", path, std::move(h)); }, obs);
//   per finished request: obs.observe_request(timing); per refusal: obs.observe_shed("queue_full")
//   on breaker change: obs.metrics().set_breaker_state(...)
// Lifetime: must outlive the engine (its observer) and the HTTP server (its routes).
// Thread safety: all methods are thread-safe; step_observer()'s function runs on the engine
// thread, does no I/O and takes only short locks (trace ring, diagnostics window).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "engine/queues.h"
#include "kv/kv_events.h"
#include "obs/diagnostics.h"
#include "obs/serving_metrics.h"
#include "obs/trace_ring.h"
#include "planner/engine_budget.h"

namespace kvw::obs {

struct ObsConfig {
  ServingMetricsConfig metrics;
  DiagnosticsConfig diagnostics;
  size_t trace_capacity = 65536;           // events (~80 B each: ~5 MiB at most)
  uint32_t watcher_period_ms = 250;        // diagnostics trigger evaluation
  size_t diagnostics_trace_events = 2000;  // most recent trace events in a dump
};

// Every provider may be empty; endpoints then serve what they can (zeros, empty maps).
struct ObsProviders {
  // (= nullptr: designated initialisers may leave any of them out without a warning)
  std::function<EngineStats()> stats = nullptr;
  std::function<std::shared_ptr<const KvSnapshot>()> kv_snapshot = nullptr;  // null: none yet
  std::function<planner::BudgetTable()> budget = nullptr;
  std::function<nlohmann::json()> config = nullptr;  // the serve config, for diagnostics dumps
  std::function<http::HttpServerStats()> transport = nullptr;   // the HTTP front door
  std::function<KvEventsStats()> kv_events = nullptr;           // the KV events publisher
  std::function<GrammarCacheSample()> grammar_cache = nullptr;  // structured outputs' cache
  // The model's weights on 2 MiB pages (Model::weights_huge_page_bytes); nullopt: unknown.
  std::function<std::optional<uint64_t>()> weights_huge_page_bytes = nullptr;
};

class ObservabilityContext {
 public:
  explicit ObservabilityContext(ObsConfig cfg);
  ~ObservabilityContext();  // stops the watcher
  ObservabilityContext(const ObservabilityContext&) = delete;
  ObservabilityContext& operator=(const ObservabilityContext&) = delete;

  void attach(ObsProviders p);
  // For EngineConfig::step_observer: histograms, trace ring, preemption-storm window.
  std::function<void(const StepObservation&)> step_observer();
  void observe_request(const RequestTiming& t) { metrics_.observe_request(t); }
  // Counts a refused request under `reason`; `server_fault` (overload or a failure of ours, not
  // a client's mistake) also feeds the diagnostics "shedding" trigger.
  void observe_shed(std::string_view reason, bool server_fault = true);

  // Starts the thread that evaluates diagnostics triggers every watcher_period_ms (no-op when
  // no diagnostics dir is configured or it already runs). stop_watcher() joins it.
  void start_watcher();
  void stop_watcher();
  // One watcher tick (also what tests call): feeds NaN events and KV usage to the triggers and
  // writes dumps. Returns the files written.
  std::vector<std::string> check_diagnostics();

  // Endpoint bodies.
  std::string metrics_text();          // /metrics (text/plain; version=0.0.4)
  std::string kv_body();               // /debug/kv
  std::string stats_body();            // /debug/stats
  std::string memory_snapshot_body();  // /debug/memory_snapshot (application/octet-stream)
  std::string trace_body();            // /debug/trace
  nlohmann::json diagnostics_body();   // a dump's content

  ServingMetrics& metrics() { return metrics_; }
  TraceRing& trace() { return trace_; }
  DiagnosticsWriter& diagnostics() { return diag_; }

 private:
  ObsProviders providers() const;
  EngineStats read_stats() const;

  const ObsConfig cfg_;
  ServingMetrics metrics_;
  TraceRing trace_;
  DiagnosticsWriter diag_;
  mutable std::mutex mu_;  // guards providers_ and last_numerics_
  ObsProviders providers_;
  uint64_t last_numerics_ = 0;

  std::mutex watcher_mu_;
  std::condition_variable watcher_cv_;
  bool watcher_stop_ = false;
  std::thread watcher_;
};

}  // namespace kvw::obs
