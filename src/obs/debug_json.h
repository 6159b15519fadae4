// obs/debug_json.h: the JSON bodies of /debug/kv and /debug/stats (what the dashboard polls).
// /debug/kv is column-oriented so 100k blocks stay a few hundred kB and parse fast in the browser:
//   {"step":S,"taken_ns":T,"num_blocks":N,"block_size":B,
//    "stats":{num_used_blocks,...,"block_usage","token_usage","internal_waste","fragmentation"},
//    "state":[0 free|1 cached|2 used, ...N], "owner":[request id or -1, ...N],
//    "ref_count":[...N], "num_tokens":[...N], "alloc_step":[...N], "last_access_step":[...N],
//    "block_hash":[prefix cache hash or null, ...N],
//    "budget":{weights_bytes,workspace_bytes,kv_pool_bytes,reserve_bytes,total_bytes,...}}
// /debug/stats is one small object (see stats_json) sampled by the dashboard every second.
// Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "engine/queues.h"
#include "obs/serving_metrics.h"
#include "planner/engine_budget.h"

namespace kvw::obs {

nlohmann::json layout_stats_json(const KvLayoutStats& s);
nlohmann::json budget_json(const planner::BudgetTable& b);

// `kv` null: an empty map ("num_blocks":0). `budget` null: no "budget" key.
std::string kv_json(const KvSnapshot* kv, const planner::BudgetTable* budget);

// {"unix_ms","step","kv":{layout stats},"requests":{running,waiting,swapped},
//  "preemptions":{swap,recompute,total},"alloc_failures","swap_bytes":{in,out},
//  "prefix":{query_tokens,hit_tokens},"batch":{seqs,tokens},"generated_tokens",
//  "breaker":"ok|warn|shedding","shed_total",
//  "latency_s":{"ttft":{p50,p95,p99,count},"e2e":{...},"itl":{...},"step":{...}}}
// Latency percentiles are interpolated from the cumulative histograms (since start).
nlohmann::json stats_json(const EngineStats& s, const ServingMetrics& m, uint64_t unix_ms);

}  // namespace kvw::obs
