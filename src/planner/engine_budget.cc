#include "planner/engine_budget.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "gguf/tensor_types.h"
#include "kernels/kernels.h"
#include "planner/memory_plan.h"

namespace kvw::planner {
namespace {

// Activation row bytes kvwarden's kernels quantise matmul inputs to, for a uniform weight type:
// Q4_0/Q5_0/IQ4_NL/Q8_0/MXFP4 weights take Q8_0 rows (with the packed GEMM's per-block extras),
// K-quants take Q8_K rows, float weights read f32 directly.
void uniform_act_rows(const Dtype& w, int64_t max_in, int64_t& q80, int64_t& q8k) {
  q80 = q8k = 0;
  auto t = ggml_type_from_name(w.name);
  if (!t) return;
  if (*t == GgmlType::kQ4_0 || *t == GgmlType::kQ5_0 || *t == GgmlType::kIQ4_NL ||
      *t == GgmlType::kQ8_0 || *t == GgmlType::kMXFP4) {
    q80 = kernels::act_row_bytes(GgmlType::kQ8_0, max_in / 32 * 32);
  } else if (*t == GgmlType::kQ4_K || *t == GgmlType::kQ5_K || *t == GgmlType::kQ6_K) {
    q8k = max_in / 256 * type_traits(GgmlType::kQ8_K).block_bytes;
  }
}

// Model::Model's packed-GEMM scratch per thread: packed_scratch_bytes of the matrix that needs
// the most, rounded up to a cache line. A GGUF file lists its packed row lengths; otherwise every
// matrix has the uniform weight type and one of the model's row lengths.
uint64_t gemm_scratch_per_thread(const ModelShape& m, int64_t max_in, const Dtype& weight_dtype,
                                 int64_t T) {
  int64_t most = 0;
  if (m.gguf) {
    for (int64_t n_in : m.gguf->packed_float_n_in)
      most = std::max(most, kernels::packed_scratch_bytes(GgmlType::kF32, n_in, T));
    for (int64_t n_in : m.gguf->packed_q8_0_n_in)
      most = std::max(most, kernels::packed_scratch_bytes(GgmlType::kQ8_0, n_in, T));
  } else if (auto t = ggml_type_from_name(weight_dtype.name)) {
    for (int64_t n_in : {m.n_embd, max_in, m.n_ff, m.moe_ff, m.shared_ff(), m.q_lora_rank,
                         m.kv_lora_rank, m.n_head * m.head_dim}) {
      if (n_in > 0) most = std::max(most, kernels::packed_scratch_bytes(*t, n_in, T));
    }
  }
  return (uint64_t)(most + 63) / 64 * 64;
}

}  // namespace

uint64_t engine_kv_bytes_per_token_layer(const ModelShape& m, KvDtype dtype) {
  if (m.is_mla()) {  // one latent row serves as K and V (KvArenaConfig::shared_kv)
    return (uint64_t)((m.kv_lora_rank + m.qk_rope_head_dim) * kv_elem_bytes(dtype) +
                      kv_scale_bytes(dtype));
  }
  return (uint64_t)(2 * m.n_kv_head * (m.head_dim * kv_elem_bytes(dtype) + kv_scale_bytes(dtype)));
}

uint64_t engine_workspace_bytes(const ModelShape& m, int64_t max_num_batched_tokens,
                                int64_t n_threads, const Dtype& weight_dtype) {
  const uint64_t T = (uint64_t)max_num_batched_tokens;
  // The engine's head lengths: MLA queries and keys are qk_nope + qk_rope long, and the cache
  // row (and the attention's head length) is kv_lora_rank + qk_rope.
  const int64_t qk_head = m.is_mla() ? m.qk_nope_head_dim + m.qk_rope_head_dim : m.head_dim;
  const int64_t cache_head = m.is_mla() ? m.kv_lora_rank + m.qk_rope_head_dim : m.head_dim;
  const int64_t q_dim = m.n_head * qk_head, kv_dim = m.n_kv_head * qk_head;
  const int64_t shared_ff = m.shared_ff();
  const int64_t max_in = std::max(
      {m.n_embd, q_dim, m.n_ff, m.moe_ff, shared_ff, m.is_mla() ? m.n_head * cache_head : 0});
  const int64_t n_rot = m.gguf && m.gguf->n_rot > 0 ? m.gguf->n_rot
                        : m.is_mla()                ? m.qk_rope_head_dim
                                                    : m.head_dim;
  int64_t q80 = 0, q8k = 0;
  if (m.gguf) {
    q80 = m.gguf->act_q8_0_row_bytes;
    q8k = m.gguf->act_q8_k_row_bytes;
  } else {
    uniform_act_rows(weight_dtype, max_in, q80, q8k);
  }
  // MoE: A = T x experts_per_tok (token, expert) assignments; E = routed experts.
  const uint64_t E = m.is_moe() ? (uint64_t)m.n_routed_experts : 0;
  const uint64_t A = m.is_moe() ? T * (uint64_t)m.n_experts_per_tok : 0;
  // x, xn, q, k, v, tmp, cs (f32), gate and up (T x n_ff, A x moe_ff, T x the shared experts'
  // width or T x q_lora_rank, the largest), as Model::Model allocates them.
  const uint64_t ff_floats = std::max({T * (uint64_t)m.n_ff, A * (uint64_t)m.moe_ff,
                                       T * (uint64_t)shared_ff, T * (uint64_t)m.q_lora_rank});
  // (the rope row twice when the windowed layers have their own rope).
  const uint64_t floats_per_token =
      (uint64_t)(m.n_embd + max_in + q_dim + std::max(kv_dim, cache_head) + kv_dim + m.n_embd +
                 (m.local_rope ? 2 : 1) * n_rot);
  const uint64_t scratch_floats =
      (uint64_t)n_threads * (uint64_t)kernels::attention_scratch_floats((int32_t)cache_head);
  // Router logits [T][E], router scratch [threads][2E], ids, weights, slots and tokens of each
  // assignment [A] x 4, expert starts [E + 1], gathered rows [A][n_embd] (4-byte elements).
  const uint64_t moe_elems =
      m.is_moe() ? T * E + (uint64_t)n_threads * 2 * E + 4 * A + E + 1 + A * (uint64_t)m.n_embd : 0;
  // MLA: absorbed queries [T][H][cache_head], per-head inputs and outputs [H][T][...], one
  // dequantised row per thread, quantised per-head inputs [H x T][row bytes].
  uint64_t mla_floats = 0, mla_act = 0;
  if (m.is_mla()) {
    const uint64_t H = (uint64_t)m.n_head, R = (uint64_t)m.kv_lora_rank;
    mla_floats = T * H * (uint64_t)cache_head +
                 H * T * std::max<uint64_t>((uint64_t)m.qk_nope_head_dim, R) +
                 H * T * std::max<uint64_t>(R, (uint64_t)m.v_head_dim) + (uint64_t)n_threads * R;
    int64_t row = m.gguf ? m.gguf->mla_act_row_bytes : 0;
    if (!m.gguf) {
      const auto t = ggml_type_from_name(weight_dtype.name);
      row = t ? kernels::act_row_bytes(*t, (int64_t)R) : (int64_t)R * 4;
    }
    mla_act = H * T * (uint64_t)row;
  }
  const uint64_t act_rows = std::max(T, A);
  return 4 * (T * floats_per_token + 2 * ff_floats + scratch_floats + moe_elems + mla_floats) +
         act_rows * (uint64_t)(q80 + q8k) + mla_act +
         (uint64_t)n_threads * gemm_scratch_per_thread(m, max_in, weight_dtype, (int64_t)T);
}

int64_t engine_window(const ModelShape& m) {
  int64_t window = 0;
  for (int64_t l = 0; l < m.n_layer; ++l) {
    const int64_t w = m.window_of_layer(l);
    if (w == 0) return 0;  // a full-attention layer keeps every block
    window = std::max(window, w);
  }
  return window;
}

int64_t engine_blocks_per_seq(const ModelShape& m, int64_t max_model_len, int64_t block_size) {
  return window_blocks(max_model_len, engine_window(m), block_size);
}

int64_t engine_hybrid_window(const ModelShape& m, bool swa_full) {
  if (swa_full || m.is_mla() || engine_window(m) > 0) return 0;
  int64_t window = 0;
  for (int64_t l = 0; l < m.n_layer; ++l) window = std::max(window, m.window_of_layer(l));
  return window;
}

int64_t engine_window_slots_bound(int64_t window, int64_t block_size, int64_t max_num_seqs,
                                  int64_t max_num_batched_tokens) {
  const int64_t per_seq = (window - 1 + block_size - 1) / block_size + 3;
  return max_num_seqs * per_seq + (max_num_batched_tokens + block_size - 1) / block_size;
}

namespace {

// The draft model's rows: what DraftModelProposer loads and allocates (src/engine).
Status plan_draft_rows(const EngineOptions& opt, BudgetTable* b) {
  if (opt.draft == nullptr) return Status::ok_status();
  const ModelShape& d = *opt.draft;
  if (Status st = d.validate(); !st.ok()) return Error{"draft model: " + st.message()};
  if (engine_window(d) > 0) return Error{"draft model: sliding-window models cannot draft yet"};
  b->draft_weights_bytes =
      d.gguf ? d.gguf->weight_bytes : opt.weight_dtype.bytes(count_params(d).total());
  b->draft_workspace_bytes =
      engine_workspace_bytes(d, opt.max_num_batched_tokens, opt.n_threads, opt.weight_dtype) +
      (uint64_t)(opt.draft_logit_rows * d.n_vocab) * sizeof(float);
  b->draft_kv_bytes_per_block = (uint64_t)d.n_layer *
                                engine_kv_bytes_per_token_layer(d, opt.kv_dtype) *
                                (uint64_t)opt.block_size;
  return Status::ok_status();
}

}  // namespace

Result<BudgetTable> plan_engine_budget(const ModelShape& m, const EngineOptions& opt) {
  KVW_RETURN_IF_ERROR(m.validate());
  if (opt.max_num_batched_tokens < 1 || opt.block_size < 1 || opt.n_threads < 1) {
    return Error{"max_num_batched_tokens, block_size and n_threads must be >= 1"};
  }
  if (opt.kv_dtype == KvDtype::kFp8) return Error{"kvwarden's engine has no fp8 KV cache"};
  BudgetTable b;
  const ParamCounts params = count_params(m);
  b.weights_bytes = m.gguf ? m.gguf->weight_bytes : opt.weight_dtype.bytes(params.total());
  b.decode_weight_bytes =
      m.gguf ? m.gguf->decode_bytes_per_token
             : opt.weight_dtype.bytes(params.active() - (m.tied_embeddings ? 0 : params.embedding));
  b.n_experts = m.n_routed_experts;
  b.n_experts_used = m.n_experts_per_tok;
  b.workspace_bytes =
      engine_workspace_bytes(m, opt.max_num_batched_tokens, opt.n_threads, opt.weight_dtype);
  // The engine's logits buffer: one f32 row per sequence a step can sample.
  const int64_t logit_rows = opt.max_num_seqs > 0
                                 ? std::min(opt.max_num_seqs, opt.max_num_batched_tokens)
                                 : opt.max_num_batched_tokens;
  b.spec_logits_bytes = (uint64_t)(opt.spec_draft_logit_rows * m.n_vocab) * sizeof(float);
  b.prompt_logits_bytes = (uint64_t)(opt.prompt_logit_rows * m.n_vocab) * sizeof(float);
  b.reserve_bytes = opt.reserve_bytes + (uint64_t)(logit_rows * m.n_vocab) * sizeof(float) +
                    b.spec_logits_bytes + b.prompt_logits_bytes;
  b.hybrid_window = engine_hybrid_window(m, opt.swa_full);
  for (int64_t l = 0; b.hybrid_window > 0 && l < m.n_layer; ++l) {
    b.num_window_layers += m.window_of_layer(l) > 0 ? 1 : 0;
  }
  const uint64_t layer_bytes = engine_kv_bytes_per_token_layer(m, opt.kv_dtype);
  b.kv_bytes_per_token = (uint64_t)(m.n_layer - b.num_window_layers) * layer_bytes;
  b.kv_bytes_per_block = b.kv_bytes_per_token * (uint64_t)opt.block_size;
  b.kv_window_bytes_per_token = (uint64_t)b.num_window_layers * layer_bytes;
  b.kv_window_bytes_per_block = b.kv_window_bytes_per_token * (uint64_t)opt.block_size;
  // Hybrid: no more window slots than blocks, nor than the running sequences can hold.
  const uint64_t slots_bound =
      b.hybrid_window > 0 && opt.max_num_seqs > 0
          ? (uint64_t)engine_window_slots_bound(b.hybrid_window, opt.block_size, opt.max_num_seqs,
                                                opt.max_num_batched_tokens)
          : UINT64_MAX;
  b.request_bytes = opt.request_bytes;
  b.swap_staging_bytes = opt.swap_staging_bytes;
  KVW_RETURN_IF_ERROR(plan_draft_rows(opt, &b));
  const uint64_t fixed = b.weights_bytes + b.workspace_bytes + b.reserve_bytes + b.request_bytes +
                         b.swap_staging_bytes + b.draft_weights_bytes + b.draft_workspace_bytes;
  // A block id addresses the same token range in the target's pool and in the draft's.
  const uint64_t block_bytes =
      b.kv_bytes_per_block + b.draft_kv_bytes_per_block + b.kv_window_bytes_per_block;
  if (opt.memory_budget_bytes > 0) {
    if (opt.memory_budget_bytes < fixed + block_bytes) {
      return Error{"needs " + format_bytes((int64_t)fixed) +
                   " for weights, workspace, reserve and requests" +
                   (opt.draft != nullptr ? " (draft model included)" : "") + " plus " +
                   format_bytes((int64_t)block_bytes) + " for one KV block, budget " +
                   format_bytes((int64_t)opt.memory_budget_bytes)};
    }
    b.num_blocks = (opt.memory_budget_bytes - fixed) / block_bytes;
    if (b.num_blocks > slots_bound) {  // past the slot bound a block costs its full layers only
      const uint64_t left = opt.memory_budget_bytes - fixed - slots_bound * block_bytes;
      b.num_blocks = slots_bound + left / (block_bytes - b.kv_window_bytes_per_block);
    }
  } else {
    if (opt.max_model_len < 1 || opt.max_num_seqs < 1) {
      return Error{"give a memory budget, or max_model_len and max_num_seqs >= 1"};
    }
    const auto pool_len = std::min(opt.max_model_len, kDefaultPoolTokensPerSeq);
    b.num_blocks = std::max(
        (uint64_t)engine_blocks_per_seq(m, pool_len, opt.block_size) * (uint64_t)opt.max_num_seqs,
        (uint64_t)engine_blocks_per_seq(m, opt.max_model_len, opt.block_size));
  }
  if (b.hybrid_window > 0) {
    b.max_window_slots = slots_bound;
    b.num_window_slots = std::min(b.num_blocks, slots_bound);
  }
  b.kv_pool_bytes = b.kv_pool_bytes_for(b.num_blocks);
  b.draft_kv_pool_bytes = b.num_blocks * b.draft_kv_bytes_per_block;
  if (opt.max_model_len > 0) {
    b.max_model_len = opt.max_model_len;
    b.sliding_window = engine_window(m);
    b.kv_blocks_per_seq = (uint64_t)engine_blocks_per_seq(m, opt.max_model_len, opt.block_size);
    b.kv_bytes_per_seq = b.kv_blocks_per_seq * b.kv_bytes_per_block;
    b.max_seqs_at_max_len = b.num_blocks / b.kv_blocks_per_seq;
    if (b.hybrid_window > 0) {  // and the window slots its windowed layers hold
      const auto slots =
          (uint64_t)window_blocks(opt.max_model_len, b.hybrid_window, opt.block_size);
      b.kv_bytes_per_seq += slots * b.kv_window_bytes_per_block;
      b.max_seqs_at_max_len = std::min(b.max_seqs_at_max_len, b.num_window_slots / slots);
    }
  }
  b.total_bytes = fixed + b.kv_pool_bytes + b.draft_kv_pool_bytes;
  return b;
}

int64_t default_max_connections(int64_t max_num_seqs, int64_t max_queue) {
  return std::max<int64_t>(1024, 2 * max_open_streams(max_num_seqs, max_queue) + 512);
}

int64_t max_open_streams(int64_t max_num_seqs, int64_t max_queue) {
  return max_num_seqs + (max_queue > 0 ? max_queue : max_num_seqs);
}

uint64_t request_row_bytes(const RequestMemoryOptions& o) {
  const int64_t conns = o.max_connections > 0
                            ? o.max_connections
                            : default_max_connections(o.max_num_seqs, o.max_queue);
  const auto streams = (uint64_t)max_open_streams(o.max_num_seqs, o.max_queue);
  return o.request_memory_bytes + (uint64_t)conns * kConnectionBytes +
         streams * (2 * o.stream_buffer_bytes + (uint64_t)o.max_model_len * kAnswerBytesPerToken);
}

uint64_t BudgetTable::kv_pool_bytes_for(uint64_t n) const {
  const uint64_t slots = hybrid_window > 0 ? std::min(n, max_window_slots) : 0;
  return n * kv_bytes_per_block + slots * kv_window_bytes_per_block;
}

std::string BudgetTable::to_string() const {
  std::ostringstream os;
  auto row = [&](const char* what, uint64_t v) {
    os << "  " << what << std::string(12 - std::string(what).size(), ' ')
       << format_bytes((int64_t)v) << " (" << v << " B)\n";
  };
  row("weights", weights_bytes);
  row("workspace", workspace_bytes);
  row("kv_pool", kv_pool_bytes);
  row("reserve", reserve_bytes);
  if (request_bytes > 0) row("request", request_bytes);
  if (swap_staging_bytes > 0) row("swap_stage", swap_staging_bytes);
  if (draft_weights_bytes > 0) {
    row("draft_wts", draft_weights_bytes);
    row("draft_work", draft_workspace_bytes);
    row("draft_kv", draft_kv_pool_bytes);
  }
  row("total", total_bytes);
  if (spec_logits_bytes > 0) {
    os << "  spec: " << format_bytes((int64_t)spec_logits_bytes) << " (" << spec_logits_bytes
       << " B) of draft logit rows, in reserve\n";
  }
  if (prompt_logits_bytes > 0) {
    os << "  prompt logprobs: " << format_bytes((int64_t)prompt_logits_bytes) << " ("
       << prompt_logits_bytes << " B) of prompt logit rows, in reserve\n";
  }
  os << "  kv: " << kv_bytes_per_token << " B/token, " << kv_bytes_per_block << " B/block, "
     << num_blocks << " blocks\n";
  if (hybrid_window > 0) {
    os << "  kv window: " << num_window_layers << " layers windowed to " << hybrid_window
       << " tokens, " << kv_window_bytes_per_token << " B/token, " << kv_window_bytes_per_block
       << " B/block, " << num_window_slots << " window slots (--swa-full keeps them all)\n";
  }
  if (n_experts > 0) {
    os << "  decode: " << format_bytes((int64_t)decode_weight_bytes) << " (" << decode_weight_bytes
       << " B) of weights read per token, " << n_experts_used << " of " << n_experts
       << " experts\n";
  }
  if (kv_blocks_per_seq > 0) {
    os << "  seq: " << kv_bytes_per_seq << " B/sequence (" << kv_blocks_per_seq << " blocks) at "
       << max_model_len << " tokens";
    if (sliding_window > 0) os << ", sliding window " << sliding_window;
    os << "; room for " << max_seqs_at_max_len << " such sequences\n";
  }
  return os.str();
}

}  // namespace kvw::planner
