// kvwarden kvsim: replays a workload (built-in pattern or JSONL trace) against the paged KV
// manager and the contiguous baseline under the same byte budget, without running a model, and
// prints the comparison (table; optionally --json and --svg files).
#include <cctype>
#include <fstream>
#include <iostream>
#include <memory>

#include "apps/kvwarden/commands.h"
#include "kvsim/report.h"
#include "kvsim/sim.h"
#include "kvsim/workload.h"

namespace kvw::app {
namespace {

struct KvsimFlags {
  std::string pattern = "multiturn", trace, kv_budget = "1GiB", model_shape = "small";
  std::string kv_dtype, json_path, svg_path;
  uint32_t num_layers = 0, num_kv_heads = 0, head_dim = 0;
  double step_ms = 25;
  bool no_prefix_caching = false;
  kvsim::WorkloadSpec spec;
  kvsim::SimConfig config;
};

// "1073741824", "1GiB", "512MiB", "1.5G", "64k": bytes (binary multiples).
Result<uint64_t> parse_bytes(const std::string& s) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (...) {
    return Error{"--kv-budget '" + s + "' is not a byte count"};
  }
  std::string unit = s.substr(used);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double mult = 1;
  if (unit == "k" || unit == "kib" || unit == "kb")
    mult = 1024.0;
  else if (unit == "m" || unit == "mib" || unit == "mb")
    mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib" || unit == "gb")
    mult = 1024.0 * 1024 * 1024;
  else if (!unit.empty() && unit != "b")
    return Error{"--kv-budget '" + s + "': unknown unit"};
  if (!(v > 0)) return Error{"--kv-budget must be > 0"};
  return static_cast<uint64_t>(v * mult);
}

Result<kvsim::SimConfig> build_config(const KvsimFlags& f) {
  kvsim::SimConfig c = f.config;
  auto shape = kvsim::model_shape_preset(f.model_shape);
  if (!shape.ok()) return shape.error();
  c.shape = shape.value();
  if (f.num_layers || f.num_kv_heads || f.head_dim || !f.kv_dtype.empty()) c.shape.name = "custom";
  if (f.num_layers) c.shape.num_layers = f.num_layers;
  if (f.num_kv_heads) c.shape.num_kv_heads = f.num_kv_heads;
  if (f.head_dim) c.shape.head_dim = f.head_dim;
  if (!f.kv_dtype.empty()) {
    auto d = parse_kv_dtype(f.kv_dtype);
    if (!d) return Error{"--kv-dtype: " + d.message()};
    c.shape.dtype = *d;
  }
  auto budget = parse_bytes(f.kv_budget);
  if (!budget.ok()) return budget.error();
  c.kv_budget_bytes = budget.value();
  c.step_s = f.step_ms / 1000.0;
  c.prefix_caching = !f.no_prefix_caching;
  KVW_RETURN_IF_ERROR(c.validate());
  return c;
}

int run_kvsim(const KvsimFlags& f) {
  auto config = build_config(f);
  if (!config.ok()) {
    std::cerr << "kvwarden kvsim: " << config.message() << "\n";
    return 2;
  }
  std::vector<kvsim::SimRequest> requests;
  kvsim::RunInfo info;
  if (!f.trace.empty()) {
    auto t = kvsim::read_trace_file(f.trace);
    if (!t.ok()) {
      std::cerr << "kvwarden kvsim: " << t.message() << "\n";
      return 1;
    }
    requests = std::move(t.value());
    info.workload = "trace " + f.trace;
  } else {
    auto pattern = kvsim::parse_pattern(f.pattern);
    if (!pattern.ok()) {
      std::cerr << "kvwarden kvsim: " << pattern.message() << "\n";
      return 2;
    }
    kvsim::WorkloadSpec spec = f.spec;
    spec.pattern = pattern.value();
    spec.max_model_len = config->max_model_len;
    requests = kvsim::generate_workload(spec);
    info.workload = std::string(kvsim::pattern_name(spec.pattern)) + " (seed " +
                    std::to_string(spec.seed) + ", " + std::to_string(spec.num_requests) +
                    (spec.pattern == kvsim::Pattern::kMultiturn ? " conversations)" : " requests)");
  }
  info.num_requests = requests.size();
  const auto paged = kvsim::simulate(requests, *config, kvsim::AllocatorKind::kPaged);
  const auto contiguous = kvsim::simulate(requests, *config, kvsim::AllocatorKind::kContiguous);
  kvsim::print_table(std::cout, *config, info, paged, contiguous);
  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    out.close();
    if (!out) std::cerr << "kvwarden kvsim: " << path << ": cannot write\n";
    return static_cast<bool>(out);
  };
  bool ok = true;
  if (!f.json_path.empty()) {
    ok &= write(f.json_path, kvsim::report_json(*config, info, paged, contiguous).dump(1) + "\n");
  }
  if (!f.svg_path.empty()) {
    ok &= write(f.svg_path, kvsim::report_svg(*config, info, paged, contiguous));
  }
  return ok ? 0 : 1;
}

}  // namespace

void add_kvsim_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "kvsim", "Replay a workload against paged and contiguous KV allocation (no model)");
  auto f = std::make_shared<KvsimFlags>();
  cmd->add_option("--pattern", f->pattern, "multiturn, burst, random, shared-prefix or poisson")
      ->capture_default_str();
  cmd->add_option("--trace", f->trace,
                  "JSONL trace: {arrival, conversation, prompt_tokens, "
                  "output_tokens} per line (instead of --pattern)");
  cmd->add_option("--seed", f->spec.seed, "Workload seed")->capture_default_str();
  cmd->add_option("--requests", f->spec.num_requests, "Requests (multiturn: conversations)")
      ->capture_default_str();
  cmd->add_option("--rate", f->spec.rate_per_s,
                  "Arrivals per second (poisson, shared-prefix, "
                  "random)")
      ->capture_default_str();
  cmd->add_option("--burst-size", f->spec.burst_size, "Requests per burst")->capture_default_str();
  cmd->add_option("--burst-interval", f->spec.burst_interval_s, "Seconds between bursts")
      ->capture_default_str();
  cmd->add_option("--think-s", f->spec.think_s, "Multiturn: mean pause before the next round")
      ->capture_default_str();
  cmd->add_option("--kv-budget", f->kv_budget, "KV bytes for both allocators (1GiB, 512MiB, ...)")
      ->capture_default_str();
  cmd->add_option("--model-shape", f->model_shape,
                  "small, llama-3-8b, llama-3-70b, mistral-7b, qwen2-7b")
      ->capture_default_str();
  cmd->add_option("--layers", f->num_layers, "Override the shape's layers");
  cmd->add_option("--kv-heads", f->num_kv_heads, "Override the shape's KV heads");
  cmd->add_option("--head-dim", f->head_dim, "Override the shape's head dim");
  cmd->add_option("--kv-dtype", f->kv_dtype, "f16, bf16, f32, fp8 or int8 (default f16)");
  cmd->add_option("--block-size", f->config.block_size, "Paged block size in tokens")
      ->capture_default_str();
  cmd->add_option("--max-model-len", f->config.max_model_len,
                  "Longest sequence; the contiguous reservation")
      ->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", f->config.max_num_batched_tokens, "Tokens per step")
      ->capture_default_str();
  cmd->add_option("--max-num-seqs", f->config.max_num_seqs, "Running sequences at most")
      ->capture_default_str();
  cmd->add_option("--watermark", f->config.watermark,
                  "Paged: share of blocks kept free at "
                  "admission")
      ->capture_default_str();
  cmd->add_option("--step-ms", f->step_ms, "Simulated milliseconds per step")
      ->capture_default_str();
  cmd->add_option("--max-steps", f->config.max_steps, "Stop after this many steps")
      ->capture_default_str();
  cmd->add_flag("--no-prefix-caching", f->no_prefix_caching, "Paged: disable prefix caching");
  cmd->add_flag("--reserve-request-max", f->config.reserve_request_max,
                "Contiguous: reserve prompt + output tokens instead of max_model_len");
  cmd->add_option("--json", f->json_path, "Write the full report (with time series) as JSON");
  cmd->add_option("--svg", f->svg_path, "Write an SVG plot of utilisation and concurrency");
  cmd->callback([f, &exit_code] { exit_code = run_kvsim(*f); });
}

}  // namespace kvw::app
