#include "planner/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/families/family.h"

namespace kvw::planner {

std::string format_bytes(int64_t bytes) {
  char buf[64];
  const double a = std::fabs((double)bytes);
  if (a >= (double)kGiB) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", (double)bytes / (double)kGiB);
  } else if (a >= (double)kMiB) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", (double)bytes / (double)kMiB);
  } else if (a >= 1024.0) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", (double)bytes / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%lld B", (long long)bytes);
  }
  return buf;
}

namespace {

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string num(int64_t v) {
  return std::to_string(v);
}

uint64_t layer_attention_params(const ModelShape& m) {
  const uint64_t e = (uint64_t)m.n_embd, h = (uint64_t)m.n_head;
  if (m.is_mla()) {
    const uint64_t qk = (uint64_t)(m.qk_nope_head_dim + m.qk_rope_head_dim);
    const uint64_t q = m.q_lora_rank > 0
                           ? e * (uint64_t)m.q_lora_rank + (uint64_t)m.q_lora_rank * h * qk
                           : e * h * qk;
    const uint64_t kv_a = e * (uint64_t)(m.kv_lora_rank + m.qk_rope_head_dim);
    const uint64_t kv_b =
        (uint64_t)m.kv_lora_rank * h * (uint64_t)(m.qk_nope_head_dim + m.v_head_dim);
    const uint64_t o = h * (uint64_t)m.v_head_dim * e;
    return q + kv_a + kv_b + o;
  }
  const uint64_t q_dim = h * (uint64_t)m.head_dim, kv_dim = (uint64_t)(m.n_kv_head * m.head_dim);
  uint64_t p = e * q_dim + 2 * e * kv_dim + q_dim * e;
  if (m.qkv_bias) p += q_dim + 2 * kv_dim;
  return p;
}

uint64_t layer_norm_params(const ModelShape& m) {
  // Gemma-2/3 have four norms per layer (pre/post attention and MLP); Llama-style models two.
  const ModelFamily* family = find_family_by_model_type(m.arch);
  uint64_t p = (uint64_t)m.n_embd * (family != nullptr && family->post_norms ? 4 : 2);
  if (m.qk_norm) p += 2 * (uint64_t)m.head_dim;
  if (m.is_mla()) p += (uint64_t)(m.kv_lora_rank + m.q_lora_rank);
  return p;
}

bool is_moe_layer(const ModelShape& m, int64_t l) {
  return m.is_moe() && l >= m.first_k_dense;
}

// Quantised checkpoints (fp8, int8, AWQ/GPTQ) keep the embeddings and the output head in bf16,
// as vLLM loads them; GGUF types and float types apply to every tensor.
Dtype embedding_dtype(const Dtype& w) {
  if (w.name == "fp8" || w.name == "int8" || w.name == "int4") return Dtype{"bf16", 1, 2};
  return w;
}

struct StageWeights {
  uint64_t params = 0;
  uint64_t bytes = 0;  // per rank
};

StageWeights stage_weights(const ModelShape& m, const ParamCounts& pc, const PlanInputs& in,
                           int64_t lb, int64_t le) {
  const bool first = lb == 0, last = le == m.n_layer;
  uint64_t layer_params = 0;
  for (int64_t l = lb; l < le; ++l) layer_params += pc.per_layer[(size_t)l];
  if (last) layer_params += (uint64_t)m.n_embd;  // final norm
  uint64_t emb_params = first ? pc.embedding : 0;
  // A tied head still needs its own copy on the last stage when the stages are separate GPUs.
  if (last) emb_params += m.tied_embeddings ? (in.pp > 1 ? pc.embedding : 0) : pc.output_head;
  StageWeights w;
  w.params = layer_params + emb_params;
  const uint64_t tp = (uint64_t)in.tp;
  if (m.gguf) {
    const long double share = (long double)w.params / (long double)pc.total();
    w.bytes = (uint64_t)std::ceil((long double)m.gguf->weight_bytes * share / tp);
  } else {
    const uint64_t total =
        in.weight_dtype.bytes(layer_params) + embedding_dtype(in.weight_dtype).bytes(emb_params);
    w.bytes = (total + tp - 1) / tp;
  }
  return w;
}

// Peak activation memory of one forward pass over T = max_num_batched_tokens tokens on one rank:
// T x (2 n_embd + (q + k + v widths) / tp + 2 ff_width / tp) x 2 B (bf16 residual, normed input,
// projections, gate and up) + logits rows x n_vocab / tp x 4 B (f32) on the last stage.
// An estimate: frameworks reuse buffers differently; vLLM measures this with a dummy run.
uint64_t stage_activation(const ModelShape& m, const PlanInputs& in, bool last,
                          std::vector<ExplainLine>* ex) {
  const int64_t T = in.max_num_batched_tokens, tp = in.tp;
  int64_t q_w, k_w, v_w;
  if (m.is_mla()) {
    q_w = m.n_head * (m.qk_nope_head_dim + m.qk_rope_head_dim);
    k_w = q_w;
    v_w = m.n_head * m.v_head_dim;
  } else {
    q_w = m.n_head * m.head_dim;
    k_w = v_w = m.n_kv_head * m.head_dim;
  }
  int64_t ff_w = m.first_k_dense > 0 || !m.is_moe() ? m.n_ff : 0;
  if (m.is_moe()) ff_w = std::max(ff_w, (m.n_experts_per_tok + m.n_shared_experts) * m.moe_ff);
  const int64_t per_token = 2 * m.n_embd + (q_w + k_w + v_w) / tp + 2 * ff_w / tp;
  const int64_t logit_rows = last ? std::min(T, std::max<int64_t>(in.concurrency, 1)) : 0;
  const uint64_t bytes = (uint64_t)T * per_token * 2 + (uint64_t)logit_rows * (m.n_vocab / tp) * 4;
  if (ex) {
    ex->push_back({"activation peak per GPU (estimate)",
                   num(T) + " tokens x (2 x " + num(m.n_embd) + " + (" + num(q_w) + " + " +
                       num(k_w) + " + " + num(v_w) + ") / " + num(tp) + " + 2 x " + num(ff_w) +
                       " / " + num(tp) + ") x 2 B + " + num(logit_rows) + " logit rows x " +
                       num(m.n_vocab) + " / " + num(tp) + " x 4 B",
                   format_bytes((int64_t)bytes)});
  }
  return bytes;
}

}  // namespace

ParamCounts count_params(const ModelShape& m) {
  ParamCounts pc;
  pc.embedding = (uint64_t)m.n_vocab * (uint64_t)m.n_embd;
  pc.output_head = m.tied_embeddings ? 0 : pc.embedding;
  pc.norms = (uint64_t)m.n_embd;  // final norm
  const uint64_t e = (uint64_t)m.n_embd;
  const uint64_t attn = layer_attention_params(m), norms = layer_norm_params(m);
  for (int64_t l = 0; l < m.n_layer; ++l) {
    uint64_t p = attn + norms;
    pc.attention += attn;
    pc.norms += norms;
    if (is_moe_layer(m, l)) {
      const uint64_t expert = 3 * e * (uint64_t)m.moe_ff;
      pc.routed_experts += (uint64_t)m.n_routed_experts * expert;
      pc.routed_experts_active += (uint64_t)m.n_experts_per_tok * expert;
      pc.shared_experts += (uint64_t)m.n_shared_experts * expert;
      pc.router += (uint64_t)m.n_routed_experts * e;
      p += (uint64_t)(m.n_routed_experts + m.n_shared_experts) * expert +
           (uint64_t)m.n_routed_experts * e;
    } else {
      pc.dense_mlp += 3 * e * (uint64_t)m.n_ff;
      p += 3 * e * (uint64_t)m.n_ff;
    }
    pc.per_layer.push_back(p);
  }
  return pc;
}

int64_t kv_heads_per_rank(const ModelShape& m, int64_t tp) {
  if (m.is_mla()) return 1;
  return m.n_kv_head >= tp ? m.n_kv_head / tp : 1;
}

int64_t kv_elems_per_token_layer(const ModelShape& m, int64_t tp) {
  if (m.is_mla()) return m.kv_lora_rank + m.qk_rope_head_dim;
  return 2 * kv_heads_per_rank(m, tp) * m.head_dim;
}

uint64_t kv_bytes_per_token_layer(const ModelShape& m, KvDtype dtype, int64_t tp) {
  const int64_t scales = m.is_mla() ? 1 : 2 * kv_heads_per_rank(m, tp);
  return (uint64_t)(kv_elems_per_token_layer(m, tp) * kv_elem_bytes(dtype) +
                    scales * kv_scale_bytes(dtype));
}

uint64_t kv_bytes_per_token(const ModelShape& m, KvDtype dtype, int64_t tp) {
  int64_t kv_layers = 0;
  for (int64_t l = 0; l < m.n_layer; ++l) kv_layers += m.window_of_layer(l) >= 0 ? 1 : 0;
  return (uint64_t)kv_layers * kv_bytes_per_token_layer(m, dtype, tp);
}

int64_t window_blocks(int64_t seq_len, int64_t window, int64_t block_size) {
  const int64_t blocks = (seq_len + block_size - 1) / block_size;
  if (window <= 0) return blocks;
  return std::min(blocks, (window + 2 * block_size - 2) / block_size);
}

uint64_t kv_bytes_per_sequence(const ModelShape& m, KvDtype dtype, int64_t tp, int64_t layer_begin,
                               int64_t layer_end, int64_t seq_len, int64_t block_size) {
  const uint64_t per_layer = kv_bytes_per_token_layer(m, dtype, tp);
  uint64_t total = 0;
  for (int64_t l = layer_begin; l < layer_end; ++l) {
    const int64_t w = m.window_of_layer(l);
    if (w < 0) continue;
    const int64_t blocks = window_blocks(seq_len, w, block_size);
    total += (uint64_t)(blocks * block_size) * per_layer;
  }
  return total;
}

Status PlanInputs::validate() const {
  if (gpu_memory_bytes == 0) return Error{"GPU memory must be > 0 (use --gpu or --gpu-memory)"};
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0)) {
    return Error{"--gpu-memory-utilization must be in (0, 1], got " +
                 fixed(gpu_memory_utilization, 3)};
  }
  if (tp < 1 || pp < 1) return Error{"--tp and --pp must be >= 1"};
  if (max_model_len < 1) return Error{"--max-model-len must be >= 1"};
  if (concurrency < 1) return Error{"--concurrency must be >= 1"};
  if (block_size < 1) return Error{"--block-size must be >= 1"};
  if (max_num_batched_tokens < 1) return Error{"--max-num-batched-tokens must be >= 1"};
  if (weight_dtype.block_elems < 1 || weight_dtype.block_bytes < 1) {
    return Error{"weight dtype is not set"};
  }
  return {};
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kFits:
      return "fits";
    case Verdict::kConcurrencyLimited:
      return "concurrency-limited";
    case Verdict::kKvTooSmall:
      return "kv-too-small";
    case Verdict::kWeightsTooLarge:
      return "weights-too-large";
  }
  return "?";
}

int64_t max_len_for(const ModelShape& m, const PlanInputs& in, const StagePlan& s,
                    int64_t concurrency, int64_t cap) {
  auto fits = [&](int64_t len) {
    const uint64_t need = kv_bytes_per_sequence(m, in.kv_dtype, in.tp, s.layer_begin, s.layer_end,
                                                len, in.block_size);
    return s.kv_pool_bytes > 0 && (long double)need * concurrency <= (long double)s.kv_pool_bytes;
  };
  if (cap < 1 || !fits(1)) return 0;
  int64_t lo = 1, hi = cap;  // fits(lo) holds; find the largest such value
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

}  // namespace kvw::planner

namespace kvw::planner {
namespace {

void explain_kv(const ModelShape& m, const PlanInputs& in, std::vector<ExplainLine>& ex) {
  const int64_t eb = kv_elem_bytes(in.kv_dtype), sb = kv_scale_bytes(in.kv_dtype);
  if (m.is_mla()) {
    ex.push_back({"KV bytes per token per layer (MLA latent, whole on every TP rank)",
                  "(kv_lora_rank " + num(m.kv_lora_rank) + " + qk_rope_head_dim " +
                      num(m.qk_rope_head_dim) + ") x " + num(eb) + " B" +
                      (sb ? " + 1 x " + num(sb) + " B scale" : ""),
                  num((int64_t)kv_bytes_per_token_layer(m, in.kv_dtype, 1)) + " B"});
  } else {
    ex.push_back({std::string("KV bytes per token per layer (") + m.attention_kind() + ")",
                  "2 (K,V) x " + num(m.n_kv_head) + " kv heads x " + num(m.head_dim) +
                      " head_dim x " + num(eb) + " B" +
                      (sb ? " + 2 x " + num(m.n_kv_head) + " x " + num(sb) + " B scales" : ""),
                  num((int64_t)kv_bytes_per_token_layer(m, in.kv_dtype, 1)) + " B"});
    if (in.tp > 1) {
      const int64_t h = kv_heads_per_rank(m, in.tp);
      ex.push_back({"KV heads per TP rank",
                    m.n_kv_head >= in.tp ? num(m.n_kv_head) + " / tp " + num(in.tp)
                                         : "max(1, " + num(m.n_kv_head) + " / " + num(in.tp) +
                                               ") (replicated: fewer KV heads than ranks)",
                    num(h)});
    }
  }
  int64_t full = 0, windowed = 0, none = 0;
  for (int64_t l = 0; l < m.n_layer; ++l) {
    const int64_t w = m.window_of_layer(l);
    (w == 0 ? full : w > 0 ? windowed : none) += 1;
  }
  std::string layers = num(full) + " full-attention layers";
  if (windowed) layers += " + " + num(windowed) + " sliding-window layers (capped at window)";
  if (none) layers += " (+ " + num(none) + " layers without KV cache)";
  ex.push_back({"KV bytes per token, whole model (tp = 1)",
                num(full + windowed) + " layers x " +
                    num((int64_t)kv_bytes_per_token_layer(m, in.kv_dtype, 1)) + " B; " + layers,
                num((int64_t)kv_bytes_per_token(m, in.kv_dtype, 1)) + " B"});
}

void set_verdict(MemoryPlan& p) {
  const StagePlan& s = p.stages[(size_t)p.binding_stage];
  const int64_t L = p.in.max_model_len, C = p.in.concurrency;
  const std::string at = num(L) + " tokens";
  for (const StagePlan& st : p.stages) {
    if (st.kv_pool_bytes <= 0) {
      p.verdict = Verdict::kWeightsTooLarge;
      p.binding_constraint = "weights";
      p.verdict_text = "does not fit: weights " + format_bytes((int64_t)st.weight_bytes) +
                       " + activations " + format_bytes((int64_t)st.activation_bytes) +
                       " + overhead " + format_bytes((int64_t)st.overhead_bytes) +
                       " per GPU exceed the budget of " + format_bytes((int64_t)st.budget_bytes) +
                       (p.stages.size() > 1 ? " (pipeline stage " + num(st.stage) + ")" : "") +
                       "; use more GPUs (--tp/--pp) or a smaller weight dtype";
      return;
    }
  }
  if (p.max_concurrency == 0) {
    p.verdict = Verdict::kKvTooSmall;
    p.binding_constraint = "kv_cache";
    p.verdict_text = "does not fit: one sequence of " + at + " needs " +
                     format_bytes((int64_t)s.kv_bytes_per_seq) + " of KV per GPU, only " +
                     format_bytes(s.kv_pool_bytes) + " is left after weights; longest is " +
                     num(p.max_len_at_concurrency) + " tokens for " + num(C) + " sequence(s)";
  } else if (p.max_concurrency < C) {
    p.verdict = Verdict::kConcurrencyLimited;
    p.binding_constraint = "kv_cache";
    p.verdict_text = "partly: " + num(p.max_concurrency) + " of " + num(C) +
                     " concurrent sequences fit at " + at + "; " + num(C) +
                     " sequences fit up to " + num(p.max_len_at_concurrency) + " tokens each";
  } else {
    p.verdict = Verdict::kFits;
    p.binding_constraint = p.max_len_capped_by_model ? "model_context" : "kv_cache";
    p.verdict_text = "fits: " + num(C) + " sequences of " + at + " need " +
                     format_bytes((int64_t)(s.kv_bytes_per_seq * (uint64_t)C)) + " of the " +
                     format_bytes(s.kv_pool_bytes) + " KV pool per GPU; up to " +
                     num(p.max_concurrency) + " sequences at " + at;
  }
}

}  // namespace

namespace {

Status check_shardable(const ModelShape& m, const PlanInputs& in) {
  if (m.n_head % in.tp != 0) {
    return Error{"--tp " + num(in.tp) + " does not divide the " + num(m.n_head) +
                 " attention heads of " + m.name};
  }
  if (!m.is_mla() && m.n_kv_head >= in.tp && m.n_kv_head % in.tp != 0) {
    return Error{"--tp " + num(in.tp) + " does not divide the " + num(m.n_kv_head) +
                 " KV heads of " + m.name};
  }
  if (in.pp > m.n_layer) {
    return Error{"--pp " + num(in.pp) + " exceeds the " + num(m.n_layer) + " layers of " + m.name};
  }
  return {};
}

// Whole-model figures (tp = 1): parameters, weights, KV per token / block / sequence.
void plan_model_totals(MemoryPlan& p) {
  const ModelShape& m = p.model;
  const PlanInputs& in = p.in;
  auto& ex = p.explain;
  const int64_t L = in.max_model_len, bs = in.block_size;
  PlanInputs one_gpu = in;
  one_gpu.tp = one_gpu.pp = 1;
  const StageWeights whole = stage_weights(m, p.params, one_gpu, 0, m.n_layer);
  p.weight_bytes_total = whole.bytes;
  ex.push_back({"parameters",
                "embedding " + num((int64_t)p.params.embedding) + " + head " +
                    num((int64_t)p.params.output_head) + " + attention " +
                    num((int64_t)p.params.attention) + " + dense MLP " +
                    num((int64_t)p.params.dense_mlp) + " + routed experts " +
                    num((int64_t)p.params.routed_experts) + " + shared experts " +
                    num((int64_t)p.params.shared_experts) + " + router " +
                    num((int64_t)p.params.router) + " + norms " + num((int64_t)p.params.norms),
                num((int64_t)p.params.total())});
  ex.push_back({"weights, whole model",
                m.gguf ? "sum of the GGUF file's tensor bytes"
                       : num((int64_t)p.params.total()) + " params at " + in.weight_dtype.name +
                             " (" + fixed(in.weight_dtype.bits_per_elem(), 3) + " bits)" +
                             (embedding_dtype(in.weight_dtype).name != in.weight_dtype.name
                                  ? ", embeddings and head in bf16"
                                  : ""),
                format_bytes((int64_t)p.weight_bytes_total)});
  explain_kv(m, in, ex);
  p.kv_bytes_per_token_total = kv_bytes_per_token(m, in.kv_dtype, 1);
  p.kv_bytes_per_block_total = p.kv_bytes_per_token_total * (uint64_t)bs;
  p.kv_bytes_per_seq_total = kv_bytes_per_sequence(m, in.kv_dtype, 1, 0, m.n_layer, L, bs);
  ex.push_back({"KV bytes per block, whole model",
                num((int64_t)p.kv_bytes_per_token_total) + " B x " + num(bs) + " tokens",
                format_bytes((int64_t)p.kv_bytes_per_block_total)});
  ex.push_back({"KV bytes per sequence of " + num(L) + " tokens, whole model",
                "sum over layers of min(ceil(" + num(L) + " / " + num(bs) + "), ceil((window + " +
                    num(bs - 1) + ") / " + num(bs) + ")) x " + num(bs) +
                    " tokens x bytes per token",
                format_bytes((int64_t)p.kv_bytes_per_seq_total)});
}

// One pipeline stage on one GPU: weights, activations, overhead, and the KV pool left over.
StagePlan plan_stage(MemoryPlan& p, int64_t s, uint64_t budget) {
  const ModelShape& m = p.model;
  const PlanInputs& in = p.in;
  auto& ex = p.explain;
  const int64_t L = in.max_model_len, bs = in.block_size;
  StagePlan st;
  st.stage = s;
  const int64_t base = m.n_layer / in.pp, rem = m.n_layer % in.pp;
  st.layer_begin = s * base + std::min(s, rem);
  st.layer_end = st.layer_begin + base + (s < rem ? 1 : 0);
  const bool last = s == in.pp - 1;
  std::vector<ExplainLine>* sx = s == 0 || last ? &ex : nullptr;
  st.weight_bytes = stage_weights(m, p.params, in, st.layer_begin, st.layer_end).bytes;
  st.activation_bytes = stage_activation(m, in, last, sx);
  st.overhead_bytes = in.overhead_bytes;
  st.budget_bytes = budget;
  st.kv_pool_bytes = (int64_t)budget - (int64_t)st.weight_bytes - (int64_t)st.activation_bytes -
                     (int64_t)st.overhead_bytes;
  uint64_t per_tok = 0;
  for (int64_t l = st.layer_begin; l < st.layer_end; ++l) {
    if (m.window_of_layer(l) >= 0) per_tok += kv_bytes_per_token_layer(m, in.kv_dtype, in.tp);
  }
  st.kv_bytes_per_token = per_tok;
  st.kv_bytes_per_block = per_tok * (uint64_t)bs;
  st.kv_bytes_per_seq =
      kv_bytes_per_sequence(m, in.kv_dtype, in.tp, st.layer_begin, st.layer_end, L, bs);
  st.num_blocks = st.kv_pool_bytes > 0 ? st.kv_pool_bytes / (int64_t)st.kv_bytes_per_block : 0;
  st.max_concurrency = st.kv_pool_bytes > 0 && st.kv_bytes_per_seq > 0
                           ? st.kv_pool_bytes / (int64_t)st.kv_bytes_per_seq
                           : 0;
  const std::string tag = in.pp > 1 ? " (stage " + num(s) + ")" : "";
  if (sx) {
    ex.push_back({"weights per GPU" + tag,
                  "layers [" + num(st.layer_begin) + ", " + num(st.layer_end) + ")" +
                      (s == 0 ? " + embedding" : "") + (last ? " + head" : "") + ", / tp " +
                      num(in.tp),
                  format_bytes((int64_t)st.weight_bytes)});
    ex.push_back({"KV pool per GPU" + tag,
                  format_bytes((int64_t)budget) + " - weights " +
                      format_bytes((int64_t)st.weight_bytes) + " - activations " +
                      format_bytes((int64_t)st.activation_bytes) + " - overhead " +
                      format_bytes((int64_t)st.overhead_bytes),
                  format_bytes(st.kv_pool_bytes)});
    ex.push_back({"KV blocks per GPU" + tag,
                  "floor(" + num(st.kv_pool_bytes) + " / (" + num((int64_t)per_tok) + " B x " +
                      num(bs) + "))",
                  num(st.num_blocks) + " blocks = " + num(st.num_blocks * bs) + " tokens"});
    ex.push_back({"max concurrent sequences at " + num(L) + tag,
                  "floor(" + num(st.kv_pool_bytes) + " / " + num((int64_t)st.kv_bytes_per_seq) +
                      " B per sequence)",
                  num(st.max_concurrency)});
  }
  return st;
}

void add_notes(MemoryPlan& p) {
  const ModelShape& m = p.model;
  const PlanInputs& in = p.in;
  const int64_t L = in.max_model_len;
  if (m.max_position > 0 && L > m.max_position) {
    p.notes.push_back("--max-model-len " + num(L) +
                      " exceeds the model's max_position_embeddings " + num(m.max_position) +
                      "; it needs rope scaling");
  }
  if (!m.is_mla() && in.tp > m.n_kv_head) {
    p.notes.push_back("only " + num(m.n_kv_head) + " KV heads for tp " + num(in.tp) +
                      ": each head is replicated on " + num(in.tp / m.n_kv_head) + " GPUs");
  }
  if (m.is_mla() && in.tp > 1) {
    p.notes.push_back(
        "MLA latents are not split by tensor parallelism: every GPU caches the "
        "whole latent (SGLang's DP attention avoids this)");
  }
  if (m.unconfirmed) p.notes.push_back("unconfirmed catalogue values: " + m.note);
  p.notes.push_back("activation peak is an estimate; vLLM measures it with a profiling run");
}

}  // namespace

Result<MemoryPlan> plan_memory(const ModelShape& m, const PlanInputs& in) {
  KVW_RETURN_IF_ERROR(m.validate());
  KVW_RETURN_IF_ERROR(in.validate());
  KVW_RETURN_IF_ERROR(check_shardable(m, in));
  MemoryPlan p;
  p.model = m;
  p.in = in;
  p.params = count_params(m);
  plan_model_totals(p);
  const uint64_t budget =
      (uint64_t)std::floor((long double)in.gpu_memory_bytes * in.gpu_memory_utilization);
  p.explain.push_back(
      {"budget per GPU",
       format_bytes((int64_t)in.gpu_memory_bytes) + " x " + fixed(in.gpu_memory_utilization, 2),
       format_bytes((int64_t)budget)});
  // Lengths are searched up to the model's positions (or the requested length, if longer).
  const int64_t cap =
      m.max_position > 0 ? std::max(m.max_position, in.max_model_len) : (int64_t{1} << 24);
  p.max_concurrency = INT64_MAX;
  p.max_len_at_concurrency = INT64_MAX;
  for (int64_t s = 0; s < in.pp; ++s) {
    StagePlan st = plan_stage(p, s, budget);
    const int64_t len = max_len_for(m, in, st, in.concurrency, cap);
    if (st.max_concurrency < p.max_concurrency) {
      p.max_concurrency = st.max_concurrency;
      p.binding_stage = s;
    }
    p.max_len_at_concurrency = std::min(p.max_len_at_concurrency, len);
    p.stages.push_back(st);
  }
  p.max_len_capped_by_model = p.max_len_at_concurrency == cap && m.max_position > 0;
  p.explain.push_back({"max length at " + num(in.concurrency) + " concurrent sequences",
                       "largest n <= " + num(cap) + " with " + num(in.concurrency) +
                           " x KV bytes per sequence(n) <= KV pool",
                       num(p.max_len_at_concurrency) + " tokens" +
                           (p.max_len_capped_by_model ? " (the model's context limit)" : "")});
  add_notes(p);
  set_verdict(p);
  return p;
}

}  // namespace kvw::planner
