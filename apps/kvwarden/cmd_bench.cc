// kvwarden bench: drives any OpenAI-compatible endpoint (kvwarden, vLLM, llama.cpp's server)
// with a traffic pattern and a workload, and reports client latencies and the server's own
// /metrics. Flags come from one table in loadgen/options.h, which scenario files also use.
#include <memory>
#include <string>

#include "apps/kvwarden/commands.h"
#include "loadgen/bench.h"

namespace kvw::app {

namespace {
struct BenchFlags {
  std::string scenario;
  loadgen::OptionOverrides overrides;  // in command-line order
};
}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<BenchFlags>();  // shared: CLI11 keeps the callbacks past this call
  CLI::App* sub = app.add_subcommand(
      "bench",
      "Benchmark an OpenAI-compatible server: traffic patterns, workloads, latency percentiles, "
      "goodput, server /metrics");
  // The long description goes under the flags, so `kvwarden --help` lists bench in one line.
  sub->footer(
      "Targets http://127.0.0.1:8000 by default. Reports TTFT/TPOT/ITL/E2EL percentiles, "
      "goodput and the server's /metrics over time, as text, JSON and HTML.\n"
      "408/409/429/5xx and connection failures are retried as the openai SDK does (--max-retries\n"
      "2, Retry-After honoured); latencies count from a request's first attempt.\n"
      "`vllm bench serve` flag names work as well (--num-prompts, --max-concurrency,\n"
      "--dataset-name random|sharegpt, --random-input-len, --random-output-len,\n"
      "--percentile-metrics, --metric-percentiles, --save-result, --result-dir, ...).\n"
      "Example: kvwarden bench --pattern poisson --request-rate 4 --num-requests 200\n"
      "         kvwarden bench --dataset-name random --random-input-len 1024 --num-prompts 200\n"
      "             --max-concurrency 16 --save-result --result-dir results\n"
      "         kvwarden bench --scenario bench/scenarios/bursts.json");
  sub->add_option("--scenario", flags->scenario,
                  "Scenario file (JSON: args + pass criteria); other flags override its args")
      ->check(CLI::ExistingFile);
  for (const auto& def : loadgen::option_defs()) {
    const std::string name = def.name;
    if (def.is_flag) {
      sub->add_flag_function(
          "--" + name, [flags, name](int64_t) { flags->overrides.emplace_back(name, "true"); },
          def.help);
    } else if (def.multi) {
      sub->add_option_function<std::vector<std::string>>(
          "--" + name,
          [flags, name](const std::vector<std::string>& v) {
            std::string joined;
            for (const auto& x : v) {
              if (!joined.empty()) joined += ' ';
              joined += x;
            }
            flags->overrides.emplace_back(name, joined);
          },
          def.help);
    } else {
      sub->add_option_function<std::string>(
          "--" + name,
          [flags, name](const std::string& v) { flags->overrides.emplace_back(name, v); },
          def.help);
    }
  }
  sub->callback(
      [flags, &exit_code] { exit_code = loadgen::run_bench(flags->scenario, flags->overrides); });
}

}  // namespace kvw::app
