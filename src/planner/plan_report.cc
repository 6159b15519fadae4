#include "planner/plan_report.h"

#include <cstdio>
#include <sstream>

namespace kvw::planner {
namespace {

std::string model_ref(const MemoryPlan& p) {
  return p.model.hf_id.empty() ? p.model.name : p.model.hf_id;
}

std::string fixed2(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// Sequences to admit: the target, or fewer when the KV pool cannot hold that many at full length.
int64_t max_num_seqs(const MemoryPlan& p) {
  return std::max<int64_t>(1, std::min(p.in.concurrency, p.max_concurrency));
}

std::string bytes_and_exact(uint64_t b) {
  return format_bytes((int64_t)b) + " (" + std::to_string(b) + " B)";
}

}  // namespace

RecommendedFlags recommended_flags(const MemoryPlan& p) {
  const PlanInputs& in = p.in;
  const std::string kv = in.kv_dtype == KvDtype::kFp8 ? "fp8" : "auto";
  const std::string seqs = std::to_string(max_num_seqs(p));
  const std::string len = std::to_string(in.max_model_len);
  const std::string tp = std::to_string(in.tp), pp = std::to_string(in.pp);
  const std::string quant = in.weight_dtype.name == "fp8"    ? " --quantization fp8"
                            : in.weight_dtype.name == "int4" ? " --quantization awq"
                                                             : "";
  RecommendedFlags f;
  f.vllm = "vllm serve " + model_ref(p) + " --tensor-parallel-size " + tp +
           " --pipeline-parallel-size " + pp + " --max-model-len " + len +
           " --gpu-memory-utilization " + fixed2(in.gpu_memory_utilization) + " --max-num-seqs " +
           seqs + " --block-size " + std::to_string(in.block_size) + " --kv-cache-dtype " + kv +
           " --max-num-batched-tokens " + std::to_string(in.max_num_batched_tokens) + quant;
  const std::string& rope = in.rope_parameters_json;
  if (!rope.empty()) f.vllm += " --hf-overrides '{\"rope_parameters\": " + rope + "}'";
  // SGLang's --mem-fraction-static covers weights and the KV pool but not activations.
  const StagePlan& s = p.stages[(size_t)p.binding_stage];
  const double static_frac =
      (double)(s.weight_bytes + (uint64_t)std::max<int64_t>(s.kv_pool_bytes, 0)) /
      (double)in.gpu_memory_bytes;
  f.sglang = "python -m sglang.launch_server --model-path " + model_ref(p) + " --tp " + tp +
             (in.pp > 1 ? " --pp-size " + pp : "") + " --context-length " + len +
             " --mem-fraction-static " + fixed2(static_frac) + " --max-running-requests " + seqs +
             " --chunked-prefill-size " + std::to_string(in.max_num_batched_tokens) +
             (in.kv_dtype == KvDtype::kFp8 ? " --kv-cache-dtype fp8_e4m3" : "") +
             (quant.empty() ? "" : quant);
  if (!rope.empty()) f.sglang += " --json-model-override-args '{\"rope_scaling\": " + rope + "}'";
  // kvwarden serves GGUF files and stores no fp8 KV: a catalogue or config.json plan names the
  // file to bring, and fp8 becomes int8 (one byte per element too, plus a scale per row).
  const std::string file = p.model.gguf ? p.model.gguf->path : "<" + p.model.name + ">.gguf";
  const KvDtype kv_cpu = in.kv_dtype == KvDtype::kFp8 ? KvDtype::kInt8 : in.kv_dtype;
  f.kvwarden = "kvwarden serve --model " + file + " --max-model-len " + len + " --max-num-seqs " +
               seqs + " --block-size " + std::to_string(in.block_size) + " --kv-cache-dtype " +
               kv_dtype_name(kv_cpu) + " --max-num-batched-tokens " +
               std::to_string(in.max_num_batched_tokens);
  if (!rope.empty()) f.kvwarden += " --rope-scaling '" + rope + "'";
  return f;
}

nlohmann::json plan_to_json(const MemoryPlan& p) {
  using nlohmann::json;
  const ModelShape& m = p.model;
  json j;
  j["model"] = {{"name", m.name},
                {"hf_id", m.hf_id},
                {"arch", m.arch},
                {"source", m.source},
                {"unconfirmed", m.unconfirmed},
                {"attention", m.attention_kind()},
                {"layers", m.n_layer},
                {"max_position", m.max_position}};
  j["inputs"] = {{"gpu", p.in.gpu_name},
                 {"gpu_memory_bytes", p.in.gpu_memory_bytes},
                 {"gpu_memory_utilization", p.in.gpu_memory_utilization},
                 {"tp", p.in.tp},
                 {"pp", p.in.pp},
                 {"weight_dtype", p.in.weight_dtype.name},
                 {"kv_cache_dtype", kv_dtype_name(p.in.kv_dtype)},
                 {"max_model_len", p.in.max_model_len},
                 {"concurrency", p.in.concurrency},
                 {"block_size", p.in.block_size},
                 {"max_num_batched_tokens", p.in.max_num_batched_tokens},
                 {"overhead_bytes", p.in.overhead_bytes}};
  const ParamCounts& c = p.params;
  j["params"] = {{"total", c.total()},
                 {"active", c.active()},
                 {"embedding", c.embedding},
                 {"output_head", c.output_head},
                 {"attention", c.attention},
                 {"dense_mlp", c.dense_mlp},
                 {"routed_experts", c.routed_experts},
                 {"shared_experts", c.shared_experts},
                 {"router", c.router},
                 {"norms", c.norms}};
  j["weights_bytes"] = p.weight_bytes_total;
  j["kv"] = {{"per_token_bytes", p.kv_bytes_per_token_total},
             {"per_block_bytes", p.kv_bytes_per_block_total},
             {"per_sequence_bytes", p.kv_bytes_per_seq_total}};
  j["stages"] = json::array();
  for (const StagePlan& s : p.stages) {
    j["stages"].push_back({{"stage", s.stage},
                           {"layer_begin", s.layer_begin},
                           {"layer_end", s.layer_end},
                           {"budget_bytes", s.budget_bytes},
                           {"weights_bytes", s.weight_bytes},
                           {"activation_bytes", s.activation_bytes},
                           {"overhead_bytes", s.overhead_bytes},
                           {"kv_pool_bytes", s.kv_pool_bytes},
                           {"kv_per_token_bytes", s.kv_bytes_per_token},
                           {"kv_per_block_bytes", s.kv_bytes_per_block},
                           {"kv_per_sequence_bytes", s.kv_bytes_per_seq},
                           {"num_blocks", s.num_blocks},
                           {"max_concurrency", s.max_concurrency}});
  }
  j["max_concurrency"] = p.max_concurrency;
  j["max_len_at_concurrency"] = p.max_len_at_concurrency;
  j["verdict"] = verdict_name(p.verdict);
  j["binding_constraint"] = p.binding_constraint;
  j["verdict_text"] = p.verdict_text;
  j["notes"] = p.notes;
  const RecommendedFlags f = recommended_flags(p);
  j["recommended"] = {{"vllm", f.vllm}, {"sglang", f.sglang}, {"kvwarden", f.kvwarden}};
  j["explain"] = json::array();
  for (const ExplainLine& e : p.explain) {
    j["explain"].push_back({{"what", e.what}, {"formula", e.formula}, {"value", e.value}});
  }
  return j;
}

std::string plan_to_text(const MemoryPlan& p, bool explain) {
  const ModelShape& m = p.model;
  const PlanInputs& in = p.in;
  const StagePlan& s = p.stages[(size_t)p.binding_stage];
  std::ostringstream os;
  os << "model     " << m.name << " (" << m.attention_kind() << ", " << m.n_layer << " layers"
     << (m.is_moe() ? ", MoE " + std::to_string(m.n_routed_experts) + " experts" : "") << ", "
     << fixed2((double)p.params.total() / 1e9) << "B params"
     << (m.is_moe() ? ", " + fixed2((double)p.params.active() / 1e9) + "B active per token" : "")
     << ")" << (m.unconfirmed ? " [unconfirmed]" : "") << "\n          source: " << m.source
     << "\n";
  os << "gpu       " << in.gpu_name << ": " << format_bytes((int64_t)in.gpu_memory_bytes) << " x "
     << in.tp * in.pp << " (tp " << in.tp << ", pp " << in.pp << "), utilization "
     << fixed2(in.gpu_memory_utilization) << "\n";
  os << "dtypes    weights " << in.weight_dtype.name << ", KV cache " << kv_dtype_name(in.kv_dtype)
     << "\n\n";
  os << "weights            " << bytes_and_exact(p.weight_bytes_total) << " total, "
     << format_bytes((int64_t)s.weight_bytes) << " per GPU\n";
  os << "KV per token       " << bytes_and_exact(p.kv_bytes_per_token_total) << ", per GPU "
     << s.kv_bytes_per_token << " B\n";
  os << "KV per block       " << bytes_and_exact(p.kv_bytes_per_block_total) << " ("
     << in.block_size << " tokens)\n";
  os << "KV per sequence    " << bytes_and_exact(p.kv_bytes_per_seq_total) << " at "
     << in.max_model_len << " tokens, per GPU " << format_bytes((int64_t)s.kv_bytes_per_seq)
     << "\n\n";
  os << "budget per GPU" << (in.pp > 1 ? " (stage " + std::to_string(s.stage) + ")" : "") << "\n";
  os << "  total x util     " << format_bytes((int64_t)s.budget_bytes) << "\n";
  os << "  weights          " << format_bytes((int64_t)s.weight_bytes) << "\n";
  os << "  activations      " << format_bytes((int64_t)s.activation_bytes) << " ("
     << in.max_num_batched_tokens << " batched tokens, estimate)\n";
  os << "  overhead         " << format_bytes((int64_t)s.overhead_bytes) << "\n";
  os << "  KV pool          " << format_bytes(s.kv_pool_bytes) << " = " << s.num_blocks
     << " blocks = " << s.num_blocks * in.block_size << " tokens\n\n";
  os << "max concurrency    " << p.max_concurrency << " sequences at " << in.max_model_len
     << " tokens\n";
  os << "max length         " << p.max_len_at_concurrency << " tokens at " << in.concurrency
     << " concurrent sequences" << (p.max_len_capped_by_model ? " (model limit)" : "") << "\n";
  os << "verdict            " << p.verdict_text << "\n";
  os << "binding constraint " << p.binding_constraint << "\n";
  for (const std::string& n : p.notes) os << "note: " << n << "\n";
  if (p.verdict != Verdict::kWeightsTooLarge) {
    const RecommendedFlags f = recommended_flags(p);
    os << "\nrecommended\n  " << f.vllm << "\n  " << f.sglang << "\n  " << f.kvwarden << "\n";
  }
  if (explain) {
    os << "\nformulas\n";
    for (const ExplainLine& e : p.explain) {
      os << "  " << e.what << "\n      = " << e.formula << "\n      = " << e.value << "\n";
    }
  }
  return os.str();
}

}  // namespace kvw::planner
