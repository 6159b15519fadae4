// loadgen/options.cc: the option table, scenario files and criteria evaluation.
#include "loadgen/options.h"

#include <cmath>
#include <fstream>
#include <iomanip>
#include <sstream>

namespace kvw::loadgen {

namespace {
using O = BenchOptions;

Result<double> to_double(const std::string& name, const std::string& v) {
  try {
    size_t used = 0;
    const double d = std::stod(v, &used);
    if (used == v.size()) return d;
  } catch (...) {
  }
  if (v == "inf") return std::numeric_limits<double>::infinity();
  return Error{"--" + name + " '" + v + "' is not a number"};
}

Result<bool> to_bool(const std::string& name, const std::string& v) {
  if (v == "true" || v == "1" || v.empty()) return true;
  if (v == "false" || v == "0") return false;
  return Error{"--" + name + " '" + v + "' is not true/false"};
}

// Setter factories: each parses the text and stores it in one field.
OptionDef str(std::string name, std::string help, std::string O::*field) {
  return {name, std::move(help), false, false, [field](O& o, const std::string& v) -> Status {
            o.*field = v;
            return {};
          }};
}
template <typename T>
OptionDef num(std::string name, std::string help, T O::*field, double min_value) {
  return {name, std::move(help), false, false,
          [name, field, min_value](O& o, const std::string& v) -> Status {
            auto d = to_double(name, v);
            if (!d.ok()) return d.error();
            if (!(d.value() >= min_value))
              return Error{"--" + name + " must be >= " + std::to_string(min_value)};
            if constexpr (std::is_integral_v<T>) {
              if (std::isinf(d.value())) return Error{"--" + name + " must be finite"};
            }
            o.*field = static_cast<T>(d.value());
            return {};
          }};
}
OptionDef flag(std::string name, std::string help, bool O::*field, bool value_when_set) {
  return {name, std::move(help), true, false,
          [name, field, value_when_set](O& o, const std::string& v) -> Status {
            auto b = to_bool(name, v);
            if (!b.ok()) return b.error();
            o.*field = b.value() ? value_when_set : !value_when_set;
            return {};
          }};
}

std::vector<std::string> split_list(const std::string& v) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : v + " ") {
    if (c == ' ' || c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  return out;
}

std::vector<OptionDef> make_defs() {
  std::vector<OptionDef> d = {
      str("name", "Name of the run (report title and file names)", &O::name),
      str("base-url", "Target server (default http://127.0.0.1:8000)", &O::base_url),
      str("endpoint", "API path: /v1/completions or /v1/chat/completions", &O::endpoint),
      str("model", "Model name to send (default: first of GET /v1/models)", &O::model),
      flag("no-stream", "Non-streaming requests (no TTFT/ITL)", &O::stream, false),
      num("timeout", "Per-request timeout in seconds", &O::timeout_s, 0.001),
      num("num-requests",
          "Requests to send (0: as many as --duration allows; 100 without --duration)",
          &O::num_requests, 0),
      num("duration", "Stop sending after this many seconds (0: no limit)", &O::duration_s, 0),
      num("warmup", "Seconds at the start whose requests are not measured", &O::warmup_s, 0),
      num("drain-timeout", "Seconds to wait for in-flight requests after sending stops",
          &O::drain_timeout_s, 0),
      num("max-retries",
          "Retries per request, as the openai SDK does: on 408, 409, 429, 5xx and connection "
          "failures, after Retry-After/retry-after-ms when under 60 s, else 0.5 s doubling to 8 "
          "s minus up to 25% jitter (default 2, the SDK's; 0: no retries, raw refusals). A "
          "retried request keeps its first send time: TTFT and E2EL include the retries",
          &O::max_retries, 0),
      str("pattern", "closed | constant | poisson | spike | ramp | random", &O::pattern),
      num("request-rate", "Requests/s for constant and poisson (inf: all at once)",
          &O::request_rate, 0),
      num("burstiness", "Gamma shape of gaps: 1 = Poisson, <1 burstier, >1 smoother",
          &O::burstiness, 1e-6),
      num("concurrency", "closed: requests kept in flight; others: cap on in flight (0 = none)",
          &O::concurrency, 0),
      num("base-rate", "spike: rate outside the spike (req/s)", &O::base_rate, 0),
      num("spike-rate", "spike: rate during the spike (req/s)", &O::spike_rate, 0),
      num("spike-start", "spike: seconds before the spike", &O::spike_start_s, 0),
      num("spike-duration", "spike: seconds the spike lasts", &O::spike_duration_s, 1e-6),
      num("ramp-from", "ramp: starting rate (req/s)", &O::ramp_from, 0),
      num("ramp-to", "ramp: final rate (req/s)", &O::ramp_to, 0),
      num("ramp-duration", "ramp: seconds to go from --ramp-from to --ramp-to (0: --duration)",
          &O::ramp_duration_s, 0),
      num("random-min-rate", "random: lowest rate (req/s)", &O::random_min_rate, 0),
      num("random-max-rate", "random: highest rate (req/s)", &O::random_max_rate, 0),
      num("random-interval", "random: seconds between rate changes", &O::random_interval_s, 1e-3),
      num("seed", "Seed of arrivals and workload (same seed, same run)", &O::seed, 0),
      str("workload", "random | sharegpt | multiturn | extreme", &O::workload),
      str("input-len", "Prompt tokens: fixed:N uniform:LO:HI normal:MEAN:STD lognormal:MEAN:SIGMA",
          &O::input_len),
      str("output-len", "max_tokens, same forms as --input-len", &O::output_len),
      num("prefix-len", "random: tokens of prefix shared within a group", &O::prefix_len, 0),
      num("num-prefix-groups", "random: number of distinct shared prefixes", &O::num_prefix_groups,
          1),
      str("dataset-path", "sharegpt: JSON file of conversations (from human/gpt)",
          &O::dataset_path),
      num("num-conversations", "multiturn: conversations in parallel", &O::num_conversations, 1),
      num("rounds", "multiturn: rounds per conversation, each resending the whole history",
          &O::rounds, 1),
      num("max-context", "multiturn: tokens the history grows to by the last round",
          &O::max_context, 2),
      flag("no-ignore-eos", "Do not send \"ignore_eos\": true", &O::ignore_eos, false),
      flag("min-tokens",
           "Also send \"min_tokens\" = max_tokens (vLLM's extension: EOS is masked, so every "
           "request runs to max_tokens)",
           &O::min_tokens, true),
      num("temperature", "Sampling temperature sent with every request", &O::temperature, 0),
      str("extra-body",
          "JSON object merged into every request body, e.g. '{\"top_p\": 0.9, \"top_k\": 0}'",
          &O::extra_body),
      flag("no-tokenize", "Estimate prompt lengths (~4 chars/token) instead of POST /tokenize",
           &O::tokenize, false),
      str("output-json", "Write the JSON report here", &O::output_json),
      str("output-html", "Write the HTML report here", &O::output_html),
      flag("no-metrics", "Do not scrape the target's /metrics", &O::scrape_metrics, false),
      num("scrape-interval", "Seconds between /metrics scrapes", &O::scrape_interval_s, 0.05),
      flag("quiet", "No live progress line", &O::quiet, true),
      // Retry storms: a mix of clients, and the overload figures (goodput vs quiet capacity).
      str("input-unit", "random: whether --input-len counts tokens or words", &O::input_unit),
      num("stream-fraction",
          "Share of requests streamed, drawn per request (default: all, or none with "
          "--no-stream)",
          &O::stream_fraction, 0),
      str("num-choices", "\"n\" per request, same forms as --input-len (default: not sent)",
          &O::num_choices),
      num("abort-fraction", "Share of requests whose client leaves early (closes the connection)",
          &O::abort_fraction, 0),
      str("abort-after-ms",
          "When those clients leave, in ms after the first send (same forms as --input-len; "
          "default uniform:1000:10000)",
          &O::abort_after_ms),
      num("impatient-fraction",
          "Share of requests whose client ignores Retry-After and retries any 408/409/429/5xx or "
          "connection failure after --impatient-retry-delay, with no cap, until --timeout has "
          "passed since its first send",
          &O::impatient_fraction, 0),
      num("impatient-retry-delay", "Seconds an impatient client waits before retrying (0.05)",
          &O::impatient_retry_delay_s, 0),
      num("quiet-phase",
          "Seconds of a quiet phase before the run (closed loop, --quiet-concurrency in flight, "
          "patient clients) whose completed tokens/s is the capacity goodput_ratio compares with",
          &O::quiet_phase_s, 0),
      num("quiet-concurrency", "Requests in flight during --quiet-phase", &O::quiet_concurrency, 0),
      num("quiet-capacity",
          "The server's quiet capacity in output tokens/s, given instead of a --quiet-phase",
          &O::quiet_capacity, 0),
      num("answer-bound",
          "Seconds an attempt may wait for its answer (status line; a 200 stream's first token) "
          "before it counts in unanswered_past_bound (60)",
          &O::answer_bound_s, 0),
      num("server-pid",
          "Target server's process id (same machine): its CPU per refusal from /proc/PID/stat "
          "(else from process_cpu_seconds_total in /metrics, when exported)",
          &O::server_pid, 0),
  };
  auto set_percentiles = [](O& o, const std::string& v) -> Status {
    o.percentiles.clear();
    for (const auto& p : split_list(v)) {
      auto x = to_double("percentiles", p);
      if (!x.ok()) return x.error();
      if (!(x.value() >= 0 && x.value() <= 100))
        return Error{"--percentiles " + p + ": not in 0..100"};
      o.percentiles.push_back(x.value());
    }
    return {};
  };
  d.push_back(
      {"percentiles", "Percentiles to report, e.g. 50,90,95,99", false, true, set_percentiles});
  // vLLM `bench serve` names for the same settings, so its command lines run unchanged.
  d.push_back(num("num-prompts", "vLLM's name for --num-requests", &O::num_requests, 0));
  d.push_back(num("max-concurrency", "vLLM's name for --concurrency (cap on requests in flight)",
                  &O::concurrency, 1));
  d.push_back({"dataset-name", "vLLM's name for --workload: random or sharegpt", false, false,
               [](O& o, const std::string& v) -> Status {
                 if (v != "random" && v != "sharegpt")
                   return Error{"--dataset-name '" + v + "': kvwarden bench has random, sharegpt"};
                 o.workload = v;
                 return {};
               }});
  d.push_back(num("random-input-len", "random: prompt tokens (vLLM; --input-len fixed:N)",
                  &O::random_input_len, 1));
  d.push_back(num("random-output-len", "random: max_tokens (vLLM; --output-len fixed:N)",
                  &O::random_output_len, 1));
  d.push_back(num("random-range-ratio",
                  "random: lengths uniform in [N (1 - r), N (1 + r)] (vLLM; default 0)",
                  &O::random_range_ratio, 0));
  d.push_back({"metric-percentiles", "vLLM's name for --percentiles, e.g. 25,50,99", false, true,
               set_percentiles});
  d.push_back({"percentile-metrics",
               "Metrics that get percentiles in the report: some of ttft,tpot,itl,e2el (vLLM; "
               "default all four)",
               false, true, [](O& o, const std::string& v) -> Status {
                 o.percentile_metrics = split_list(v);
                 for (const auto& m : o.percentile_metrics)
                   if (m != "ttft" && m != "tpot" && m != "itl" && m != "e2el")
                     return Error{"--percentile-metrics " + m + ": use ttft, tpot, itl, e2el"};
                 return {};
               }});
  d.push_back(flag("ignore-eos", "Send \"ignore_eos\": true (vLLM; the default here)",
                   &O::ignore_eos, true));
  d.push_back(str("label", "vLLM's name for --name (result file prefix)", &O::name));
  d.push_back(str("host", "Target host (vLLM; with --port instead of --base-url)", &O::host));
  d.push_back(num("port", "Target port (vLLM; with --host instead of --base-url)", &O::port, 1));
  d.push_back(flag("save-result",
                   "Also write the JSON report as vLLM does: [--result-dir/]--result-filename, "
                   "default {name}-{rate}qps[-concurrency{N}]-{model}-{YYYYmmdd-HHMMSS}.json",
                   &O::save_result, true));
  d.push_back(str("result-dir", "Directory for --save-result (created)", &O::result_dir));
  d.push_back(str("result-filename", "File name for --save-result", &O::result_filename));
  d.push_back({"goodput", "SLOs in ms for goodput, e.g. ttft:500 tpot:50 e2el:2000", false, true,
               [](O& o, const std::string& v) -> Status {
                 o.goodput = split_list(v);
                 return {};
               }});
  return d;
}
}  // namespace

const std::vector<OptionDef>& option_defs() {
  static const std::vector<OptionDef> defs = make_defs();
  return defs;
}

Status apply_option(BenchOptions& options, const std::string& name, const std::string& value) {
  for (const auto& d : option_defs())
    if (d.name == name) return d.set(options, value);
  return Error{"unknown option '" + name + "'"};
}

Status apply_json_args(BenchOptions& options, const nlohmann::json& args) {
  if (!args.is_object()) return Error{"scenario \"args\" must be an object"};
  for (auto& [k, v] : args.items()) {
    std::string text;
    if (v.is_string()) {
      text = v.get<std::string>();
    } else if (v.is_array()) {
      for (const auto& x : v) {
        if (!text.empty()) text += ' ';
        text += x.is_string() ? x.get<std::string>() : x.dump();
      }
    } else {
      text = v.dump();
    }
    KVW_RETURN_IF_ERROR(apply_option(options, k, text));
  }
  return {};
}

Status resolve_vllm_options(BenchOptions& o) {
  const double r = o.random_range_ratio;
  if (!(r < 1)) return Error{"--random-range-ratio must be in [0, 1)"};
  auto dist = [r](int n) {
    if (r == 0) return "fixed:" + std::to_string(n);
    return "uniform:" + std::to_string(int(std::floor(n * (1 - r)))) + ":" +
           std::to_string(int(std::ceil(n * (1 + r))));
  };
  if (o.random_input_len > 0) o.input_len = dist(o.random_input_len);
  if (o.random_output_len > 0) o.output_len = dist(o.random_output_len);
  if (!o.host.empty() || o.port > 0) {
    if (o.port > 65535) return Error{"--port must be <= 65535"};
    o.base_url = "http://" + (o.host.empty() ? std::string("127.0.0.1") : o.host) + ":" +
                 std::to_string(o.port > 0 ? o.port : 8000);
  }
  return {};
}

std::string vllm_result_path(const BenchOptions& o, const std::string& model_id, std::time_t now) {
  if (!o.save_result) return {};
  std::string file = o.result_filename;
  if (file.empty()) {
    // Python's str(float): "inf", "4.0", "2.5".
    std::ostringstream rate;
    if (std::isinf(o.request_rate)) {
      rate << "inf";
    } else if (o.request_rate == std::floor(o.request_rate)) {
      rate << std::fixed << std::setprecision(1) << o.request_rate;
    } else {
      rate << o.request_rate;
    }
    char dt[32];
    std::strftime(dt, sizeof dt, "%Y%m%d-%H%M%S", std::localtime(&now));
    const std::string base = model_id.substr(model_id.rfind('/') + 1);
    file = o.name + "-" + rate.str() + "qps" +
           (o.concurrency > 0 ? "-concurrency" + std::to_string(o.concurrency) : "") + "-" + base +
           "-" + dt + ".json";
  }
  return o.result_dir.empty() ? file : o.result_dir + "/" + file;
}

std::string Criterion::description() const {
  std::ostringstream os;
  os << metric << " " << op << " " << value;
  return os.str();
}

namespace {
Result<std::vector<Criterion>> parse_criteria(const nlohmann::json& j, const std::string& where) {
  std::vector<Criterion> out;
  if (j.is_null()) return out;
  if (!j.is_array()) return Error{where + ": \"criteria\" must be an array"};
  for (const auto& c : j) {
    if (!c.is_object() || !c.contains("metric") || !c.contains("op") || !c.contains("value") ||
        !c["metric"].is_string() || !c["op"].is_string() || !c["value"].is_number())
      return Error{where +
                   ": each criterion needs \"metric\" (string), \"op\" and \"value\" (number)"};
    Criterion k{c["metric"].get<std::string>(), c["op"].get<std::string>(),
                c["value"].get<double>()};
    if (k.op != "<" && k.op != "<=" && k.op != "==" && k.op != ">=" && k.op != ">")
      return Error{where + ": criterion op '" + k.op + "' must be <, <=, ==, >= or >"};
    out.push_back(k);
  }
  return out;
}
}  // namespace

Result<Scenario> load_scenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error{"--scenario '" + path + "': cannot open"};
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Error{"--scenario '" + path + "': not a JSON object"};
  Scenario s;
  s.name = j.value("name", std::string("scenario"));
  s.description = j.value("description", std::string());
  auto common = parse_criteria(j.value("criteria", nlohmann::json()), path);
  if (!common.ok()) return common.error();
  const nlohmann::json base = j.value("args", nlohmann::json::object());
  BenchOptions probe;  // reject unknown or malformed args now, not after a long run
  KVW_RETURN_IF_ERROR(apply_json_args(probe, base));
  const nlohmann::json runs = j.value("runs", nlohmann::json::array({nlohmann::json::object()}));
  if (!runs.is_array() || runs.empty())
    return Error{"--scenario '" + path + "': \"runs\" must be a non-empty array"};
  for (const auto& r : runs) {
    ScenarioRun run;
    run.name =
        runs.size() == 1 ? s.name : s.name + "-" + r.value("name", std::to_string(s.runs.size()));
    run.args = base;
    const nlohmann::json own_args = r.value("args", nlohmann::json::object());
    for (auto& [k, v] : own_args.items()) run.args[k] = v;
    run.args["name"] = run.name;
    KVW_RETURN_IF_ERROR(apply_json_args(probe, run.args));
    auto own = parse_criteria(r.value("criteria", nlohmann::json()), path);
    if (!own.ok()) return own.error();
    run.criteria = common.value();
    run.criteria.insert(run.criteria.end(), own.value().begin(), own.value().end());
    s.runs.push_back(std::move(run));
  }
  return s;
}

std::vector<CriterionResult> evaluate_criteria(const std::vector<Criterion>& criteria,
                                               const nlohmann::json& report) {
  std::vector<CriterionResult> out;
  for (const auto& c : criteria) {
    CriterionResult r{c, NAN, false};
    if (report.contains(c.metric) && report[c.metric].is_number())
      r.observed = report[c.metric].get<double>();
    if (report.contains(c.metric) && report[c.metric].is_boolean())
      r.observed = report[c.metric].get<bool>();
    const double x = r.observed, v = c.value;
    if (!std::isnan(x)) {
      r.pass = c.op == "<"    ? x < v
               : c.op == "<=" ? x <= v
               : c.op == "==" ? x == v
               : c.op == ">=" ? x >= v
                              : x > v;
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace kvw::loadgen
