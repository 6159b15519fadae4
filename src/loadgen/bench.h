// loadgen/bench.h: `kvwarden bench` end to end: validate options, reach the target, build the
// workload and arrival times, run, check the server is still alive, print the summary and write
// the JSON/HTML reports; for a scenario, do that per run and print PASS/FAIL per criterion.
// Single-threaded; prints to stdout (results) and stderr (progress, notes).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "loadgen/options.h"
#include "loadgen/runner.h"

namespace kvw::loadgen {

// Options given on the command line, in order, as (flag name, value); applied after a scenario's.
using OptionOverrides = std::vector<std::pair<std::string, std::string>>;

// Returns the exit code: 0 ok (and every criterion passed), 1 a criterion failed,
// 2 bad options, 3 target unreachable.
int run_bench(const std::string& scenario_path, const OptionOverrides& overrides);

// Send times for the options' open-loop pattern (empty for "closed"); checks the pattern's
// flags. No I/O; exposed for tests.
Result<std::vector<double>> make_arrivals(const BenchOptions& options, Rng& rng);

}  // namespace kvw::loadgen
