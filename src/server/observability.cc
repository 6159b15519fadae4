#include "server/observability.h"

#include <chrono>
#include <utility>

#include "core/check.h"
#include "core/kv_dtype.h"
#include "obs/routes.h"

namespace kvw::server {

StepRelay::Fn StepRelay::observer() const {
  return [state = state_](const StepObservation& s) {
    if (state->ready.load(std::memory_order_acquire)) state->target(s);
  };
}

void StepRelay::connect(Fn target) {
  CHECK(!state_->ready.load()) << "StepRelay::connect called twice";
  state_->target = std::move(target);
  state_->ready.store(true, std::memory_order_release);
}

obs::ObsConfig make_obs_config(const EngineConfig& e, const planner::BudgetTable& budget,
                               const ObsOptions& o) {
  obs::ObsConfig c;
  c.metrics.model_name = o.model_name;
  c.metrics.block_size = (uint32_t)e.block_size;
  c.metrics.num_gpu_blocks = budget.num_blocks;
  c.metrics.swap_space_bytes = e.swap_bytes;
  c.metrics.cache_dtype = std::string(kv_dtype_name(e.kv_dtype));
  c.metrics.enable_prefix_caching = e.enable_prefix_caching;
  c.diagnostics.dir = o.diagnostics_dir;
  c.diagnostics.min_interval_s = o.diagnostics_min_interval_s;
  c.diagnostics.max_files = o.diagnostics_max_files;
  c.diagnostics.max_bytes = o.diagnostics_max_bytes;
  c.trace_capacity = o.trace_capacity;
  return c;
}

void ObsBridge::on_choice_finished(const ChoiceTiming& t) {
  obs::RequestTiming r;
  r.arrival_ns = t.arrival_ns;
  r.first_token_ns = t.first_token_ns;
  r.finish_ns = t.finish_ns;
  r.token_ns = t.token_ns;
  r.num_prompt_tokens = t.num_prompt_tokens;
  r.num_generation_tokens = t.num_generation_tokens;
  r.reason = t.reason;
  ctx_.observe_request(r);
}

void ObsBridge::on_refusal(RefusalReason reason) {
  // A stranger's 404s and 401s must not write dumps (issue 30): only the server's trouble does.
  ctx_.observe_shed(to_string(reason), is_server_fault(reason));
}

void ObsBridge::on_breaker_change(BreakerState state) {
  ctx_.metrics().set_breaker_state(state);
}

void wire_observability(Server& server, Engine& engine, obs::ObservabilityContext& ctx,
                        ObsBridge& bridge, nlohmann::json config,
                        std::function<KvEventsStats()> kv_events) {
  ctx.attach(
      {.stats = [&engine] { return engine.stats(); },
       .kv_snapshot = [&engine] { return engine.kv_snapshot(std::chrono::milliseconds(200)); },
       .budget = [&engine] { return engine.budget(); },
       .config = [config = std::move(config)] { return config; },
       .transport = [&server] { return server.transport(); },
       .kv_events = std::move(kv_events),
       .grammar_cache = [&server] { return server.grammar_cache(); },
       .weights_huge_page_bytes = [&engine] { return engine.model().weights_huge_page_bytes(); }});
  ctx.metrics().set_breaker_state(BreakerState::kOk);
  server.set_observer(&bridge);
  obs::register_observability_routes(
      [&server](const std::string& path, http::Handler h, bool inline_io) {
        // /debug/* shows internal state (request ids, block maps, the config): it needs the
        // key when one is set. /metrics is a probe: it answers beyond --max-connections.
        // Their answers are built whole (hundreds of KiB): charged to request memory.
        const bool debug = path.starts_with("/debug/");
        server.add_route("GET", path, debug ? server.charged(std::move(h)) : std::move(h),
                         {.auth = path.starts_with("/debug/"),
                          .inline_io = inline_io,
                          .probe = path == "/metrics"});
      },
      ctx);
  ctx.start_watcher();
}

}  // namespace kvw::server
