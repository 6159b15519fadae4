#include "model/workspace_layout.h"

#include <algorithm>

#include "gguf/gguf_file.h"
#include "kernels/kernels.h"
#include "model/forward_util.h"
#include "model/hparams.h"
#include "model/moe_router.h"

namespace kvw {

void MatmulNeeds::add_act(GgmlType type, int64_t n_in) {
  if (uses_q8_0(type)) {
    act_q8_0_row_bytes = std::max(act_q8_0_row_bytes, kernels::act_row_bytes(type, n_in));
  } else if (uses_q8_k(type)) {
    act_q8_k_row_bytes = std::max(act_q8_k_row_bytes, kernels::act_row_bytes(type, n_in));
  }
}

void MatmulNeeds::add_packed(GgmlType type, int64_t n_in) {
  const std::pair<GgmlType, int64_t> m{type, n_in};
  if (std::find(packed.begin(), packed.end(), m) == packed.end()) packed.push_back(m);
}

void MatmulNeeds::add(GgmlType type, int64_t n_in, bool is_packed) {
  add_act(type, n_in);
  if (is_packed) add_packed(type, n_in);
}

void MatmulNeeds::add_mla(GgmlType type, int64_t n_in) {
  mla_act_row_bytes = std::max(mla_act_row_bytes, kernels::act_row_bytes(type, n_in));
}

int64_t MatmulNeeds::gemm_scratch_bytes(int64_t n_tokens) const {
  int64_t most = 0;
  for (const auto& [type, n_in] : packed) {
    most = std::max(most, kernels::packed_scratch_bytes(type, n_in, n_tokens));
  }
  return most;
}

ModelDims model_dims(const ModelHParams& hp) {
  const MoeParams& moe = hp.moe;
  const MlaParams& mla = hp.mla;
  return ModelDims{.n_layer = hp.n_layer,
                   .n_embd = hp.n_embd,
                   .n_head = hp.n_head,
                   .n_head_kv = hp.n_head_kv,
                   .head_dim = hp.head_dim,
                   .n_ff = hp.n_ff,
                   .n_rot = hp.rope.n_rot,
                   .local_rope = hp.has_rope_swa,
                   .cache_heads = hp.cache_heads(),
                   .cache_head_dim = hp.cache_head_dim(),
                   .shared_kv = mla.is_mla(),
                   .n_expert = moe.n_expert,
                   .n_expert_used = moe.is_moe() ? moe.n_expert_used : 0,
                   .n_ff_exp = moe.is_moe() ? moe.n_ff_exp : 0,
                   .n_ff_shared = moe.n_ff_shared,
                   .q_lora_rank = mla.q_lora_rank,
                   .kv_lora_rank = mla.kv_lora_rank,
                   .qk_nope_dim = mla.qk_nope_dim,
                   .v_head_dim = mla.v_head_dim,
                   .matmul = {}};
}

MatmulNeeds matmul_needs(const GgufFile& f, const ModelHParams& hp) {
  MatmulNeeds needs;
  const kernels::KernelTable& kt = kernels::kernels();
  for (const GgufTensorInfo& t : f.tensors()) {
    // Matmul weights are 2-D and not norms; stacked experts (ffn_*_exps) are 3-D: n_expert
    // matrices of the same row length shape[0]. gpt-oss's per-expert biases (ffn_*_exps.bias)
    // are 2-D tables added, not multiplied.
    const bool matmul = (t.shape.size() == 2 || t.shape.size() == 3) &&
                        t.name != "token_embd.weight" && !t.name.ends_with(".bias");
    const bool tied_output = hp.tied_embeddings && t.name == "token_embd.weight";
    if (!matmul && !tied_output) continue;
    // As pack_matrices packs them: the tied output head stays in the file's layout, since
    // embedding lookups read it row by row.
    needs.add(t.type, t.shape[0], !tied_output && kt.packs(t.type, t.shape[1], t.shape[0]));
  }
  if (hp.mla.is_mla()) {
    // blk.0's k_b (row length nope, or kv_lora_rank when fused into attn_kv_b) and v_b
    // (kv_lora_rank), quantised per head.
    const char* kb = hp.mla.split_kv_b ? "blk.0.attn_k_b.weight" : "blk.0.attn_kv_b.weight";
    const char* vb = hp.mla.split_kv_b ? "blk.0.attn_v_b.weight" : "blk.0.attn_kv_b.weight";
    for (const char* name : {kb, vb}) {
      if (const GgufTensorInfo* t = f.find_tensor(name); t != nullptr && !t->shape.empty()) {
        needs.add_mla(t->type, t->shape[0]);
      }
    }
  }
  return needs;
}

int64_t max_matmul_in(const ModelDims& d) {
  // xn also holds MLA's attention output, n_head latent rows per token.
  return std::max({d.n_embd, d.q_dim(), d.n_ff, d.n_ff_exp, d.n_ff_shared,
                   d.is_mla() ? d.n_head * d.cache_head_dim : 0});
}

WorkspaceLayout workspace_layout(const ModelDims& d, int64_t max_tokens, int64_t n_threads) {
  const int64_t T = max_tokens;
  const int64_t A = T * d.n_expert_used;  // MoE (token, expert) assignments per step
  const int64_t act_rows = std::max(T, A);
  WorkspaceLayout w;
  w.tokens = T;
  w.x = T * d.n_embd;
  w.xn = T * max_matmul_in(d);
  // Activation rows sized for the widest input of any weight of that format, one row per token,
  // or per assignment when experts are gathered.
  w.act_q8_0_bytes = act_rows * d.matmul.act_q8_0_row_bytes;
  w.act_q8_k_bytes = act_rows * d.matmul.act_q8_k_row_bytes;
  w.q = T * d.q_dim();
  w.k = T * std::max(d.kv_dim(), d.cache_head_dim);
  w.v = T * d.kv_dim();
  w.tmp = T * d.n_embd;
  w.gate = w.up = std::max({T * d.n_ff, A * d.n_ff_exp, T * d.n_ff_shared, T * d.q_lora_rank});
  w.cs = T * d.n_rot;
  w.cs_swa = d.local_rope ? T * d.n_rot : 0;
  w.attn_scratch = n_threads * kernels::attention_scratch_floats((int32_t)d.cache_head_dim);
  // The packed GEMM's per-thread scratch for the matrix that needs the most (an expert or a
  // head sees at most T tokens too), threads a cache line (16 floats) apart.
  w.gemm_scratch_per_thread = (d.matmul.gemm_scratch_bytes(T) + 63) / 64 * 16;
  w.gemm_scratch = n_threads * w.gemm_scratch_per_thread;
  if (d.is_moe()) {
    MoeParams moe;
    moe.n_expert = (int32_t)d.n_expert;
    w.router_logits = T * d.n_expert;
    w.router_scratch = n_threads * router_scratch_floats(moe);
    w.route_ids = w.route_weights = w.route_slot = w.assign_tok = A;
    w.expert_begin = d.n_expert + 1;
    w.moe_rows = A * d.n_embd;
  }
  if (d.is_mla()) {
    const int64_t H = d.n_head, R = d.kv_lora_rank;
    w.mla_q = T * H * d.cache_head_dim;
    w.mla_in = H * T * std::max(d.qk_nope_dim, R);
    w.mla_out = H * T * std::max(R, d.v_head_dim);
    w.mla_row = n_threads * R;
    w.mla_act_bytes = H * T * d.matmul.mla_act_row_bytes;
  }
  return w;
}

uint64_t WorkspaceLayout::bytes() const {
  // Every buffer but the *_bytes ones holds 4-byte elements (f32 or int32).
  const int64_t elems = x + xn + q + k + v + tmp + gate + up + cs + cs_swa + attn_scratch +
                        gemm_scratch + router_logits + router_scratch + route_ids + route_weights +
                        route_slot + assign_tok + expert_begin + moe_rows + mla_q + mla_in +
                        mla_out + mla_row;
  return 4 * (uint64_t)elems + (uint64_t)(act_q8_0_bytes + act_q8_k_bytes + mla_act_bytes);
}

KvArenaConfig kv_arena_shape(const ModelDims& d, int32_t block_size, KvDtype dtype) {
  return KvArenaConfig{.n_layer = (int32_t)d.n_layer,
                       .n_kv_heads = (int32_t)d.cache_heads,
                       .head_dim = (int32_t)d.cache_head_dim,
                       .block_size = block_size,
                       .num_blocks = 0,
                       .dtype = dtype,
                       .shared_kv = d.shared_kv,
                       .num_window_slots = 0,
                       .window_layers = {}};
}

uint64_t kv_bytes_per_token_layer(const ModelDims& d, KvDtype dtype) {
  return KvArena::layer_block_bytes(kv_arena_shape(d, 1, dtype));
}

}  // namespace kvw
