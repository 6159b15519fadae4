// loadgen/options.h: every `kvwarden bench` setting, under the flag names the CLI uses, and
// scenario files (bench/scenarios/*.json) that set the same names plus pass criteria.
// One table defines the flags, so a scenario's "args" and the command line cannot disagree;
// command-line values are applied after the scenario's and win. Pure data and parsing.
#pragma once

#include <cstdint>
#include <ctime>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace kvw::loadgen {

struct BenchOptions {
  std::string name = "bench";                      // report title and file stem
  std::string base_url = "http://127.0.0.1:8000";  // target server
  std::string endpoint = "/v1/completions";        // or /v1/chat/completions
  std::string model;                               // empty: first id of GET /v1/models
  bool stream = true;
  double timeout_s = 600;    // per request
  int64_t num_requests = 0;  // 0: bounded by duration only (or 100)
  double duration_s = 0;     // stop sending after this many seconds
  double warmup_s = 0;       // sent in this window: not measured
  double drain_timeout_s = 120;
  int max_retries = 2;  // SDK-style retries per request (the openai SDKs' default); 0: none
  std::string pattern = "poisson";  // closed|constant|poisson|spike|ramp|random
  double request_rate = std::numeric_limits<double>::infinity();  // constant/poisson, req/s
  double burstiness = 1.0;  // gamma shape of inter-arrival gaps
  int concurrency = 0;      // closed: in flight; open: cap (0 = none)
  double base_rate = 1, spike_rate = 10, spike_start_s = 5, spike_duration_s = 5;
  double ramp_from = 1, ramp_to = 10, ramp_duration_s = 0;  // 0: the run's duration
  double random_min_rate = 1, random_max_rate = 10, random_interval_s = 5;
  uint64_t seed = 0;
  std::string workload = "random";  // random|sharegpt|multiturn|extreme
  std::string input_len = "fixed:256", output_len = "fixed:64";
  int prefix_len = 0, num_prefix_groups = 1;
  std::string dataset_path;
  int num_conversations = 4, rounds = 16, max_context = 8192;
  bool ignore_eos = true, min_tokens = false;
  double temperature = 0;
  std::string extra_body;  // JSON object merged into every request body (top_p, top_k, ...)
  bool tokenize = true;    // use the target's /tokenize when it has one
  std::vector<double> percentiles = {50, 90, 95, 99};
  std::vector<std::string> goodput;  // "ttft:500" ...
  std::string output_json, output_html;
  bool scrape_metrics = true;
  double scrape_interval_s = 1;
  bool quiet = false;  // no progress line
  // Client mix and overload accounting (retry storms; workload.h ClientMix, overload.h).
  std::string input_unit = "tokens";  // random: --input-len counts tokens or words
  double stream_fraction = -1;        // share of requests streamed; < 0: --no-stream decides
  std::string num_choices;            // "n" distribution; empty: not sent
  double abort_fraction = 0;
  std::string abort_after_ms = "uniform:1000:10000";
  double impatient_fraction = 0;
  double impatient_retry_delay_s = 0.05;
  double quiet_phase_s = 0;  // > 0: measure capacity with --quiet-concurrency first
  int quiet_concurrency = 0;
  double quiet_capacity = 0;  // tokens/s given instead of measured (0: none)
  double answer_bound_s = 60;
  int server_pid = 0;  // read its CPU from /proc (0: from /metrics if exported)
  // vLLM `bench serve` vocabulary; resolve_vllm_options() turns these into the fields above.
  int random_input_len = 0, random_output_len = 0;  // 0: not given
  double random_range_ratio = 0;  // lengths uniform in [N (1 - r), N (1 + r)], as vLLM's random
  std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
  std::string host;                         // --host/--port: base URL http://host:port
  int port = 0;                             //   (vLLM's defaults 127.0.0.1 and 8000)
  bool save_result = false;                 // --save-result: write the JSON report ...
  std::string result_dir, result_filename;  // ... here, under this name (else vLLM's)
};

struct OptionDef {
  std::string name;  // flag without "--"
  std::string help;
  bool is_flag = false;  // takes no value ("true" when given)
  bool multi = false;    // takes several values, joined with ' '
  std::function<Status(BenchOptions&, const std::string&)> set;
};
const std::vector<OptionDef>& option_defs();

Status apply_option(BenchOptions& options, const std::string& name, const std::string& value);
// --random-input-len/--random-output-len (with --random-range-ratio) become --input-len and
// --output-len, --host/--port the base URL; errors name the flag. Call once all options are
// applied.
Status resolve_vllm_options(BenchOptions& options);
// Where --save-result writes, as vLLM's compute_result_filename: [result_dir/]result_filename,
// or "{name}-{request_rate}qps[-concurrency{N}]-{model basename}-{YYYYmmdd-HHMMSS}.json".
// Empty without --save-result.
std::string vllm_result_path(const BenchOptions& options, const std::string& model_id,
                             std::time_t now);
// Scenario "args": {"pattern": "spike", "spike-rate": 100, "no-stream": true, "goodput": [..]}.
Status apply_json_args(BenchOptions& options, const nlohmann::json& args);

struct Criterion {
  std::string metric;  // a numeric field of the JSON report, e.g. "errors_5xx"
  std::string op;      // <, <=, ==, >=, >
  double value = 0;
  std::string description() const;
};

struct ScenarioRun {
  std::string name;
  nlohmann::json args = nlohmann::json::object();  // on top of the scenario's args
  std::vector<Criterion> criteria;                 // scenario-wide ones included
};

struct Scenario {
  std::string name, description;
  std::vector<ScenarioRun> runs;
};
Result<Scenario> load_scenario(const std::string& path);

struct CriterionResult {
  Criterion criterion;
  double observed = 0;  // NaN when the report lacks the metric (counts as FAIL)
  bool pass = false;
};
std::vector<CriterionResult> evaluate_criteria(const std::vector<Criterion>& criteria,
                                               const nlohmann::json& report);

}  // namespace kvw::loadgen
