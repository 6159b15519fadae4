// planner/plan_report.h: renders a MemoryPlan for people (text, optionally with every formula)
// and for programs (JSON), and derives the launch flags for vLLM, SGLang and kvwarden.
// Pure functions of the plan.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "planner/memory_plan.h"

namespace kvw::planner {

struct RecommendedFlags {
  std::string vllm;
  std::string sglang;
  std::string kvwarden;
};

RecommendedFlags recommended_flags(const MemoryPlan& p);

// Keys: model{...}, inputs{...}, params{...}, weights_bytes, kv{per_token_bytes, per_block_bytes,
// per_sequence_bytes}, stages[{...}], max_concurrency, max_len_at_concurrency, verdict,
// binding_constraint, verdict_text, notes[], recommended{vllm, sglang, kvwarden}, explain[].
nlohmann::json plan_to_json(const MemoryPlan& p);

// The report `kvwarden plan` prints; with `explain`, every formula with its numbers.
std::string plan_to_text(const MemoryPlan& p, bool explain);

}  // namespace kvw::planner
