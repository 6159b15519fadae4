// obs/serving_metrics.h: every metric kvwarden exports on /metrics (issue 6), in base units
// (seconds, bytes, ratios 0..1), under kvwarden_* names and the vLLM-compatible vllm:* names that
// dashboards, llm-d and the Gateway API Inference Extension read.
// Feeding (who calls what):
//   engine thread   observe_step(StepObservation)   every step (histograms only; cheap)
//   scrape thread   update_engine(EngineStats), update_budget(BudgetTable), update_process()
//                   right before render() (gauges and mirrored counters; pull model)
//   server threads  observe_request(RequestTiming) once per finished request,
//                   observe_shed(reason) per refused request, set_breaker_state(state)
// Thread safety: every method may be called from any thread (atomics; label lookups take a
// family mutex only the first time a label value is seen per call site).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/breaker_state.h"
#include "engine/queues.h"
#include "http/http_server.h"
#include "kv/kv_events.h"
#include "obs/metrics.h"
#include "planner/engine_budget.h"

namespace kvw::obs {

// Bucket boundaries of vLLM's v1 Prometheus logger (vllm/v1/metrics/loggers.py), so panels built
// for vLLM read our histograms unchanged.
extern const std::vector<double> kTtftBuckets;            // time_to_first_token_seconds
extern const std::vector<double> kTpotBuckets;            // time_per_output_token / inter_token
extern const std::vector<double> kRequestLatencyBuckets;  // e2e, queue time

// One finished request, as the server saw it. Times are steady_clock nanoseconds (0 = unknown).
struct RequestTiming {
  uint64_t arrival_ns = 0;      // request accepted by the server (parsed, before submit)
  uint64_t scheduled_ns = 0;    // first scheduled by the engine; 0: queue time is not observed
  uint64_t first_token_ns = 0;  // first token read from the channel; 0: no token (no TTFT)
  uint64_t finish_ns = 0;       // final event read
  // Arrival of every token in order (token_ns[0] == first_token_ns), for inter-token latency.
  // May be empty: then ITL is not observed, TPOT still is (from first token to finish).
  std::vector<uint64_t> token_ns;
  uint32_t num_prompt_tokens = 0;
  uint32_t num_generation_tokens = 0;
  FinishReason reason = FinishReason::kStop;
};

struct ServingMetricsConfig {
  std::string model_name = "kvwarden";  // model_name label of vllm:* metrics
  // vllm:cache_config_info labels (static; the KV pool does not change after start-up).
  uint32_t block_size = 16;
  uint64_t num_gpu_blocks = 0;  // KV pool blocks (our pool is in host memory; name kept for vLLM)
  uint64_t swap_space_bytes = 0;
  std::string cache_dtype = "f16";
  bool enable_prefix_caching = true;
};

// The structured-output grammar cache (--grammar-cache), as the server reports it.
struct GrammarCacheSample {
  uint64_t hits = 0, misses = 0, evicted = 0, too_large = 0;
  uint64_t entries = 0, bytes = 0, capacity = 0;
};

class ServingMetrics {
 public:
  explicit ServingMetrics(ServingMetricsConfig cfg = {});

  void observe_step(const StepObservation& s);
  void update_engine(const EngineStats& s);
  void update_budget(const planner::BudgetTable& b);
  // kvwarden_process_resident_memory_bytes (/proc/self/statm), process CPU (getrusage) and CPU
  // by thread role (/proc/self/task/*/stat).
  void update_process();
  // The HTTP front door. Requests it holds before the engine (waiting for request memory or a
  // handler thread, or being prepared) are added to kvwarden_requests{state="waiting"} and
  // vllm:num_requests_waiting, so every accepted request is visible. After update_engine.
  void update_transport(const http::HttpServerStats& t);
  // The KV events publisher (--kv-events-config), when there is one.
  void update_kv_events(const KvEventsStats& s);
  void update_grammar_cache(const GrammarCacheSample& s);
  // kvwarden_weights_huge_page_bytes; nullopt (smaps unreadable) exports NaN, not a false 0.
  void update_weights_huge_pages(std::optional<uint64_t> bytes);

  // Observes TTFT, TPOT, ITL, e2e and queue time (when known), counts prompt tokens and the
  // finish reason. Generation tokens are counted from EngineStats, not here (no double count).
  void observe_request(const RequestTiming& t);
  // A request refused before it reached the engine; `reason` is the server's label value
  // ("queue_full", "breaker", "too_long", ...).
  void observe_shed(std::string_view reason);
  void set_breaker_state(BreakerState s);

  std::string render() const { return registry_.render(); }

  // For /debug/stats and the dashboard.
  Histogram::Snapshot ttft() const { return ttft_->snapshot(); }
  Histogram::Snapshot e2e() const { return e2e_->snapshot(); }
  Histogram::Snapshot itl() const { return itl_->snapshot(); }
  Histogram::Snapshot step_duration() const { return step_duration_->snapshot(); }
  double shed_total() const { return shed_total_.value(); }  // all reasons
  BreakerState breaker_state() const { return BreakerState(int(breaker_->value())); }

 private:
  void init_kvwarden();
  void update_thread_cpu();
  void init_vllm();

  ServingMetricsConfig cfg_;
  Registry registry_;
  // Families that get new label values at run time.
  Family<Counter>* shed_family_ = nullptr;
  Family<Gauge>* budget_family_ = nullptr;
  Counter shed_total_;  // not exported; sum over shed reasons
  // Cached children (label values fixed at construction).
  Gauge *blocks_total_, *blocks_used_, *blocks_cached_, *blocks_free_;
  Gauge *usage_, *token_usage_, *waste_, *frag_, *largest_run_;
  Counter *alloc_failures_, *alloc_retries_, *preempt_swap_, *preempt_recompute_, *swap_in_,
      *swap_out_;
  Counter *prefix_queries_, *prefix_hits_, *numerics_, *prompt_tokens_, *gen_tokens_;
  Counter *forward_tokens_, *recomputed_tokens_;
  Counter* forward_finished_[4];  // stop, length, cancelled, error
  Gauge *running_, *waiting_, *swapped_;
  Counter* finished_[4];  // stop, length, cancelled, error
  Gauge* breaker_;
  Gauge* breaker_labelled_[3];
  Histogram *ttft_, *tpot_, *itl_, *e2e_, *queue_, *step_duration_, *batch_seqs_, *batch_tokens_;
  Gauge *rss_, *weights_huge_;
  Counter* cpu_;
  Family<Counter>* thread_cpu_;  // by thread role (kvw-io, kvw-engine, kvw-fwd, ...)
  Gauge *http_conns_, *http_peak_conns_, *http_streams_, *http_buffered_, *http_preparing_,
      *req_mem_used_, *req_mem_capacity_, *req_mem_peak_, *req_mem_waiting_;
  Gauge* http_held_;
  Counter *http_accepted_, *http_rejected_, *http_slow_, *http_held_total_, *http_hold_over_budget_,
      *req_mem_timeouts_, *defrag_moves_;
  Counter *window_freed_, *prefix_evictions_;
  Counter *phase_schedule_, *phase_forward_, *phase_sample_;  // engine step time by phase
  Gauge *grammar_bytes_, *grammar_capacity_, *grammar_entries_;
  Counter *grammar_hits_, *grammar_misses_, *grammar_evicted_, *grammar_too_large_;
  Counter *kv_events_published_, *kv_events_dropped_, *kv_batches_published_, *kv_batches_dropped_;
  Gauge* kv_events_queued_;
  double engine_waiting_ = 0;
  // vllm:*
  Gauge *v_kv_usage_, *v_gpu_usage_, *v_running_, *v_waiting_, *v_swapped_;
  Counter *v_preemptions_, *v_prefix_queries_, *v_prefix_hits_, *v_prompt_, *v_gen_;
  Counter* v_success_[3];  // stop, length, abort
  // Speculative decoding (vLLM's spec_decode_* names); per-position children are made on
  // first use, so a server without speculation exports no per-position series.
  Counter *v_spec_drafts_, *v_spec_draft_tokens_, *v_spec_accepted_;
  Family<Counter>* v_spec_per_pos_family_ = nullptr;
  std::array<Counter*, kMaxSpecDraftTokens> v_spec_per_pos_{};
  Histogram *v_ttft_, *v_tpot_, *v_itl_, *v_e2e_, *v_queue_;
};

}  // namespace kvw::obs
