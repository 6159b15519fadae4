// kvwarden plan: will a model fit on these GPUs, for how many users, at what length? Exact
// weights and KV arithmetic with the binding constraint and launch flags (src/planner).
#include <cctype>
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>

#include "apps/kvwarden/commands.h"
#include "apps/kvwarden/rope_flags.h"
#include "engine/engine_config.h"
#include "planner/catalog.h"
#include "planner/engine_budget.h"
#include "planner/memory_plan.h"
#include "planner/model_source.h"
#include "planner/plan_report.h"
#include "sched/sched_config.h"
#include "sched/spec_config.h"

namespace kvw::app {
namespace {

using namespace kvw::planner;

struct PlanArgs {
  std::string model;
  std::string gpu;
  std::string gpu_memory;
  int64_t tp = 1;
  int64_t pp = 1;
  std::string weight_dtype;
  std::string kv_dtype = "auto";
  int64_t max_model_len = 0;
  int64_t concurrency = 1;
  int64_t block_size = 16;
  double gpu_memory_utilization = 0.9;
  int64_t max_num_batched_tokens = 8192;
  std::string overhead = "1GiB";
  int64_t engine_threads = 0;
  std::string request_memory = "64MiB";  // --engine: serve's request row
  std::string grammar_cache = "16MiB";   // --engine: serve's request row
  std::string swap_space;                // --engine: serve's --swap-space (the staging row)
  int64_t max_queue = 256;
  bool json = false;
  bool explain = false;
  bool engine = false;
  bool spec_ngram = false;     // --engine: serve's --spec-ngram (draft logit rows)
  int32_t spec_max_draft = 4;  // --engine: serve's --spec-max-draft
  int32_t spec_max_seqs = 16;  // --engine: serve's --spec-max-seqs
  std::string draft_model;     // --engine: serve's --draft-model (its rows in the table)
  bool swa_full = false;       // --engine: serve's --swa-full
  bool list_models = false;
  bool list_gpus = false;
  RopeFlags rope;  // stretches the model's positions (the default --max-model-len)
};

// "80GiB", "80 GB", "1.5TiB", "85056798720": GB/MB are decimal, GiB/MiB binary, bare = bytes.
Result<uint64_t> parse_size(const std::string& flag, const std::string& text) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    return Error{flag + ": '" + text + "' is not a size (e.g. 80GiB, 24GB, 85056798720)"};
  }
  std::string unit;
  for (char c : text.substr(pos)) {
    if (!std::isspace((unsigned char)c)) unit += (char)std::tolower((unsigned char)c);
  }
  double mult = 0;
  if (unit.empty() || unit == "b")
    mult = 1;
  else if (unit == "kb")
    mult = 1e3;
  else if (unit == "mb")
    mult = 1e6;
  else if (unit == "gb")
    mult = 1e9;
  else if (unit == "tb")
    mult = 1e12;
  else if (unit == "kib")
    mult = 1024.0;
  else if (unit == "mib")
    mult = (double)kMiB;
  else if (unit == "gib")
    mult = (double)kGiB;
  else if (unit == "tib")
    mult = (double)kGiB * 1024;
  if (mult == 0 || !(v >= 0) || v * mult > 1e15) {
    return Error{flag + ": '" + text + "' is not a size (units B, KB, MB, GB, TB, KiB, MiB, GiB)"};
  }
  return (uint64_t)std::llround(v * mult);
}

void list_models(std::ostream& os) {
  for (const ModelShape& m : model_catalog()) {
    os << m.name << "  " << m.hf_id << "  " << m.attention_kind() << ", " << m.n_layer
       << " layers, " << (double)count_params(m).total() / 1e9 << "B params"
       << (m.unconfirmed ? "  [unconfirmed: " + m.note + "]" : "") << "\n    source: " << m.source
       << "\n";
  }
}

void list_gpus(std::ostream& os) {
  for (const GpuSpec& g : gpu_catalog()) {
    os << g.name << "  " << g.description << ", " << format_bytes((int64_t)g.memory_bytes) << ", "
       << g.bandwidth_gb_s << " GB/s" << (g.unconfirmed ? "  [unconfirmed]" : "")
       << "\n    source: " << g.source << "\n";
  }
}

Result<PlanInputs> build_inputs(const PlanArgs& a, const ModelShape& m) {
  PlanInputs in;
  if (!a.gpu_memory.empty()) {
    auto b = parse_size("--gpu-memory", a.gpu_memory);
    if (!b.ok()) return b.error();
    in.gpu_memory_bytes = *b;
    in.gpu_name = a.gpu_memory;
  } else if (!a.gpu.empty()) {
    const GpuSpec* g = find_gpu(a.gpu);
    if (g == nullptr) return Error{"unknown --gpu '" + a.gpu + "' (see --list-gpus)"};
    in.gpu_memory_bytes = g->memory_bytes;
    in.gpu_name = g->name + (g->unconfirmed ? " [unconfirmed total]" : "");
  } else {
    return Error{"give --gpu NAME or --gpu-memory SIZE"};
  }
  const std::string wd = !a.weight_dtype.empty() ? a.weight_dtype
                         : m.gguf                ? std::string("f32")  // unused: exact bytes
                                                 : m.default_weight_dtype;
  auto w = parse_weight_dtype(wd);
  if (!w.ok()) return w.error();
  in.weight_dtype = *w;
  if (m.gguf) in.weight_dtype.name = "gguf (" + m.gguf->weight_type_summary + ")";
  if (a.kv_dtype == "auto") {
    // vLLM's "auto" stores KV in the model's activation dtype: f16/f32 checkpoints keep theirs,
    // everything else (bf16, fp8 and int4 checkpoints) computes in bf16.
    // GGUF runtimes (kvwarden, llama.cpp) default to an f16 cache.
    in.kv_dtype = m.gguf || w->name == "f16" ? KvDtype::kF16
                  : w->name == "f32"         ? KvDtype::kF32
                                             : KvDtype::kBF16;
  } else {
    auto k = parse_kv_dtype(a.kv_dtype);
    if (!k.ok()) return k.error();
    in.kv_dtype = *k;
  }
  auto ov = parse_size("--overhead", a.overhead);
  if (!ov.ok()) return ov.error();
  in.overhead_bytes = *ov;
  in.gpu_memory_utilization = a.gpu_memory_utilization;
  in.tp = a.tp;
  in.pp = a.pp;
  in.max_model_len = a.max_model_len > 0  ? a.max_model_len
                     : m.max_position > 0 ? m.max_position
                                          : 4096;
  in.concurrency = a.concurrency;
  in.block_size = a.block_size;
  in.max_num_batched_tokens = a.max_num_batched_tokens;
  return in;
}

int run_plan(const PlanArgs& a) {
  if (a.list_models || a.list_gpus) {
    if (a.list_models) list_models(std::cout);
    if (a.list_gpus) list_gpus(std::cout);
    return 0;
  }
  if (a.model.empty()) {
    std::cerr
        << "kvwarden plan: --model is required (a catalogue name, FILE.gguf or config.json)\n";
    return 1;
  }
  auto m = load_model_shape(a.model);
  if (!m.ok()) {
    std::cerr << "kvwarden plan: " << m.message() << "\n";
    return 1;
  }
  auto rope = rope_override(a.rope);
  if (!rope.ok()) {
    std::cerr << "kvwarden plan: " << rope.message() << "\n";
    return 2;
  }
  const std::string rope_json = rope_parameters_json(m->max_position, *rope);
  m->max_position = scaled_context(m->max_position, *rope);
  auto in = build_inputs(a, *m);
  if (!in.ok()) {
    std::cerr << "kvwarden plan: " << in.message() << "\n";
    return 1;
  }
  in->rope_parameters_json = rope_json;
  auto plan = plan_memory(*m, *in);
  if (!plan.ok()) {
    std::cerr << "kvwarden plan: " << plan.message() << "\n";
    return 1;
  }
  nlohmann::json j = plan_to_json(*plan);
  if (a.engine) {
    EngineOptions opt;
    opt.max_num_batched_tokens = a.max_num_batched_tokens;
    opt.block_size = a.block_size;
    opt.kv_dtype = in->kv_dtype;
    opt.n_threads = a.engine_threads > 0 ? a.engine_threads : 1;
    if (!m->gguf)
      opt.weight_dtype = *parse_weight_dtype(a.weight_dtype.empty() ? "f32" : a.weight_dtype);
    opt.max_model_len = in->max_model_len;
    opt.max_num_seqs = a.concurrency;
    // serve's default --spec-max-seqs (SpecConfig::max_seqs) rows of drafts per step.
    const bool spec = a.spec_ngram || !a.draft_model.empty();
    opt.spec_draft_logit_rows = SpecConfig{.enabled = spec,
                                           .num_speculative_tokens = a.spec_max_draft,
                                           .max_seqs = a.spec_max_seqs}
                                    .max_draft_tokens_per_step();
    std::optional<ModelShape> draft;
    if (!a.draft_model.empty()) {
      auto d = load_model_shape(a.draft_model);
      if (!d.ok()) {
        std::cerr << "kvwarden plan: --draft-model: " << d.message() << "\n";
        return 1;
      }
      draft = std::move(*d);
      opt.draft = &*draft;
      opt.draft_logit_rows = a.spec_max_seqs;
    }
    opt.prompt_logit_rows = SchedConfig{}.max_prompt_logit_rows;  // serve's rows (plan = serve)
    opt.swa_full = a.swa_full;
    auto rm = parse_size("--request-memory", a.request_memory);
    if (!rm.ok()) {
      std::cerr << "kvwarden plan: " << rm.message() << "\n";
      return 2;
    }
    // Parsed as serve parses it (0: off), so the two tables agree.
    auto gc = parse_size_or_off("--grammar-cache", a.grammar_cache, machine_memory_limit_bytes());
    if (!gc.ok()) {
      std::cerr << "kvwarden plan: " << gc.message() << "\n";
      return 2;
    }
    opt.request_bytes = request_row_bytes({.request_memory_bytes = *rm,
                                           .max_num_seqs = a.concurrency,
                                           .max_queue = a.max_queue,
                                           .max_model_len = in->max_model_len,
                                           .grammar_cache_bytes = *gc});
    if (!a.swap_space.empty()) {
      auto sw = parse_size("--swap-space", a.swap_space);
      if (!sw.ok()) {
        std::cerr << "kvwarden plan: " << sw.message() << "\n";
        return 2;
      }
      opt.swap_staging_bytes = swap_staging_bytes(*sw);
    }
    auto b = plan_engine_budget(*m, opt);
    if (!b.ok()) {
      std::cerr << "kvwarden plan: --engine: " << b.message() << "\n";
      return 1;
    }
    j["engine"] = {{"weights_bytes", b->weights_bytes},
                   {"workspace_bytes", b->workspace_bytes},
                   {"kv_pool_bytes", b->kv_pool_bytes},
                   {"reserve_bytes", b->reserve_bytes},
                   {"request_bytes", b->request_bytes},
                   {"swap_staging_bytes", b->swap_staging_bytes},
                   {"draft_weights_bytes", b->draft_weights_bytes},
                   {"draft_workspace_bytes", b->draft_workspace_bytes},
                   {"draft_catch_up_bytes", b->draft_catch_up_bytes},
                   {"draft_kv_pool_bytes", b->draft_kv_pool_bytes},
                   {"total_bytes", b->total_bytes},
                   {"num_blocks", b->num_blocks},
                   {"kv_per_token_bytes", b->kv_bytes_per_token},
                   {"kv_per_sequence_bytes", b->kv_bytes_per_seq},
                   {"kv_blocks_per_sequence", b->kv_blocks_per_seq},
                   {"sliding_window", b->sliding_window},
                   {"hybrid_window", b->hybrid_window},
                   {"kv_window_per_token_bytes", b->kv_window_bytes_per_token},
                   {"num_window_slots", b->num_window_slots},
                   {"max_seqs_at_max_model_len", b->max_seqs_at_max_len}};
    if (!a.json) {
      // Without --memory-budget the pool holds --concurrency sequences of up to 4,096 tokens
      // (and always one of --max-model-len), as serve sizes it.
      const int64_t pool_len = default_pool_tokens_per_seq(in->max_model_len);
      std::cout << "kvwarden CPU engine budget (KV pool for " << a.concurrency << " x " << pool_len
                << " tokens and one of " << in->max_model_len << ", " << kv_dtype_name(opt.kv_dtype)
                << " KV, " << opt.n_threads << " threads)\n"
                << b->to_string() << "\n";
    }
  }
  if (a.json) {
    if (!a.explain) j.erase("explain");
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << plan_to_text(*plan, a.explain);
  }
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "plan",
      "Exact memory plan: weights, KV per token/block/sequence, max concurrency and "
      "length, verdict and launch flags for vLLM, SGLang and kvwarden");
  auto a = std::make_shared<PlanArgs>();
  cmd->add_option("--model", a->model,
                  "Catalogue name (see --list-models), a Hugging Face config.json or a .gguf file");
  auto* gpu = cmd->add_option("--gpu", a->gpu, "GPU from the catalogue (see --list-gpus)");
  cmd->add_option("--gpu-memory", a->gpu_memory,
                  "Memory of one GPU instead of --gpu: 80GiB, 24GB (decimal), or bytes")
      ->excludes(gpu);
  cmd->add_option("--tp", a->tp, "Tensor-parallel size (GPUs per stage)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--pp", a->pp, "Pipeline-parallel size (stages)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--weight-dtype", a->weight_dtype,
                  "f32, f16, bf16, fp8, int8, int4 (AWQ/GPTQ), or a GGUF type: q8_0, q4_0, "
                  "q4_1, q5_0, q5_1, iq4_nl, mxfp4, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_xs "
                  "(default: the checkpoint's dtype; GGUF files use their exact tensor bytes)");
  cmd->add_option("--kv-cache-dtype", a->kv_dtype,
                  "auto (the model's activation dtype), f16, bf16, f32, fp8 or int8")
      ->capture_default_str();
  cmd->add_option("--max-model-len", a->max_model_len,
                  "Tokens per sequence (prompt + output); default: the model's max positions")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--concurrency", a->concurrency, "Target concurrent sequences at that length")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--block-size", a->block_size, "KV block size in tokens")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--gpu-memory-utilization", a->gpu_memory_utilization,
                  "Fraction of each GPU's memory the server may use, in (0, 1]")
      ->capture_default_str();
  cmd->add_option("--max-num-batched-tokens", a->max_num_batched_tokens,
                  "Tokens per forward pass; sizes the activation peak")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--overhead", a->overhead,
                  "Framework overhead per GPU (CUDA context, NCCL, CUDA graphs)")
      ->capture_default_str();
  cmd->add_flag("--engine", a->engine,
                "Also print kvwarden's own CPU engine budget, as serve logs it at start-up: "
                "weights, workspace, request memory, reserve and a KV pool for --concurrency "
                "sequences of min(--max-model-len, 4096) tokens (and one of --max-model-len); "
                "needs --gpu or --gpu-memory for the GPU plan above it");
  cmd->add_flag("--swa-full", a->swa_full,
                "--engine: serve's --swa-full (windowed layers keep every position's KV)");
  cmd->add_flag("--spec-ngram", a->spec_ngram,
                "--engine: serve's --spec-ngram (the drafts' logit rows join the reserve)");
  cmd->add_option("--draft-model", a->draft_model,
                  "--engine: serve's --draft-model (its weights, workspace and KV join the table)");
  cmd->add_option("--spec-max-seqs", a->spec_max_seqs, "--engine: serve's --spec-max-seqs")
      ->capture_default_str();
  cmd->add_option("--spec-max-draft", a->spec_max_draft, "--engine: serve's --spec-max-draft")
      ->capture_default_str();
  cmd->add_option("--request-memory", a->request_memory,
                  "--engine: serve's --request-memory (the request row also counts connections "
                  "and streams for --concurrency and --max-queue)")
      ->capture_default_str();
  cmd->add_option("--grammar-cache", a->grammar_cache,
                  "--engine: serve's --grammar-cache (in the request row)")
      ->capture_default_str();
  cmd->add_option("--swap-space", a->swap_space,
                  "--engine: serve's --swap-space (adds the swap tier's staging row)");
  cmd->add_option("--max-queue", a->max_queue, "--engine: serve's --max-queue")
      ->capture_default_str();
  cmd->add_option("--engine-threads", a->engine_threads, "Worker threads for --engine")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  add_rope_flags(cmd, &a->rope);
  cmd->add_flag("--json", a->json, "Print the plan as JSON");
  cmd->add_flag("--explain", a->explain, "Print every formula with the numbers substituted");
  cmd->add_flag("--list-models", a->list_models, "List the model catalogue and exit");
  cmd->add_flag("--list-gpus", a->list_gpus, "List the GPU catalogue and exit");
  cmd->callback([a, &exit_code] { exit_code = run_plan(*a); });
}

}  // namespace kvw::app
