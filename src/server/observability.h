// server/observability.h: connects `kvwarden serve` to the observability module (src/obs,
// issue 6): the engine's step observer, the engine providers, the GET routes (/metrics,
// /dashboard, /debug/kv, /debug/stats, /debug/memory_snapshot, /debug/trace), the diagnostics
// watcher, and the server's own reports (finished choices, refusals, breaker changes) through
// the ServerObserver interface. The HTTP server itself knows nothing of obs; only this file does.
// Order in serve:  StepRelay relay; engine_cfg.step_observer = relay.observer();
//   engine = Engine::create(engine_cfg);  obs = make_unique<ObservabilityContext>(
//   make_obs_config(engine_cfg, engine->budget(), ...));  relay.connect(obs->step_observer());
//   server = Server::create(...);  ObsBridge bridge(*obs);  wire_observability(...);  start().
// Lifetime: the context and the bridge must outlive the Server and the engine thread.
// Thread safety: StepRelay::connect once, before requests; everything else as in obs_context.h.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/engine.h"
#include "obs/obs_context.h"
#include "server/http_server.h"
#include "server/server_observer.h"

namespace kvw::server {

// The metrics config names the KV pool size, which Engine::create plans, while the engine takes
// its step observer at creation: the engine gets the relay, the relay gets the context after.
class StepRelay {
 public:
  using Fn = std::function<void(const StepObservation&)>;
  StepRelay() : state_(std::make_shared<State>()) {}
  Fn observer() const;      // for EngineConfig::step_observer
  void connect(Fn target);  // once; steps before it are not observed

 private:
  struct State {
    Fn target;
    std::atomic<bool> ready{false};
  };
  std::shared_ptr<State> state_;
};

struct ObsOptions {
  // (initialisers everywhere: designated initialisers may leave any field out without a warning)
  std::string model_name = "kvwarden";           // the served model name (vllm:* model_name label)
  std::string diagnostics_dir = "";              // --diagnostics-dir; empty: no dumps
  double diagnostics_min_interval_s = 60;        // --diagnostics-min-interval, per trigger
  uint32_t diagnostics_max_files = 64;           // --diagnostics-max-files, per process
  uint64_t diagnostics_max_bytes = 64ull << 20;  // --diagnostics-max-bytes, per process
  size_t trace_capacity = 65536;
};
obs::ObsConfig make_obs_config(const EngineConfig& e, const planner::BudgetTable& budget,
                               const ObsOptions& o);

// ServerObserver -> ObservabilityContext: a finished choice is one RequestTiming (queue time is
// not observed: the server cannot see when the engine schedules), a refusal is a shed with the
// RefusalCounters reason string, a breaker change sets the breaker gauge.
class ObsBridge final : public ServerObserver {
 public:
  explicit ObsBridge(obs::ObservabilityContext& ctx) : ctx_(ctx) {}
  void on_choice_finished(const ChoiceTiming& t) override;
  void on_refusal(RefusalReason reason) override;
  void on_breaker_change(BreakerState state) override;

 private:
  obs::ObservabilityContext& ctx_;
};

// Attaches the engine providers (KV snapshot with a 200 ms timeout), sets `bridge` as the
// server's observer, registers the GET routes and starts the diagnostics watcher. Before
// server.start(). `kv_events`: the KV events publisher's counters (null: none).
void wire_observability(Server& server, Engine& engine, obs::ObservabilityContext& ctx,
                        ObsBridge& bridge, nlohmann::json config,
                        std::function<KvEventsStats()> kv_events = nullptr);

}  // namespace kvw::server
