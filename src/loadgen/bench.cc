// loadgen/bench.cc: orchestration of one `kvwarden bench` invocation (see bench.h).
#include "loadgen/bench.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "loadgen/arrivals.h"
#include "loadgen/overload.h"
#include "loadgen/report.h"

namespace kvw::loadgen {

namespace {
// Arrivals and workload draw from separate streams of the one seed.
constexpr uint64_t kArrivalStream = 1, kWorkloadStream = 2, kRetryStream = 3, kMixStream = 4;
constexpr size_t kTimeOnlyPool =
    2000;  // distinct prompts cycled when only --duration bounds a closed loop

// Counts tokens with the target's POST /tokenize ({"prompt": ...} -> {"count": n} or
// {"tokens": [...]}, as kvwarden, vLLM and llama.cpp answer).
class TargetCounter : public TokenCounter {
 public:
  TargetCounter(HttpClient& client, std::string path, std::string model)
      : client_(client), path_(std::move(path)), model_(std::move(model)) {}
  // True when the target answered a probe with a usable count.
  bool probe() { return tokenize("hello world") > 0; }
  int count(std::string_view text) override {
    const int n = tokenize(text);
    return n >= 0 ? n : fallback_.count(text);
  }
  bool exact() const override { return true; }

 private:
  int tokenize(std::string_view text) {
    HttpRequest req;
    req.method = "POST";
    req.path = path_;
    req.timeout_s = 60;
    req.body = nlohmann::json{{"model", model_}, {"prompt", text}, {"content", text}}.dump(
        -1, ' ', false, nlohmann::json::error_handler_t::replace);
    auto r = fetch(client_, std::move(req));
    if (!r.ok() || r->status != 200) return -1;
    auto j = nlohmann::json::parse(r->body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return -1;
    if (j.contains("count") && j["count"].is_number_integer()) return j["count"].get<int>();
    if (j.contains("tokens") && j["tokens"].is_array()) return static_cast<int>(j["tokens"].size());
    return -1;
  }
  HttpClient& client_;
  std::string path_, model_;
  EstimatingCounter fallback_;
};

std::string first_model(HttpClient& client, const std::string& prefix) {
  HttpRequest req;
  req.path = prefix + "/v1/models";
  req.timeout_s = 10;
  auto r = fetch(client, std::move(req));
  if (!r.ok() || r->status != 200) return "default";
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
      j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string())
    return j["data"][0]["id"].get<std::string>();
  return "default";
}

// Any HTTP answer from /health within `wait_s` means the process is up (503 = alive, busy).
bool server_alive(HttpClient& client, const std::string& prefix, double wait_s) {
  const double until = monotonic_s() + wait_s;
  do {
    HttpRequest req;
    req.path = prefix + "/health";
    req.timeout_s = 5;
    auto r = fetch(client, std::move(req));
    if (r.ok()) return true;
    client.poll(200);
  } while (monotonic_s() < until);
  return false;
}

Result<WorkloadSpec> make_workload_spec(const BenchOptions& o) {
  WorkloadSpec w;
  w.kind = o.workload;
  auto in = LengthDist::parse(o.input_len);
  if (!in.ok()) return Error{"--input-len: " + in.message()};
  auto out = LengthDist::parse(o.output_len);
  if (!out.ok()) return Error{"--output-len: " + out.message()};
  w.input_len = in.value();
  w.output_len = out.value();
  w.prefix_len = o.prefix_len;
  w.num_prefix_groups = o.num_prefix_groups;
  w.dataset_path = o.dataset_path;
  w.num_conversations = o.num_conversations;
  w.rounds = o.rounds;
  w.max_context_tokens = o.max_context;
  if (o.input_unit != "tokens" && o.input_unit != "words")
    return Error{"--input-unit '" + o.input_unit + "': use tokens or words"};
  w.input_in_words = o.input_unit == "words";
  if (w.kind == "sharegpt" && w.dataset_path.empty())
    return Error{"--workload sharegpt needs --dataset-path"};
  return w;
}

Result<ClientMix> make_client_mix(const BenchOptions& o) {
  ClientMix m;
  m.stream_fraction = o.stream_fraction;
  if (!o.num_choices.empty()) {
    auto n = LengthDist::parse(o.num_choices);
    if (!n.ok()) return Error{"--num-choices: " + n.message()};
    m.has_num_choices = true;
    m.num_choices = n.value();
  }
  auto abort = LengthDist::parse(o.abort_after_ms);
  if (!abort.ok()) return Error{"--abort-after-ms: " + abort.message()};
  m.abort_after_ms = abort.value();
  m.abort_fraction = o.abort_fraction;
  m.impatient_fraction = o.impatient_fraction;
  return m;
}

// The server's CPU seconds now, from /proc when its pid is known (NaN otherwise).
double server_cpu_now(const BenchOptions& o) {
  return read_process_cpu_s(o.server_pid);
}

// CPU over a run: /proc readings around it when the pid is known, else its /metrics scrapes.
CpuWindow run_cpu(double cpu0, double cpu1, const RunOutput& out) {
  if (std::isfinite(cpu0) && std::isfinite(cpu1)) return {cpu1 - cpu0, out.wall_s};
  return cpu_from_snapshots(out.server);
}

// The quiet phase: the same prompts, patient SDK clients who never leave early, a closed loop
// of --quiet-concurrency. Returns completed output tokens/s; cpu receives its server CPU and
// mix the completed requests' mix (completed_mix, keys prefixed quiet_).
double measure_quiet_capacity(HttpClient& http, const BenchOptions& o, RunConfig rc,
                              std::vector<RequestSpec> specs, CpuWindow* cpu, nlohmann::json* mix) {
  for (auto& s : specs) s.abort_after_s = -1, s.impatient = false;
  rc.closed_loop = true;
  rc.concurrency = o.quiet_concurrency;
  rc.duration_s = o.quiet_phase_s;
  rc.num_requests = 0;
  rc.warmup_s = 0;
  std::cout << "quiet phase: " << o.quiet_phase_s << " s, " << o.quiet_concurrency << " in flight\n"
            << std::flush;
  const double cpu0 = server_cpu_now(o);
  RunOutput out = run_benchmark(http, rc, specs);
  *cpu = run_cpu(cpu0, server_cpu_now(o), out);
  const nlohmann::json completed = completed_mix(out.results);
  for (const auto& [k, v] : completed.items()) (*mix)["quiet_" + k] = v;
  int64_t tokens = 0;
  for (const auto& r : out.results)
    if (r.ok()) tokens += r.output_tokens;
  const double capacity =
      out.measured_duration_s > 0 ? static_cast<double>(tokens) / out.measured_duration_s : 0;
  std::cout << "quiet capacity: " << capacity << " output tokens/s\n" << std::flush;
  return capacity;
}

std::string iso_now() {
  char b[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return b;
}

Status write_file(const std::string& path, const std::string& text) {
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream out(path);
  out << text;
  if (!out) return Error{"cannot write '" + path + "'"};
  return {};
}
}  // namespace

Result<std::vector<double>> make_arrivals(const BenchOptions& o, Rng& rng) {
  if (o.pattern == "closed") {
    if (o.concurrency < 1) return Error{"--pattern closed needs --concurrency N (N >= 1)"};
    return std::vector<double>{};
  }
  const double horizon = o.duration_s > 0 ? o.duration_s : kForever;
  const size_t max_count = o.num_requests > 0 ? static_cast<size_t>(o.num_requests) : SIZE_MAX;
  ArrivalSpec spec;
  spec.burstiness = o.burstiness;
  if (o.pattern == "constant" || o.pattern == "poisson") {
    if (std::isinf(o.request_rate) && o.num_requests == 0)
      return Error{"--request-rate inf (all at once) needs --num-requests"};
    if (!(o.request_rate > 0)) return Error{"--request-rate must be > 0"};
    spec.schedule = RateSchedule::constant(o.request_rate);
    spec.evenly_spaced = o.pattern == "constant";
  } else if (o.pattern == "spike") {
    spec.schedule =
        RateSchedule::spike(o.base_rate, o.spike_rate, o.spike_start_s, o.spike_duration_s);
  } else if (o.pattern == "ramp") {
    const double d = o.ramp_duration_s > 0 ? o.ramp_duration_s : o.duration_s;
    if (!(d > 0)) return Error{"--pattern ramp needs --ramp-duration or --duration"};
    spec.schedule = RateSchedule::ramp(o.ramp_from, o.ramp_to, d);
  } else if (o.pattern == "random") {
    if (o.random_max_rate < o.random_min_rate)
      return Error{"--random-max-rate < --random-min-rate"};
    spec.schedule = RateSchedule::random(o.random_min_rate, o.random_max_rate, o.random_interval_s,
                                         horizon, rng);
  } else {
    return Error{"--pattern '" + o.pattern +
                 "': use closed, constant, poisson, spike, ramp or random"};
  }
  if (max_count == SIZE_MAX && std::isinf(horizon))
    return Error{"give --num-requests or --duration"};
  bool any_rate = false;
  for (const auto& s : spec.schedule.segments()) any_rate |= s.rate_from > 0 || s.rate_to > 0;
  if (!any_rate) return Error{"--pattern " + o.pattern + ": every rate is 0"};
  return generate_arrivals(spec, max_count, horizon, rng);
}

namespace {
std::string with_suffix(const std::string& path, const std::string& suffix) {
  const auto dot = path.rfind('.');
  const auto slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    return path + "-" + suffix;
  return path.substr(0, dot) + "-" + suffix + path.substr(dot);
}

// Options -> RunConfig; num_requests 0 means "bounded by time or by the workload".
RunConfig make_run_config(const BenchOptions& o, const std::string& path_prefix,
                          const std::string& model, std::vector<double> arrivals) {
  RunConfig rc;
  rc.path_prefix = path_prefix;
  rc.endpoint = o.endpoint;
  rc.model = model;
  rc.stream = o.stream;
  rc.ignore_eos = o.ignore_eos;
  rc.min_tokens = o.min_tokens;
  rc.temperature = o.temperature;
  if (!o.extra_body.empty()) rc.extra_body = nlohmann::json::parse(o.extra_body, nullptr, false);
  rc.request_timeout_s = o.timeout_s;
  rc.num_requests = static_cast<size_t>(o.num_requests);
  rc.duration_s = o.duration_s;
  rc.warmup_s = o.warmup_s;
  rc.drain_timeout_s = o.drain_timeout_s;
  rc.closed_loop = o.pattern == "closed";
  rc.concurrency = o.concurrency;
  rc.arrivals = std::move(arrivals);
  rc.scrape_metrics = o.scrape_metrics;
  rc.scrape_interval_s = o.scrape_interval_s;
  rc.progress = !o.quiet;
  rc.max_retries = o.max_retries;
  rc.retry_seed = Rng::derived(o.seed, kRetryStream).next_u64();
  rc.impatient_retry_delay_s = o.impatient_retry_delay_s;
  return rc;
}

// Prints PASS/FAIL per criterion and records them in the report; true when all passed.
bool judge(const std::vector<Criterion>& criteria, nlohmann::json& report) {
  bool failed = false;
  auto& arr = report["criteria"] = nlohmann::json::array();
  for (const auto& r : evaluate_criteria(criteria, report)) {
    const std::string observed =
        std::isnan(r.observed) ? "not measured" : nlohmann::json(r.observed).dump();
    std::cout << (r.pass ? "PASS  " : "FAIL  ") << r.criterion.description() << "  (observed "
              << observed << ")\n";
    arr.push_back(
        {{"description", r.criterion.description()}, {"pass", r.pass}, {"observed", observed}});
    failed |= !r.pass;
  }
  report["passed"] = !failed;
  return !failed;
}

// One run: returns 0, 1 (a criterion failed), 2 (bad options) or 3 (target unreachable).
int run_one(BenchOptions o, const std::vector<Criterion>& criteria) {
  if (Status st = resolve_vllm_options(o); !st.ok())
    return std::cerr << "kvwarden bench: " << st.message() << "\n", 2;
  auto url = parse_url(o.base_url);
  if (!url.ok()) return std::cerr << "kvwarden bench: --base-url " << url.message() << "\n", 2;
  auto slos = parse_slos(o.goodput);
  if (!slos.ok()) return std::cerr << "kvwarden bench: " << slos.message() << "\n", 2;
  auto wspec = make_workload_spec(o);
  if (!wspec.ok()) return std::cerr << "kvwarden bench: " << wspec.message() << "\n", 2;
  if (!o.extra_body.empty() && !nlohmann::json::parse(o.extra_body, nullptr, false).is_object())
    return std::cerr << "kvwarden bench: --extra-body must be a JSON object\n", 2;
  auto mix = make_client_mix(o);
  if (!mix.ok()) return std::cerr << "kvwarden bench: " << mix.message() << "\n", 2;
  if (o.quiet_phase_s > 0 && o.quiet_concurrency < 1)
    return std::cerr << "kvwarden bench: --quiet-phase needs --quiet-concurrency N (N >= 1)\n", 2;
  const bool multiturn = o.workload == "multiturn";
  if (!multiturn && o.num_requests == 0 && o.duration_s == 0) o.num_requests = 100;
  BenchOptions arrival_options = o;
  if (multiturn && o.num_requests == 0)
    arrival_options.num_requests = int64_t{o.num_conversations} * o.rounds;
  Rng arrival_rng = Rng::derived(o.seed, kArrivalStream);
  auto arrivals = make_arrivals(arrival_options, arrival_rng);
  if (!arrivals.ok()) return std::cerr << "kvwarden bench: " << arrivals.message() << "\n", 2;

  std::cout << "kvwarden bench: target " << o.base_url << o.endpoint << "\n" << std::flush;
  auto client = HttpClient::create(url->host, url->port);
  if (!client.ok()) return std::cerr << "kvwarden bench: " << client.message() << "\n", 3;
  HttpClient& http = *client.value();
  if (!server_alive(http, url->path_prefix, 2)) {
    std::cerr << "kvwarden bench: cannot reach " << o.base_url << " (GET /health failed)\n";
    return 3;
  }
  const std::string model = o.model.empty() ? first_model(http, url->path_prefix) : o.model;

  TargetCounter target_counter(http, url->path_prefix + "/tokenize", model);
  EstimatingCounter estimate;
  const bool exact = o.tokenize && target_counter.probe();
  TokenCounter& counter = exact ? static_cast<TokenCounter&>(target_counter) : estimate;
  std::cerr << "kvwarden bench: prompt lengths "
            << (exact ? "counted by the target's /tokenize (exact)"
                      : "estimated at ~4 characters per token (target has no usable /tokenize)")
            << "\n";
  size_t num_specs = kTimeOnlyPool;
  if (o.num_requests > 0)
    num_specs = static_cast<size_t>(o.num_requests);
  else if (o.pattern != "closed")
    num_specs = arrivals->size();
  Rng workload_rng = Rng::derived(o.seed, kWorkloadStream);
  auto specs = build_workload(wspec.value(), num_specs, workload_rng, counter);
  if (!specs.ok()) return std::cerr << "kvwarden bench: " << specs.message() << "\n", 2;
  Rng mix_rng = Rng::derived(o.seed, kMixStream);
  if (Status st = assign_client_mix(specs.value(), mix.value(), mix_rng); !st.ok())
    return std::cerr << "kvwarden bench: " << st.message() << "\n", 2;

  RunConfig rc = make_run_config(o, url->path_prefix, model, std::move(arrivals.value()));
  if (multiturn)
    rc.num_requests = std::min(specs->size(), o.num_requests > 0 ? rc.num_requests : SIZE_MAX);
  std::cout << "model " << model << ", pattern " << o.pattern << ", workload " << o.workload << ", "
            << (rc.closed_loop ? std::to_string(o.concurrency) + " in flight"
                               : std::to_string(rc.arrivals.size()) + " arrivals")
            << ", seed " << o.seed << "\n"
            << std::flush;

  CpuWindow quiet_cpu;
  nlohmann::json quiet_mix = nlohmann::json::object();
  double capacity = o.quiet_capacity > 0 ? o.quiet_capacity : NAN;
  if (o.quiet_phase_s > 0)
    capacity = measure_quiet_capacity(http, o, rc, specs.value(), &quiet_cpu, &quiet_mix);

  const double cpu0 = server_cpu_now(o);
  RunOutput out = run_benchmark(http, rc, specs.value());
  const CpuWindow storm_cpu = run_cpu(cpu0, server_cpu_now(o), out);
  const bool alive = server_alive(http, url->path_prefix, 10);

  SummaryOptions sopts{o.percentiles, slos.value(), o.percentile_metrics};
  nlohmann::json context = {
      {"name", o.name},
      {"date", iso_now()},
      {"base_url", o.base_url},
      {"endpoint", o.endpoint},
      {"model_id", model},
      {"pattern", o.pattern},
      {"burstiness", o.burstiness},
      // vLLM: null when uncapped
      {"max_concurrency", o.concurrency > 0 ? nlohmann::json(o.concurrency) : nlohmann::json()},
      {"num_prompts", o.num_requests},
      {"max_retries", o.max_retries},
      {"seed", o.seed},
      {"workload", o.workload},
      {"input_len", o.input_len},
      {"output_len", o.output_len},
      {"stream", o.stream},
      {"tokenizer", exact ? "target /tokenize" : "estimated ~4 chars/token"}};
  context["request_rate"] =
      std::isinf(o.request_rate) ? nlohmann::json("inf") : nlohmann::json(o.request_rate);
  nlohmann::json report = build_report(out, sopts, context, o.warmup_s);
  report["server_alive_after"] = alive ? 1 : 0;
  OverloadOptions oopts{o.percentiles, o.answer_bound_s * 1e3};
  const nlohmann::json overload = summarize_overload(out.results, out.measured_duration_s, oopts);
  for (auto& [k, v] : overload.items()) report[k] = v;
  int64_t refusals_in_run = 0;  // warm-up included: the CPU window spans the whole run
  for (const auto& r : out.results) refusals_in_run += r.refusals;
  const nlohmann::json vs_quiet = compare_to_quiet(overload["goodput_tokens_per_s"].get<double>(),
                                                   capacity, refusals_in_run, storm_cpu, quiet_cpu);
  for (auto& [k, v] : vs_quiet.items()) report[k] = v;
  for (auto& [k, v] : quiet_mix.items()) report[k] = v;
  if (o.quiet_phase_s > 0)  // the reference both phases' completed mixes are read against
    report.update(workload_mix(specs.value()));
  report["quiet_capacity_source"] = o.quiet_phase_s > 0    ? "measured"
                                    : o.quiet_capacity > 0 ? "given"
                                                           : "none";
  std::cout << format_summary(report, sopts);
  const bool storm = o.quiet_phase_s > 0 || o.quiet_capacity > 0 || o.impatient_fraction > 0 ||
                     o.abort_fraction > 0 || report.value("refusals", 0) > 0;
  if (storm) std::cout << format_overload(report);
  std::cout << "server alive after the run: " << (alive ? "yes" : "NO") << "\n";

  const bool failed = !criteria.empty() && !judge(criteria, report);
  const std::string vllm_path = vllm_result_path(o, model, std::time(nullptr));
  for (const auto& [path, text] :
       {std::pair{o.output_json, report.dump(2)}, std::pair{vllm_path, report.dump(2)},
        std::pair{o.output_html, render_html(report)}}) {
    if (path.empty()) continue;
    Status st = write_file(path, text);
    if (!st.ok()) return std::cerr << "kvwarden bench: " << st.message() << "\n", 2;
    std::cout << "wrote " << path << "\n";
  }
  return failed ? 1 : 0;
}
}  // namespace

int run_bench(const std::string& scenario_path, const OptionOverrides& overrides) {
  std::vector<ScenarioRun> runs(1);
  runs[0].name = "bench";
  if (!scenario_path.empty()) {
    auto s = load_scenario(scenario_path);
    if (!s.ok()) return std::cerr << "kvwarden bench: " << s.message() << "\n", 2;
    std::cout << "scenario " << s->name << ": " << s->description << "\n";
    runs = s->runs;
  }
  int worst = 0;
  for (const auto& run : runs) {
    BenchOptions o;
    Status st = apply_json_args(o, run.args);
    const bool scenario = !scenario_path.empty();
    if (scenario) {
      o.output_json = "bench-results/" + run.name + ".json";
      o.output_html = "bench-results/" + run.name + ".html";
    }
    for (const auto& [k, v] : overrides) {
      if (!st.ok()) break;
      st = apply_option(o, k, v);
      // One --output-json for a multi-run scenario: one file per run.
      if ((k == "output-json" || k == "output-html") && runs.size() > 1) {
        std::string& p = k == "output-json" ? o.output_json : o.output_html;
        p = with_suffix(v, run.name);
      }
    }
    if (!st.ok()) return std::cerr << "kvwarden bench: " << st.message() << "\n", 2;
    if (runs.size() > 1) std::cout << "\n=== run " << run.name << " ===\n";
    const int rc = run_one(o, run.criteria);
    if (rc >= 2) return rc;
    worst = std::max(worst, rc);
  }
  if (!scenario_path.empty()) std::cout << (worst == 0 ? "scenario PASS\n" : "scenario FAIL\n");
  return worst;
}

}  // namespace kvw::loadgen
