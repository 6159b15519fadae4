// kvsim/report.h: the paged-vs-contiguous comparison as a table (stdout), JSON and an SVG plot
// (utilisation and concurrent sequences over time, both allocators, axes and legend).
// Pure functions of the results; no I/O beyond the stream passed in.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "kvsim/sim.h"

namespace kvw::kvsim {

// What was run, for the report headers.
struct RunInfo {
  std::string workload;  // "multiturn (seed 1, 16 conversations)" or "trace t.jsonl"
  uint64_t num_requests = 0;
};

// Paged sustained concurrent sequences / contiguous (0 when contiguous sustained none).
double sustained_ratio(const SimResult& paged, const SimResult& contiguous);

void print_table(std::ostream& os, const SimConfig& config, const RunInfo& info,
                 const SimResult& paged, const SimResult& contiguous);

// {"config": {...}, "workload": {...}, "ratio_sustained_concurrency": x,
//  "allocators": {"paged": {summary..., "series": {"time_s": [...], "running": [...],
//  "waiting": [...], "saturated": [...], "utilisation": [...], "reserved": [...], "fragmentation":
//  [...]}}, "contiguous": {...}}}
nlohmann::json report_json(const SimConfig& config, const RunInfo& info, const SimResult& paged,
                           const SimResult& contiguous);

// A standalone SVG document (960 x 640): top panel KV utilisation %, bottom panel concurrent
// sequences, both allocators over simulated time.
std::string report_svg(const SimConfig& config, const RunInfo& info, const SimResult& paged,
                       const SimResult& contiguous);

}  // namespace kvw::kvsim
