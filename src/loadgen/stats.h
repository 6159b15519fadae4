// loadgen/stats.h: per-request measurements and the benchmark summary (vLLM's field names).
// Pure functions over finished results; percentiles interpolate linearly like numpy's default,
// std is the population std (numpy ddof=0), so numbers compare 1:1 with vLLM's benchmark.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace kvw::loadgen {

// One request as the client saw it, retries included (as an SDK caller sees it): ttft_ms and
// e2el_ms count from the first attempt's send, through refused attempts and backoff waits.
// Times in ms; ttft_ms < 0 when no token was streamed. status/error are the final attempt's.
struct RequestResult {
  uint64_t index = 0;
  double start_s = 0;          // first send time from the start of the run
  double ttft_ms = -1;         // first non-empty streamed chunk
  double e2el_ms = 0;          // first send to last byte
  std::vector<double> itl_ms;  // gaps between streamed chunks after the first
  int status = 0;              // HTTP status; 0 when the transport failed
  std::string error;           // empty when ok; "http 429", "timeout", "connect: ..." otherwise
  std::string error_body;      // first bytes of an error response (for OOM detection)
  int num_retries = 0;         // attempts after the first
  std::vector<int> retried_statuses;  // status of each retried attempt; 0: no response head
  double retry_wait_ms = 0;           // first send to the final attempt's send (the final attempt's
                                      // own TTFT is ttft_ms - retry_wait_ms)
  int input_tokens = 0;
  int output_tokens = 0;  // usage.completion_tokens if reported, else streamed chunks
  bool streamed = false;
  bool warmup = false;  // sent during the warm-up window: not counted
  // Overload accounting (overload.h), across the attempts.
  bool admitted = false;             // some attempt got a 200 status line
  double admitted_wait_ms = -1;      // that attempt: send to first token (streamed) or first
                                     // byte; until it ended when neither came
  double longest_unanswered_ms = 0;  // longest any attempt waited for its answer (status line;
                                     // a 200 stream's first token), until it ended if none came
  int refusals = 0;                  // attempts answered 429 or 503
  int refusals_without_retry_after = 0;
  bool aborted = false;    // the client left on purpose (error "aborted")
  bool impatient = false;  // ignored Retry-After and retried after a fixed short delay
  bool ok() const { return status == 200 && error.empty(); }
  // vLLM: (e2el - ttft) / (output_tokens - 1); 0 with a single token; <0 when not streamed.
  double tpot_ms() const;
};

// Service-level objectives for goodput (vLLM --goodput ttft:500 tpot:50 e2el:2000), in ms.
struct Slo {
  std::string metric;  // ttft, tpot or e2el
  double limit_ms = 0;
};
Result<std::vector<Slo>> parse_slos(const std::vector<std::string>& specs);
bool meets_slos(const RequestResult& r, const std::vector<Slo>& slos);

// numpy.percentile(values, p) with linear interpolation; 0 for an empty input.
double percentile(std::vector<double> values, double p);
double mean_of(const std::vector<double>& values);
double std_of(const std::vector<double>& values);  // population std
// "99" for 99, "99.9" for 99.9: the name vLLM gives p in "p99_ttft_ms".
std::string percentile_name(double p);

struct SummaryOptions {
  std::vector<double> percentiles = {50, 90, 95, 99};
  std::vector<Slo> slos;
  // Metrics that get p{NN}_{metric}_ms keys (vLLM's --percentile-metrics); mean, median and std
  // are reported for all four.
  std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
};

// The vLLM-compatible summary of the measured (non-warm-up) requests over duration_s:
// duration, completed, failed, total_input_tokens, total_output_tokens, request_throughput,
// request_goodput (with SLOs), output_throughput, total_token_throughput,
// {mean,median,std,pNN}_{ttft,tpot,itl,e2el}_ms, plus errors_by_status (final statuses),
// refused (final 429/503), errors_5xx (requests that saw a 5xx other than 503 on any attempt,
// retried or final: a 500 is a server fault even when a retry hid it; a 503 is a refusal),
// completed_ratio, completed_or_refused_ratio, and the retries: retries (attempts after the
// first), requests_retried, refused_after_retries (final 429/503 of a retried request),
// retries_by_status and mean_retry_wait_ms (over retried requests).
nlohmann::json summarize(const std::vector<RequestResult>& results, double duration_s,
                         const SummaryOptions& options);

}  // namespace kvw::loadgen
