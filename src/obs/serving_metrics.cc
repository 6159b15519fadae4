#include "obs/serving_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <sstream>

namespace kvw::obs {

const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTpotBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kRequestLatencyBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

namespace {

// Engine steps run from ~0.1 ms (tiny model) to seconds (long prefill on CPU).
const std::vector<double> kStepBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                          0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                          1.0,    2.5,     5.0,    10.0};

std::vector<double> powers_of_two(double hi) {
  std::vector<double> b;
  for (double v = 1; v <= hi; v *= 2) b.push_back(v);
  return b;
}

double seconds(uint64_t from_ns, uint64_t to_ns) {
  return to_ns > from_ns ? double(to_ns - from_ns) * 1e-9 : 0.0;
}

}  // namespace

ServingMetrics::ServingMetrics(ServingMetricsConfig cfg) : cfg_(std::move(cfg)) {
  init_kvwarden();
  init_vllm();
}

void ServingMetrics::init_kvwarden() {
  Registry& r = registry_;
  auto& blocks = r.gauge("kvwarden_kv_blocks", "KV pool blocks by state.", {"state"});
  blocks_total_ = &blocks.with({"total"});
  blocks_used_ = &blocks.with({"used"});
  blocks_cached_ = &blocks.with({"cached"});
  blocks_free_ = &blocks.with({"free"});
  usage_ = &r.gauge("kvwarden_kv_usage_ratio", "Share of KV blocks in use (0-1).").with({});
  token_usage_ = &r.gauge("kvwarden_kv_token_usage_ratio",
                          "Share of KV token slots holding a live token (0-1).")
                      .with({});
  waste_ = &r.gauge("kvwarden_kv_internal_waste_ratio",
                    "Share of the slots in used KV blocks that are empty (0-1).")
                .with({});
  frag_ = &r.gauge("kvwarden_kv_fragmentation_ratio",
                   "(free blocks - largest contiguous free run) / free blocks (0-1).")
               .with({});
  largest_run_ = &r.gauge("kvwarden_kv_largest_free_run_blocks",
                          "Longest run of consecutive free KV block ids.")
                      .with({});
  alloc_failures_ = &r.counter("kvwarden_kv_alloc_failures_total",
                               "Steps where a sequence found no free KV block (then queued or "
                               "preempted).")
                         .with({});
  alloc_retries_ = &r.counter("kvwarden_kv_alloc_retries_total",
                              "Steps where the waiting queue's head found no KV room and was "
                              "retried next step.")
                        .with({});
  auto& pre = r.counter("kvwarden_preemptions_total", "Preempted sequences by mode.", {"mode"});
  preempt_swap_ = &pre.with({"swap"});
  preempt_recompute_ = &pre.with({"recompute"});
  auto& swap =
      r.counter("kvwarden_swap_bytes_total", "Bytes copied to/from the swap tier.", {"direction"});
  swap_in_ = &swap.with({"in"});
  swap_out_ = &swap.with({"out"});
  prefix_queries_ = &r.counter("kvwarden_prefix_cache_queries_total",
                               "Prompt tokens looked up in the prefix cache.")
                         .with({});
  prefix_hits_ =
      &r.counter("kvwarden_prefix_cache_hits_total", "Prompt tokens served from the prefix cache.")
           .with({});
  auto& req = r.gauge("kvwarden_requests", "Requests known to the engine by state.", {"state"});
  running_ = &req.with({"running"});
  waiting_ = &req.with({"waiting"});
  swapped_ = &req.with({"swapped"});
  auto& fin =
      r.counter("kvwarden_requests_finished_total", "Finished requests by reason.", {"reason"});
  finished_[0] = &fin.with({"stop"});
  finished_[1] = &fin.with({"length"});
  finished_[2] = &fin.with({"cancelled"});
  finished_[3] = &fin.with({"error"});
  shed_family_ = &r.counter("kvwarden_requests_shed_total",
                            "Requests refused before reaching the engine, by reason.", {"reason"});
  breaker_ =
      &r.gauge("kvwarden_breaker_state", "Admission breaker: 0 ok, 1 warn, 2 shedding.").with({});
  auto& bl = r.gauge("kvwarden_breaker_state_info", "1 for the admission breaker's current state.",
                     {"state"});
  for (int i = 0; i < 3; ++i) breaker_labelled_[i] = &bl.with({to_string(BreakerState(i))});
  breaker_labelled_[0]->set(1);
  numerics_ =
      &r.counter("kvwarden_numerics_events_total", "Requests ended by the NaN/Inf numerics guard.")
           .with({});
  ttft_ = &r.histogram("kvwarden_time_to_first_token_seconds", "Time to first token.", kTtftBuckets)
               .with({});
  tpot_ = &r.histogram("kvwarden_time_per_output_token_seconds",
                       "Mean time per output token after the first, per request.", kTpotBuckets)
               .with({});
  itl_ = &r.histogram("kvwarden_inter_token_latency_seconds", "Time between consecutive tokens.",
                      kTpotBuckets)
              .with({});
  e2e_ = &r.histogram("kvwarden_e2e_request_latency_seconds", "Arrival to final token.",
                      kRequestLatencyBuckets)
              .with({});
  queue_ = &r.histogram("kvwarden_queue_time_seconds", "Arrival to first scheduled.",
                        kRequestLatencyBuckets)
                .with({});
  step_duration_ =
      &r.histogram("kvwarden_step_duration_seconds", "Engine step wall time.", kStepBuckets)
           .with({});
  batch_seqs_ =
      &r.histogram("kvwarden_batch_size_seqs", "Sequences per engine step.", powers_of_two(1024))
           .with({});
  batch_tokens_ =
      &r.histogram("kvwarden_batch_size_tokens", "Tokens per engine step.", powers_of_two(65536))
           .with({});
  prompt_tokens_ =
      &r.counter("kvwarden_prompt_tokens_total", "Prompt tokens of finished requests.").with({});
  gen_tokens_ = &r.counter("kvwarden_generation_tokens_total", "Generated tokens.").with({});
  // Where the model's work went: all of it, that of finished requests by how they ended (a
  // cancelled request's tokens were wasted unless a stop string ended it), and recomputation.
  forward_tokens_ = &r.counter("kvwarden_forward_tokens_total",
                               "Tokens run through the model (prompts, recomputes, decodes).")
                         .with({});
  auto& fwd =
      r.counter("kvwarden_forward_tokens_finished_total",
                "Tokens run through the model for requests that finished, by reason.", {"reason"});
  for (FinishReason reason : {FinishReason::kStop, FinishReason::kLength, FinishReason::kCancelled,
                              FinishReason::kError}) {
    forward_finished_[size_t(reason) - 1] = &fwd.with({to_string(reason)});
  }
  recomputed_tokens_ =
      &r.counter("kvwarden_recomputed_tokens_total",
                 "Tokens computed again at positions whose KV a preemption had dropped.")
           .with({});
  rss_ = &r.gauge("kvwarden_process_resident_memory_bytes", "Resident set size of the process.")
              .with({});
  weights_huge_ = &r.gauge("kvwarden_weights_huge_page_bytes",
                           "Bytes of the model's weights the kernel backs with 2 MiB pages "
                           "(/proc/self/smaps); decode streams them all each step.")
                       .with({});
  cpu_ = &r.counter("kvwarden_process_cpu_seconds_total",
                    "User + system CPU time of the process (getrusage).")
              .with({});
  thread_cpu_ = &r.counter("kvwarden_thread_cpu_seconds_total",
                           "User + system CPU time by thread role: the thread's name without its "
                           "index (kvw-io, kvw-http, kvw-engine, kvw-fwd, kvw-swap, ...).",
                           {"thread"});
  auto& phase = r.counter("kvwarden_engine_step_seconds_total",
                          "Engine step time by phase: schedule (scheduler and bookkeeping), "
                          "forward (the model's forward pass), sample (numerics guard and "
                          "sampling of every row).",
                          {"phase"});
  phase_schedule_ = &phase.with({"schedule"});
  phase_forward_ = &phase.with({"forward"});
  phase_sample_ = &phase.with({"sample"});
  defrag_moves_ = &r.counter("kvwarden_kv_defrag_moves_total",
                             "KV blocks moved by the defragmenter (--defrag-threshold).")
                       .with({});
  window_freed_ = &r.counter("kvwarden_kv_window_freed_blocks_total",
                             "KV blocks released because they fell wholly behind the model's "
                             "sliding window.")
                       .with({});
  prefix_evictions_ = &r.counter("kvwarden_prefix_cache_evictions_total",
                                 "Cached prefix blocks evicted to hold other data (LRU).")
                           .with({});
  auto& gbytes = r.gauge("kvwarden_grammar_cache_bytes",
                         "Structured-output grammars and their masks kept across requests "
                         "(--grammar-cache).",
                         {"state"});
  grammar_bytes_ = &gbytes.with({"used"});
  grammar_capacity_ = &gbytes.with({"capacity"});
  grammar_entries_ =
      &r.gauge("kvwarden_grammar_cache_entries", "Grammars kept in the grammar cache.").with({});
  auto& glookups =
      r.counter("kvwarden_grammar_cache_lookups_total",
                "Requests with a grammar: hit (its masks were kept) or miss.", {"result"});
  grammar_hits_ = &glookups.with({"hit"});
  grammar_misses_ = &glookups.with({"miss"});
  grammar_evicted_ = &r.counter("kvwarden_grammar_cache_evictions_total",
                                "Grammars dropped from the cache to make room (least recent).")
                          .with({});
  grammar_too_large_ = &r.counter("kvwarden_grammar_cache_too_large_total",
                                  "Grammars larger than the whole cache: used once, not kept.")
                            .with({});
  kv_events_published_ = &r.counter("kvwarden_kv_events_published_total",
                                    "KV cache events sent on the --kv-events-config PUB socket.")
                              .with({});
  kv_events_dropped_ = &r.counter("kvwarden_kv_events_dropped_total",
                                  "KV cache events dropped because the publisher queue "
                                  "(max_queue_size events) was full; never waited for.")
                            .with({});
  kv_batches_published_ = &r.counter("kvwarden_kv_event_batches_published_total",
                                     "KV event batches (one per engine step with events) sent.")
                               .with({});
  kv_batches_dropped_ = &r.counter("kvwarden_kv_event_batches_dropped_total",
                                   "KV event batches dropped at the full queue (each leaves a "
                                   "gap in the sequence numbers).")
                             .with({});
  kv_events_queued_ =
      &r.gauge("kvwarden_kv_events_queued", "KV cache events waiting for the publisher thread.")
           .with({});
  http_conns_ = &r.gauge("kvwarden_http_connections", "Open HTTP connections.").with({});
  http_peak_conns_ =
      &r.gauge("kvwarden_http_connections_peak", "Most HTTP connections open at once.").with({});
  http_streams_ =
      &r.gauge("kvwarden_http_streams", "Responses being produced (SSE or waiting on the engine).")
           .with({});
  http_buffered_ = &r.gauge("kvwarden_http_stream_buffered_bytes",
                            "Unsent response bytes over all streams (slow clients).")
                        .with({});
  http_preparing_ = &r.gauge("kvwarden_http_requests_preparing",
                             "Requests before the engine: waiting for request memory or a "
                             "handler thread, or being parsed and tokenised.")
                         .with({});
  http_accepted_ =
      &r.counter("kvwarden_http_connections_accepted_total", "Accepted connections.").with({});
  http_rejected_ = &r.counter("kvwarden_http_connections_rejected_total",
                              "Connections answered 503 at once (over --max-connections).")
                        .with({});
  http_held_ = &r.gauge("kvwarden_http_refusals_held",
                        "429s being held before they are written (--refusal-hold).")
                    .with({});
  http_held_total_ = &r.counter("kvwarden_http_refusals_held_total",
                                "429s held before they were written (--refusal-hold): clients "
                                "back before their Retry-After, paced.")
                          .with({});
  http_hold_over_budget_ =
      &r.counter("kvwarden_http_refusals_hold_over_budget_total",
                 "429s written at once that would have been held: --refusal-hold-max were held.")
           .with({});
  http_slow_ = &r.counter("kvwarden_http_slow_consumers_total",
                          "Streams dropped because the client read too slowly.")
                    .with({});
  auto& mem =
      r.gauge("kvwarden_request_memory_bytes",
              "Request memory (--request-memory): bodies, parsed JSON, prompts.", {"state"});
  req_mem_used_ = &mem.with({"used"});
  req_mem_capacity_ = &mem.with({"capacity"});
  req_mem_peak_ = &mem.with({"peak"});
  req_mem_waiting_ = &r.gauge("kvwarden_request_memory_waiters",
                              "Requests whose body waits unread for request memory.")
                          .with({});
  req_mem_timeouts_ = &r.counter("kvwarden_request_memory_timeouts_total",
                                 "Requests answered 503 after waiting for request memory.")
                           .with({});
  budget_family_ =
      &r.gauge("kvwarden_memory_budget_bytes",
               "Start-up memory budget by component (--memory-budget).", {"component"});
}

void ServingMetrics::init_vllm() {
  Registry& r = registry_;
  const std::vector<std::string> m = {cfg_.model_name};
  const std::vector<std::string> ml = {"model_name"};
  v_kv_usage_ =
      &r.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent.", ml).with(m);
  v_gpu_usage_ =
      &r.gauge("vllm:gpu_cache_usage_perc", "KV-cache usage (older name). 1 means 100 percent.", ml)
           .with(m);
  v_running_ = &r.gauge("vllm:num_requests_running", "Requests in the running batch.", ml).with(m);
  v_waiting_ =
      &r.gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.", ml).with(m);
  v_swapped_ = &r.gauge("vllm:num_requests_swapped", "Requests swapped out.", ml).with(m);
  r.gauge(
       "vllm:cache_config_info", "Information of the KV cache config.",
       {"block_size", "cache_dtype", "enable_prefix_caching", "num_gpu_blocks", "swap_space_bytes"})
      .with({std::to_string(cfg_.block_size), cfg_.cache_dtype,
             cfg_.enable_prefix_caching ? "True" : "False", std::to_string(cfg_.num_gpu_blocks),
             std::to_string(cfg_.swap_space_bytes)})
      .set(1);
  v_preemptions_ = &r.counter("vllm:num_preemptions_total", "Cumulative preemptions.", ml).with(m);
  v_spec_drafts_ =
      &r.counter("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.", ml)
           .with(m);
  v_spec_draft_tokens_ =
      &r.counter("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.", ml).with(m);
  v_spec_accepted_ =
      &r.counter("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.", ml)
           .with(m);
  v_spec_per_pos_family_ =
      &r.counter("vllm:spec_decode_num_accepted_tokens_per_pos_total",
                 "Accepted tokens per draft position.", {"model_name", "position"});
  v_prefix_queries_ =
      &r.counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in tokens.", ml).with(m);
  v_prefix_hits_ =
      &r.counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in tokens.", ml).with(m);
  v_prompt_ = &r.counter("vllm:prompt_tokens_total", "Prefill tokens processed.", ml).with(m);
  v_gen_ = &r.counter("vllm:generation_tokens_total", "Generation tokens processed.", ml).with(m);
  auto& ok = r.counter("vllm:request_success_total", "Successfully processed requests.",
                       {"finished_reason", "model_name"});
  v_success_[0] = &ok.with({"stop", cfg_.model_name});
  v_success_[1] = &ok.with({"length", cfg_.model_name});
  v_success_[2] = &ok.with({"abort", cfg_.model_name});
  v_ttft_ = &r.histogram("vllm:time_to_first_token_seconds", "Time to first token in seconds.",
                         kTtftBuckets, ml)
                 .with(m);
  v_tpot_ = &r.histogram("vllm:time_per_output_token_seconds", "Time per output token in seconds.",
                         kTpotBuckets, ml)
                 .with(m);
  v_itl_ = &r.histogram("vllm:inter_token_latency_seconds", "Inter-token latency in seconds.",
                        kTpotBuckets, ml)
                .with(m);
  v_e2e_ = &r.histogram("vllm:e2e_request_latency_seconds",
                        "End to end request latency in seconds.", kRequestLatencyBuckets, ml)
                .with(m);
  v_queue_ = &r.histogram("vllm:request_queue_time_seconds",
                          "Time spent in WAITING phase for request.", kRequestLatencyBuckets, ml)
                  .with(m);
}

void ServingMetrics::observe_step(const StepObservation& s) {
  step_duration_->observe(double(s.duration_ns) * 1e-9);
  batch_seqs_->observe(double(s.num_seqs));
  batch_tokens_->observe(double(s.num_tokens));
}

void ServingMetrics::update_engine(const EngineStats& s) {
  const KvLayoutStats& kv = s.kv;
  blocks_total_->set(kv.num_blocks);
  blocks_used_->set(kv.num_used_blocks);
  blocks_cached_->set(kv.num_cached_blocks);
  blocks_free_->set(kv.num_free_blocks);
  usage_->set(kv.block_usage());
  token_usage_->set(kv.token_usage());
  waste_->set(kv.internal_waste());
  frag_->set(kv.fragmentation());
  largest_run_->set(kv.largest_free_run);
  alloc_failures_->set_total(double(s.num_alloc_failures));
  alloc_retries_->set_total(double(s.num_admission_deferrals));
  preempt_swap_->set_total(double(s.num_preemptions_swap));
  preempt_recompute_->set_total(double(s.num_preemptions_recompute));
  swap_in_->set_total(double(s.swap_in_bytes));
  swap_out_->set_total(double(s.swap_out_bytes));
  prefix_queries_->set_total(double(s.prefix.num_query_tokens));
  prefix_hits_->set_total(double(s.prefix.num_hit_tokens));
  running_->set(double(s.num_running));
  waiting_->set(double(s.num_waiting));
  engine_waiting_ = double(s.num_waiting);
  defrag_moves_->set_total(double(s.num_defrag_moves));
  phase_schedule_->set_total(double(s.schedule_ns) * 1e-9);
  phase_forward_->set_total(double(s.forward_ns) * 1e-9);
  phase_sample_->set_total(double(s.sample_ns) * 1e-9);
  window_freed_->set_total(double(s.num_window_freed_blocks));
  prefix_evictions_->set_total(double(s.prefix.num_evictions));
  swapped_->set(double(s.num_swapped));
  numerics_->set_total(double(s.num_numerics_errors));
  gen_tokens_->set_total(double(s.num_generated_tokens));
  forward_tokens_->set_total(double(s.num_computed_tokens));
  for (size_t i = 0; i < 4; ++i)
    forward_finished_[i]->set_total(double(s.forward_tokens_finished[i + 1]));
  recomputed_tokens_->set_total(double(s.num_recomputed_tokens));

  v_kv_usage_->set(kv.block_usage());
  v_gpu_usage_->set(kv.block_usage());
  v_running_->set(double(s.num_running));
  v_waiting_->set(double(s.num_waiting));
  v_swapped_->set(double(s.num_swapped));
  v_preemptions_->set_total(double(s.num_preemptions));
  v_spec_drafts_->set_total(double(s.spec.num_drafts));
  v_spec_draft_tokens_->set_total(double(s.spec.num_draft_tokens));
  v_spec_accepted_->set_total(double(s.spec.num_accepted_tokens));
  for (size_t i = 0; i < v_spec_per_pos_.size(); ++i) {
    const uint64_t n = s.spec.num_accepted_tokens_per_pos[i];
    if (n == 0 && v_spec_per_pos_[i] == nullptr) continue;
    if (v_spec_per_pos_[i] == nullptr) {
      v_spec_per_pos_[i] = &v_spec_per_pos_family_->with({cfg_.model_name, std::to_string(i)});
    }
    v_spec_per_pos_[i]->set_total(double(n));
  }
  v_prefix_queries_->set_total(double(s.prefix.num_query_tokens));
  v_prefix_hits_->set_total(double(s.prefix.num_hit_tokens));
  v_gen_->set_total(double(s.num_generated_tokens));
}

void ServingMetrics::update_budget(const planner::BudgetTable& b) {
  budget_family_->with({"weights"}).set(double(b.weights_bytes));
  budget_family_->with({"kv_pool"}).set(double(b.kv_pool_bytes));
  budget_family_->with({"workspace"}).set(double(b.workspace_bytes));
  budget_family_->with({"reserve"}).set(double(b.reserve_bytes));
  budget_family_->with({"request"}).set(double(b.request_bytes));
  budget_family_->with({"total"}).set(double(b.total_bytes));
}

void ServingMetrics::update_transport(const http::HttpServerStats& t) {
  http_conns_->set(double(t.open_connections));
  http_peak_conns_->set(double(t.peak_connections));
  http_streams_->set(double(t.active_streams));
  http_buffered_->set(double(t.stream_buffered_bytes));
  const double preparing =
      double(t.handlers_queued + t.handlers_running + t.request_memory.num_waiting);
  http_preparing_->set(preparing);
  waiting_->set(engine_waiting_ + preparing);
  v_waiting_->set(engine_waiting_ + preparing);
  http_accepted_->set_total(double(t.accepted_total));
  http_rejected_->set_total(double(t.rejected_connections_total));
  http_slow_->set_total(double(t.slow_consumers_total));
  http_held_->set(double(t.held_refusals));
  http_held_total_->set_total(double(t.held_refusals_total));
  http_hold_over_budget_->set_total(double(t.held_refusals_over_budget_total));
  req_mem_used_->set(double(t.request_memory.used));
  req_mem_capacity_->set(double(t.request_memory.capacity));
  req_mem_peak_->set(double(t.request_memory.peak));
  req_mem_waiting_->set(double(t.request_memory.num_waiting));
  req_mem_timeouts_->set_total(double(t.request_memory.num_timed_out));
}

void ServingMetrics::update_grammar_cache(const GrammarCacheSample& s) {
  grammar_bytes_->set(double(s.bytes));
  grammar_capacity_->set(double(s.capacity));
  grammar_entries_->set(double(s.entries));
  grammar_hits_->set_total(double(s.hits));
  grammar_misses_->set_total(double(s.misses));
  grammar_evicted_->set_total(double(s.evicted));
  grammar_too_large_->set_total(double(s.too_large));
}

void ServingMetrics::update_weights_huge_pages(std::optional<uint64_t> bytes) {
  weights_huge_->set(bytes ? double(*bytes) : std::numeric_limits<double>::quiet_NaN());
}

void ServingMetrics::update_process() {
  // statm: size resident shared text lib data dt, in pages.
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return;
  unsigned long long size = 0, resident = 0;
  if (std::fscanf(f, "%llu %llu", &size, &resident) == 2)
    rss_->set(double(resident) * double(sysconf(_SC_PAGESIZE)));
  std::fclose(f);
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) == 0) {
    auto sec = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
    cpu_->set_total(sec(ru.ru_utime) + sec(ru.ru_stime));
  }
  update_thread_cpu();
}

// Sums /proc/self/task/*/stat by thread role. Threads that ended take their time with them, so a
// role's total can step down when its pool shrinks; ours are fixed at start-up.
void ServingMetrics::update_thread_cpu() {
  std::map<std::string, double> by_role;
  const double tick = 1.0 / double(sysconf(_SC_CLK_TCK));
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream in(task.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open) continue;
    std::string role = stat.substr(open + 1, close - open - 1);
    const size_t dash = role.find_last_of('-');
    if (dash != std::string::npos && dash + 1 < role.size() &&
        role.find_first_not_of("0123456789", dash + 1) == std::string::npos) {
      role.resize(dash);  // kvw-io-1 -> kvw-io
    }
    // After ") ": state(3) ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
    // utime(14) stime(15).
    std::istringstream rest(stat.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::atof(field.c_str());
      if (i == 15) stime = std::atof(field.c_str());
    }
    by_role[role] += (utime + stime) * tick;
  }
  for (const auto& [role, seconds] : by_role) thread_cpu_->with({role}).set_total(seconds);
}

void ServingMetrics::observe_request(const RequestTiming& t) {
  if (t.arrival_ns != 0 && t.first_token_ns != 0) {
    const double ttft = seconds(t.arrival_ns, t.first_token_ns);
    ttft_->observe(ttft);
    v_ttft_->observe(ttft);
  }
  if (t.first_token_ns != 0 && t.num_generation_tokens > 1) {
    const uint64_t last = t.token_ns.empty() ? t.finish_ns : t.token_ns.back();
    const double tpot = seconds(t.first_token_ns, last) / double(t.num_generation_tokens - 1);
    tpot_->observe(tpot);
    v_tpot_->observe(tpot);
  }
  for (size_t i = 1; i < t.token_ns.size(); ++i) {
    const double gap = seconds(t.token_ns[i - 1], t.token_ns[i]);
    itl_->observe(gap);
    v_itl_->observe(gap);
  }
  if (t.arrival_ns != 0 && t.finish_ns != 0) {
    const double e2e = seconds(t.arrival_ns, t.finish_ns);
    e2e_->observe(e2e);
    v_e2e_->observe(e2e);
  }
  if (t.arrival_ns != 0 && t.scheduled_ns != 0) {
    const double q = seconds(t.arrival_ns, t.scheduled_ns);
    queue_->observe(q);
    v_queue_->observe(q);
  }
  prompt_tokens_->inc(t.num_prompt_tokens);
  v_prompt_->inc(t.num_prompt_tokens);
  switch (t.reason) {
    case FinishReason::kStop:
      finished_[0]->inc();
      v_success_[0]->inc();
      break;
    case FinishReason::kLength:
      finished_[1]->inc();
      v_success_[1]->inc();
      break;
    case FinishReason::kCancelled:
      finished_[2]->inc();
      v_success_[2]->inc();
      break;
    case FinishReason::kError:
    case FinishReason::kNone:
      finished_[3]->inc();
      break;
  }
}

void ServingMetrics::observe_shed(std::string_view reason) {
  shed_family_->with({std::string(reason)}).inc();
  shed_total_.inc();
}

void ServingMetrics::set_breaker_state(BreakerState s) {
  breaker_->set(double(int(s)));
  for (int i = 0; i < 3; ++i) breaker_labelled_[i]->set(i == int(s) ? 1.0 : 0.0);
}

void ServingMetrics::update_kv_events(const KvEventsStats& s) {
  kv_events_published_->set_total(double(s.num_events_published));
  kv_events_dropped_->set_total(double(s.num_events_dropped));
  kv_batches_published_->set_total(double(s.num_batches_published));
  kv_batches_dropped_->set_total(double(s.num_batches_dropped));
  kv_events_queued_->set(double(s.num_events_queued));
}

}  // namespace kvw::obs
