// model/weights.h: typed views of a model's tensors inside the mmapped GGUF file. Matrices stay
// in their stored type (no whole-model dequantisation); small vectors (norms, biases) are
// converted to f32 once at load.
// Thread safety: immutable after load; the GgufFile must outlive the weights.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "gguf/tensor_types.h"
#include "kernels/kernels.h"
#include "model/hparams.h"

namespace kvw {

class GgufFile;

// n_rows rows of n_in elements each, stored in `type` (ggml shape [n_in, n_rows]), or, when
// `packed`, in the kernels' packed layout of the same bytes (kernels/packed.cc).
struct WeightMatrix {
  GgmlType type = GgmlType::kF32;
  const void* data = nullptr;
  int64_t n_rows = 0;
  int64_t n_in = 0;
  uint64_t row_bytes = 0;
  bool packed = false;
};

// n_expert matrices of n_rows x n_in stacked in one tensor (ggml shape [n_in, n_rows, n_expert],
// as llama.cpp's converter writes ffn_{gate,up,down}_exps): expert e starts e * expert_bytes in.
struct ExpertMatrices {
  WeightMatrix first;  // expert 0
  int32_t n_expert = 0;
  uint64_t expert_bytes = 0;  // n_rows * row_bytes

  WeightMatrix expert(int32_t e) const {
    WeightMatrix m = first;
    m.data = static_cast<const uint8_t*>(first.data) + (uint64_t)e * expert_bytes;
    return m;
  }
};

struct LayerWeights {
  std::vector<float> attn_norm;       // [n_embd]
  WeightMatrix wq, wk, wv, wo;        // [q_dim x n_embd], [kv_dim x n_embd] x2, [n_embd x q_dim]
                                      // (wq/wk/wv may be row ranges of one fused attn_qkv)
  std::vector<float> bq, bk, bv;      // qwen2 biases [q_dim], [kv_dim], [kv_dim]; empty otherwise
  std::vector<float> q_norm, k_norm;  // qwen3: per-head RMSNorm weights [head_dim]; else empty
  std::vector<float> ffn_norm;        // [n_embd]
  WeightMatrix gate, up, down;        // dense layers: [n_ff x n_embd] x2, [n_embd x n_ff]
                                      // (phi3: gate and up are the halves of ffn_up)
  // gemma2/3: RMSNorm of the attention and FFN outputs before their residual adds [n_embd];
  // empty otherwise.
  std::vector<float> post_attn_norm, post_ffw_norm;
  // MoE layers (hp.is_moe_layer) instead of gate/up/down:
  WeightMatrix router;                // ffn_gate_inp [n_expert x n_embd]
  ExpertMatrices gate_exps, up_exps;  // n_expert x [n_ff_exp x n_embd]
  ExpertMatrices down_exps;           // n_expert x [n_embd x n_ff_exp]
  std::vector<float> exp_probs_b;     // [n_expert] selection bias; empty when absent
  WeightMatrix shexp_gate, shexp_up;  // shared experts as one FFN: [n_ff_shared x n_embd]
  WeightMatrix shexp_down;            // [n_embd x n_ff_shared]; null when none
  std::vector<float> shexp_gate_inp;  // qwen2moe: [n_embd] the shared expert's sigmoid gate
  // gpt-oss: router bias [n_expert]; per-expert biases [n_expert][n_ff_exp] (gate, up) and
  // [n_expert][n_embd] (down); the attention's sinks [n_head] and output bias [n_embd].
  std::vector<float> router_b, gate_exps_b, up_exps_b, down_exps_b;
  std::vector<float> attn_sinks, bo;

  // MLA (deepseek2) instead of wq/wk/wv; wo reads n_head x v_head_dim.
  // Queries: wq [n_head x (nope + rope) x n_embd], or, with q_lora_rank > 0, wq_a
  // [q_lora_rank x n_embd] -> RMSNorm q_a_norm -> wq_b [n_head x (nope + rope) x q_lora_rank].
  WeightMatrix wq_a, wq_b;
  std::vector<float> q_a_norm;   // [q_lora_rank]
  WeightMatrix wkv_a;            // attn_kv_a_mqa [(kv_lora_rank + rope) x n_embd]
  std::vector<float> kv_a_norm;  // [kv_lora_rank]
  // Per-head up-projections of the latent. k_b: head h maps a query's no-rope part into the
  // latent (kv_lora_rank rows of nope), so scores read the cache directly; v_b: head h maps the
  // attention-weighted latent to its value (v_head_dim rows of kv_lora_rank). Files with the
  // older fused attn_kv_b hold W_kb[h] untransposed (nope rows of kv_lora_rank): then
  // k_b_transposed is set and k_b.expert(h) is that nope x kv_lora_rank slice.
  ExpertMatrices k_b, v_b;
  bool k_b_transposed = false;
};

struct ModelWeights {
  WeightMatrix token_embd;  // [n_vocab x n_embd]
  std::vector<LayerWeights> layers;
  std::vector<float> output_norm;  // [n_embd]
  WeightMatrix output;             // [n_vocab x n_embd]; == token_embd when tied
  std::vector<float> rope_freqs;   // [n_rot/2] optional per-pair frequency divisors
  // phi3's LongRoPE divisors [n_rot/2] (optional): long for contexts past rope.orig_ctx, short
  // within it (Model picks one; see rope_factors in model.h).
  std::vector<float> rope_long, rope_short;
  uint64_t total_bytes = 0;  // bytes of all tensors in the file
};

// Finds and shape-checks every tensor; errors name the file and tensor.
Result<ModelWeights> weights_from_gguf(const GgufFile& file, const ModelHParams& hp);

// Repacks, in place in the file's private mapping, every matrix the table packs (kt.packs):
// the layers' projections, router and each expert's slice of the stacked experts, and `output`
// unless it is token_embd (which embedding lookups read row by row, so it is never packed).
// No double residency: the packed bytes are copy-on-write pages that replace the file pages,
// so resident weights stay total_bytes. Returns the bytes repacked; errors: mprotect failing.
Result<uint64_t> pack_matrices(GgufFile& file, ModelWeights& w, const kernels::KernelTable& kt);

// y [n_tokens][w.n_rows] = w x act (quantize_act output for w.type), rows of thread ith of nth:
// kt.matmul, or kt.matmul_packed for a packed matrix with the thread's scratch of
// kernels::packed_scratch_bytes(w.type, w.n_in, n_tokens) bytes.
void matmul(const kernels::KernelTable& kt, const WeightMatrix& w, const void* act,
            int64_t n_tokens, float* y, int ith, int nth, void* scratch);

}  // namespace kvw
