#include "obs/debug_json.h"

#include <cmath>

namespace kvw::obs {

namespace {

template <typename F>
void append_column(std::string& out, const char* name, const std::vector<BlockRecord>& blocks,
                   F value) {
  out += ",\"";
  out += name;
  out += "\":[";
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(value(blocks[i]));
  }
  out += ']';
}

int state_code(BlockState s) {
  switch (s) {
    case BlockState::kFree:
      return 0;
    case BlockState::kCached:
      return 1;
    case BlockState::kUsed:
      return 2;
  }
  return 0;
}

nlohmann::json quantiles(const Histogram::Snapshot& s) {
  auto q = [&](double p) -> nlohmann::json {
    const double v = histogram_quantile(p, s);
    return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v);
  };
  return {{"p50", q(0.5)}, {"p95", q(0.95)}, {"p99", q(0.99)}, {"count", s.count}};
}

}  // namespace

nlohmann::json layout_stats_json(const KvLayoutStats& s) {
  return {{"num_blocks", s.num_blocks},
          {"num_used_blocks", s.num_used_blocks},
          {"num_cached_blocks", s.num_cached_blocks},
          {"num_free_blocks", s.num_free_blocks},
          {"block_size", s.block_size},
          {"num_token_slots", s.num_token_slots},
          {"num_used_token_slots", s.num_used_token_slots},
          {"num_waste_slots", s.num_waste_slots},
          {"largest_free_run", s.largest_free_run},
          {"num_free_runs", s.num_free_runs},
          {"num_seqs", s.num_seqs},
          {"max_runs_per_seq", s.max_runs_per_seq},
          {"mean_runs_per_seq", s.mean_runs_per_seq()},
          {"block_usage", s.block_usage()},
          {"token_usage", s.token_usage()},
          {"internal_waste", s.internal_waste()},
          {"fragmentation", s.fragmentation()}};
}

nlohmann::json budget_json(const planner::BudgetTable& b) {
  return {{"weights_bytes", b.weights_bytes},
          {"workspace_bytes", b.workspace_bytes},
          {"kv_pool_bytes", b.kv_pool_bytes},
          {"reserve_bytes", b.reserve_bytes},
          {"total_bytes", b.total_bytes},
          {"kv_bytes_per_token", b.kv_bytes_per_token},
          {"kv_bytes_per_block", b.kv_bytes_per_block},
          {"num_blocks", b.num_blocks},
          {"max_model_len", b.max_model_len},
          {"sliding_window", b.sliding_window},
          {"kv_bytes_per_seq", b.kv_bytes_per_seq},
          {"kv_blocks_per_seq", b.kv_blocks_per_seq},
          {"max_seqs_at_max_model_len", b.max_seqs_at_max_len}};
}

std::string kv_json(const KvSnapshot* kv, const planner::BudgetTable* budget) {
  static const std::vector<BlockRecord> kNone;
  const std::vector<BlockRecord>& blocks = kv ? kv->blocks : kNone;
  std::string out;
  out.reserve(64 + blocks.size() * 24);  // ~6 columns x ~4 chars per block
  out += "{\"step\":" + std::to_string(kv ? kv->step : 0);
  out += ",\"taken_ns\":" + std::to_string(kv ? kv->taken_ns : 0);
  out += ",\"num_blocks\":" + std::to_string(blocks.size());
  out += ",\"block_size\":" + std::to_string(kv ? kv->stats.block_size : 0);
  out += ",\"stats\":" + layout_stats_json(kv ? kv->stats : KvLayoutStats{}).dump();
  append_column(out, "state", blocks, [](const BlockRecord& r) { return state_code(r.state); });
  append_column(out, "owner", blocks, [](const BlockRecord& r) -> int64_t {
    return r.owner ? int64_t(index_of(*r.owner)) : -1;
  });
  append_column(out, "ref_count", blocks, [](const BlockRecord& r) { return r.ref_count; });
  append_column(out, "num_tokens", blocks, [](const BlockRecord& r) { return r.num_tokens; });
  append_column(out, "alloc_step", blocks, [](const BlockRecord& r) { return r.alloc_step; });
  append_column(out, "last_access_step", blocks,
                [](const BlockRecord& r) { return r.last_access_step; });
  // Prefix cache hashes (null: not registered), the set KV events mirror (kv/kv_events.h).
  out += ",\"block_hash\":[";
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (i > 0) out += ',';
    out += blocks[i].block_hash ? std::to_string(*blocks[i].block_hash) : "null";
  }
  out += ']';
  if (budget) out += ",\"budget\":" + budget_json(*budget).dump();
  out += '}';
  return out;
}

nlohmann::json stats_json(const EngineStats& s, const ServingMetrics& m, uint64_t unix_ms) {
  return {
      {"unix_ms", unix_ms},
      {"step", s.num_steps},
      {"kv", layout_stats_json(s.kv)},
      {"requests",
       {{"running", s.num_running}, {"waiting", s.num_waiting}, {"swapped", s.num_swapped}}},
      {"preemptions",
       {{"swap", s.num_preemptions_swap},
        {"recompute", s.num_preemptions_recompute},
        {"total", s.num_preemptions}}},
      {"alloc_failures", s.num_alloc_failures},
      {"swap_bytes", {{"in", s.swap_in_bytes}, {"out", s.swap_out_bytes}}},
      {"prefix",
       {{"query_tokens", s.prefix.num_query_tokens}, {"hit_tokens", s.prefix.num_hit_tokens}}},
      {"batch", {{"seqs", s.last_step_seqs}, {"tokens", s.last_step_tokens}}},
      {"generated_tokens", s.num_generated_tokens},
      {"breaker", to_string(m.breaker_state())},
      {"shed_total", m.shed_total()},
      {"latency_s",
       {{"ttft", quantiles(m.ttft())},
        {"e2e", quantiles(m.e2e())},
        {"itl", quantiles(m.itl())},
        {"step", quantiles(m.step_duration())}}},
  };
}

}  // namespace kvw::obs
