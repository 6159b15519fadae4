#include "planner/engine_budget.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "gguf/tensor_types.h"
#include "planner/memory_plan.h"

namespace kvw::planner {

ModelDims engine_dims(const ModelShape& m, const Dtype& weight_dtype) {
  if (m.gguf) return m.gguf->dims;
  // The engine's head lengths: MLA queries and keys are qk_nope + qk_rope long, and the cache
  // row (and the attention's head length) is kv_lora_rank + qk_rope.
  const bool mla = m.is_mla();
  ModelDims d{.n_layer = m.n_layer,
              .n_embd = m.n_embd,
              .n_head = m.n_head,
              .n_head_kv = m.n_kv_head,
              .head_dim = mla ? m.qk_nope_head_dim + m.qk_rope_head_dim : m.head_dim,
              .n_ff = m.n_ff,
              .n_rot = m.rope_dims > 0 ? m.rope_dims
                       : mla           ? m.qk_rope_head_dim
                                       : m.head_dim,
              .local_rope = m.local_rope,
              .cache_heads = mla ? 1 : m.n_kv_head,
              .cache_head_dim = mla ? m.kv_lora_rank + m.qk_rope_head_dim : m.head_dim,
              .shared_kv = mla,
              .n_expert = m.is_moe() ? m.n_routed_experts : 0,
              .n_expert_used = m.is_moe() ? m.n_experts_per_tok : 0,
              .n_ff_exp = m.is_moe() ? m.moe_ff : 0,
              .n_ff_shared = m.shared_ff(),
              .q_lora_rank = m.q_lora_rank,
              .kv_lora_rank = m.kv_lora_rank,
              .qk_nope_dim = m.qk_nope_head_dim,
              .v_head_dim = m.v_head_dim,
              .matmul = {}};
  // No tensor table: every matrix has the uniform weight type and one of the model's row
  // lengths; the widest activation row rounded down to whole blocks of that type.
  const auto t = ggml_type_from_name(weight_dtype.name);
  if (t) {
    const int64_t block = type_traits(*t).block_elems;
    d.matmul.add_act(*t, max_matmul_in(d) / block * block);
    for (int64_t n_in : {m.n_embd, max_matmul_in(d), m.n_ff, m.moe_ff, m.shared_ff(), m.q_lora_rank,
                         m.kv_lora_rank, m.qk_nope_head_dim, m.n_head * m.head_dim}) {
      if (n_in > 0) d.matmul.add_packed(*t, n_in);
    }
  }
  if (mla) d.matmul.add_mla(t ? *t : GgmlType::kF32, m.kv_lora_rank);
  return d;
}

uint64_t engine_kv_bytes_per_token_layer(const ModelShape& m, KvDtype dtype) {
  return kv_bytes_per_token_layer(engine_dims(m, Dtype{}), dtype);
}

uint64_t engine_workspace_bytes(const ModelShape& m, int64_t max_num_batched_tokens,
                                int64_t n_threads, const Dtype& weight_dtype) {
  return workspace_layout(engine_dims(m, weight_dtype), max_num_batched_tokens, n_threads).bytes();
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
  b->draft_catch_up_bytes = (uint64_t)opt.max_num_batched_tokens * sizeof(int32_t);
  b->draft_workspace_bytes =
      engine_workspace_bytes(d, opt.max_num_batched_tokens, opt.n_threads, opt.weight_dtype) +
      (uint64_t)(opt.draft_logit_rows * d.n_vocab) * sizeof(float) + b->draft_catch_up_bytes;
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
    const auto pool_len = default_pool_tokens_per_seq(opt.max_model_len);
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
  return o.request_memory_bytes + o.grammar_cache_bytes + (uint64_t)conns * kConnectionBytes +
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
  if (draft_catch_up_bytes > 0) {
    os << "  draft catch-up: " << format_bytes((int64_t)draft_catch_up_bytes) << " ("
       << draft_catch_up_bytes << " B) of copied catch-up tokens, in draft_work\n";
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
