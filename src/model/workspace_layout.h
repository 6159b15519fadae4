// model/workspace_layout.h: every buffer a Model allocates per step, and its KV row, from one
// description of the model (ModelDims). Model::Model sizes its buffers with workspace_layout()
// and the planner's `workspace` row is workspace_layout().bytes() of the same dims, so
// `plan --engine` equals serve's budget table by construction, not by two formulas kept in step.
// ModelDims comes from a GGUF's hyper-parameters and tensor table (model_dims, matmul_needs) or,
// for a catalogue shape with no file, from the planner's conversion (planner/engine_budget.cc).
// Pure functions of plain values.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/kv_dtype.h"
#include "gguf/tensor_types.h"
#include "kv/kv_arena.h"

namespace kvw {

class GgufFile;
struct ModelHParams;

// What the model's matmuls need beside their weights, gathered over every matrix with add():
// the widest activation row of each quantised input format, and the packed GEMM's matrices.
struct MatmulNeeds {
  int64_t act_q8_0_row_bytes = 0;  // widest Q8_0 activation row any matmul reads (0: none)
  int64_t act_q8_k_row_bytes = 0;  // widest Q8_K activation row any matmul reads (0: none)
  // Distinct (type, n_in) of the matrices repacked for the GEMM: its per-thread scratch is the
  // largest packed_scratch_bytes over them (not monotone in n_in, so every one is kept).
  std::vector<std::pair<GgmlType, int64_t>> packed;
  // MLA: the widest quantised row of the per-head up-projections (k_b, v_b), one per head and
  // token of a step.
  int64_t mla_act_row_bytes = 0;

  // A matrix of `type` reading rows of n_in; `packed`: repacked for the GEMM at load.
  void add(GgmlType type, int64_t n_in, bool packed);
  void add_act(GgmlType type, int64_t n_in);     // its activation row only
  void add_packed(GgmlType type, int64_t n_in);  // its GEMM scratch only
  void add_mla(GgmlType type, int64_t n_in);     // an MLA per-head projection's input row
  // Per-thread GEMM scratch for steps of n_tokens: the largest packed_scratch_bytes.
  int64_t gemm_scratch_bytes(int64_t n_tokens) const;
};

// The model dimensions the engine sizes its memory from (ModelHParams' names and meanings).
struct ModelDims {
  int64_t n_layer = 0;
  int64_t n_embd = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;     // query/key head length (MLA: qk_nope + qk_rope)
  int64_t n_ff = 0;         // dense FFN width
  int64_t n_rot = 0;        // rope dims per head: cos/sin rows per token
  bool local_rope = false;  // windowed layers rotate with their own rope (a second cs row)
  // The KV cache per token and layer: cache_heads rows of cache_head_dim; shared_kv (MLA): one
  // latent row serves as K and V.
  int64_t cache_heads = 0;
  int64_t cache_head_dim = 0;
  bool shared_kv = false;
  // MoE (n_expert 0: dense).
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  int64_t n_ff_shared = 0;  // the shared experts' FFN width; 0: none
  // MLA (kv_lora_rank 0: none).
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_dim = 0;
  int64_t v_head_dim = 0;
  MatmulNeeds matmul;

  bool is_moe() const { return n_expert > 0; }
  bool is_mla() const { return kv_lora_rank > 0; }
  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
};

// The widest row any matmul reads (the xn buffer's row).
int64_t max_matmul_in(const ModelDims& d);

// The dimensions of `hp` (matmul needs left empty: see matmul_needs).
ModelDims model_dims(const ModelHParams& hp);

// The matmul needs of a GGUF file's weights, from its tensor table: every 2-D or stacked 3-D
// matrix but the embedding (unless tied: then it is the output head, read unpacked) and the
// biases, packed as pack_matrices does (kernels' packs()), and MLA's per-head projections.
// Model::Model sizes its buffers from this and checks each loaded weight fits.
MatmulNeeds matmul_needs(const GgufFile& file, const ModelHParams& hp);

// Element counts of every workspace buffer for steps of up to `tokens` tokens on n_threads
// threads (f32 or int32 elements unless named *_bytes). A = tokens x n_expert_used.
struct WorkspaceLayout {
  int64_t tokens = 0;
  int64_t x = 0;               // [T][n_embd] residual stream
  int64_t xn = 0;              // [T][max matmul input] normed / matmul input
  int64_t act_q8_0_bytes = 0;  // [max(T, A)][act_q8_0_row_bytes]
  int64_t act_q8_k_bytes = 0;  // [max(T, A)][act_q8_k_row_bytes]
  int64_t q = 0, k = 0, v = 0, tmp = 0;
  int64_t gate = 0, up = 0;  // max(T n_ff, A n_ff_exp, T n_ff_shared, T q_lora_rank)
  int64_t cs = 0, cs_swa = 0;
  int64_t attn_scratch = 0;             // [n_threads][attention_scratch_floats]
  int64_t gemm_scratch_per_thread = 0;  // floats, threads a cache line apart
  int64_t gemm_scratch = 0;             // [n_threads][gemm_scratch_per_thread]
  // MoE (0 when dense).
  int64_t router_logits = 0, router_scratch = 0;
  int64_t route_ids = 0, route_weights = 0, route_slot = 0, assign_tok = 0;  // [A] each
  int64_t expert_begin = 0, moe_rows = 0;
  // MLA (0 otherwise).
  int64_t mla_q = 0, mla_in = 0, mla_out = 0, mla_row = 0;
  int64_t mla_act_bytes = 0;

  uint64_t bytes() const;  // the workspace row of the budget table
};

WorkspaceLayout workspace_layout(const ModelDims& d, int64_t max_tokens, int64_t n_threads);

// The KV arena's shape for `d` (no blocks, no window slots: the caller fills them in).
KvArenaConfig kv_arena_shape(const ModelDims& d, int32_t block_size, KvDtype dtype);
// Bytes of K and V of one token in one layer, as the KV arena lays them out.
uint64_t kv_bytes_per_token_layer(const ModelDims& d, KvDtype dtype);

}  // namespace kvw
