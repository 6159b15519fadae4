// loadgen/runner.h: drives one benchmark run on one thread: sends the workload's requests at
// their arrival times (open loop) or keeping N in flight (closed loop), times every streamed
// chunk, scrapes the server's /metrics every interval and prints a progress line at most once a
// second. Retries 429/503/5xx/connection failures the way the openai SDK does (retry.h)
// or impatiently; a request may stream or not, ask for n choices and leave early (RequestSpec).
// Not thread-safe; run() blocks until every request finished or the drain timed out.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loadgen/http_client.h"
#include "loadgen/prom.h"
#include "loadgen/stats.h"
#include "loadgen/workload.h"

namespace kvw::loadgen {

struct RunConfig {
  std::string path_prefix;                   // from the base URL
  std::string endpoint = "/v1/completions";  // or /v1/chat/completions
  std::string model;
  bool stream = true;
  bool ignore_eos = true;   // vLLM extra field; servers that do not know it ignore it
  bool min_tokens = false;  // also send min_tokens = max_tokens
  double temperature = 0;
  nlohmann::json extra_body = nlohmann::json::object();  // merged into every body (then spec's)
  double request_timeout_s = 600;
  size_t num_requests = 0;       // 0: unbounded (needs duration_s)
  double duration_s = 0;         // stop sending after this; 0: until num_requests
  double warmup_s = 0;           // requests sent before this are not measured
  double drain_timeout_s = 120;  // after sending stops, wait this long for stragglers
  bool closed_loop = false;
  int concurrency = 0;           // closed loop: in flight; open loop: cap (0 = none)
  std::vector<double> arrivals;  // open loop: send times in seconds
  bool scrape_metrics = true;
  double scrape_interval_s = 1.0;
  bool progress = true;  // live line on stderr
  // SDK-style retries (loadgen/retry.h): a retried request keeps its first send time, stays in
  // flight (holds its closed-loop or cap slot) while it waits, and is reported once, at the end.
  int max_retries = 2;
  uint64_t retry_seed = 0;  // backoff jitter
  // Requests marked impatient (RequestSpec) ignore Retry-After and x-should-retry: they retry
  // any retryable failure after this fixed delay, with no cap on the count, until
  // request_timeout_s has passed since their first send, as a retry storm's own clients do, or
  // until --duration ends (the drain does not wait out their storm).
  double impatient_retry_delay_s = 0.05;
};

struct RunOutput {
  std::vector<RequestResult> results;      // in completion order
  std::vector<ServerSnapshot> server;      // one per successful scrape
  std::vector<int64_t> tokens_per_second;  // streamed tokens received in second i of the run
  bool metrics_available = false;
  double measured_duration_s = 0;  // end of warm-up (or start) to last measured finish
  double wall_s = 0;
  size_t connections_opened = 0;
  size_t peak_in_flight = 0;
  bool drain_timed_out = false;
};

// specs are used in order (cycled when the run is bounded by time only); multi-turn specs wait
// for their conversation's previous round and carry its history.
RunOutput run_benchmark(HttpClient& client, const RunConfig& config,
                        const std::vector<RequestSpec>& specs);

// The JSON body for one request (exposed for tests). history alternates user/assistant messages.
std::string build_request_body(const RunConfig& config, const RequestSpec& spec,
                               const std::vector<std::string>& history);

}  // namespace kvw::loadgen
