// model/hparams.h: hyper-parameters of a Llama-family model, read once from GGUF metadata and
// immutable afterwards (llama.cpp's hparams; runtime choices live in other config structs).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace kvw {

class GgufFile;

enum class RopeScaling { kNone, kLinear, kNtk, kYarn };
// kNormal: rotate adjacent pairs (x[2i], x[2i+1]) — GGUF "llama" (weights were permuted on
// conversion). kNeox: rotate (x[i], x[i + d/2]) — qwen2 and HF-native layouts.
enum class RopeStyle { kNormal, kNeox };

const char* rope_scaling_name(RopeScaling s);
Result<RopeScaling> parse_rope_scaling(const std::string& name);

struct RopeParams {
  RopeStyle style = RopeStyle::kNormal;
  int32_t n_rot = 0;           // rotated dims per head (rope.dimension_count), even
  float freq_base = 10000.0f;  // rope.freq_base
  RopeScaling scaling = RopeScaling::kNone;
  float scale_factor = 1.0f;     // rope.scaling.factor (context extension factor, >= 1)
  int32_t orig_ctx = 0;          // rope.scaling.original_context_length (YaRN)
  float attn_factor = 1.0f;      // rope.scaling.attn_factor: cos/sin magnitude (YaRN, LongRoPE)
  float yarn_beta_fast = 32.0f;  // YaRN ramp bounds, as in the paper and llama.cpp
  float yarn_beta_slow = 1.0f;
};

// How router scores are made from the router logits (GGUF `expert_gating_func`, llama.cpp's
// llama_expert_gating_func_type values: 1 softmax, 2 sigmoid, 3 softmax over the chosen top-k
// logits only, gpt-oss's).
enum class ExpertGating { kSoftmax = 1, kSigmoid = 2, kSoftmaxWeight = 3 };

// Mixture of experts (Mixtral-style llama files; DeepSeek's routing knobs). n_expert == 0: dense.
struct MoeParams {
  int32_t n_expert = 0;            // expert_count
  int32_t n_expert_used = 0;       // expert_used_count: experts each token is routed to (top-k)
  int32_t n_expert_shared = 0;     // expert_shared_count: always-on experts (ffn_*_shexp)
  int32_t n_ff_exp = 0;            // expert_feed_forward_length (llama: feed_forward_length)
  int32_t n_layer_dense_lead = 0;  // leading_dense_block_count: layers [0, n) keep a dense FFN
  int32_t n_group = 0;             // expert_group_count: > 1 limits top-k to the best groups
  int32_t n_group_used = 0;        // expert_group_used_count
  ExpertGating gating = ExpertGating::kSoftmax;
  bool norm_weights = true;    // expert_weights_norm: chosen weights renormalised to sum 1
  float weights_scale = 1.0f;  // expert_weights_scale: routed output multiplier
  bool probs_bias = false;     // exp_probs_b present: a selection-only bias (DeepSeek-V3)
  // Width of the shared-expert FFN every token also passes through (ffn_*_shexp): deepseek2
  // n_ff_exp x expert_shared_count; qwen2moe expert_shared_feed_forward_length, its output
  // scaled by a per-token sigmoid gate (ffn_gate_inp_shexp). 0: no shared experts.
  int32_t n_ff_shared = 0;
  // gpt-oss: ffn_gate_inp.bias [n_expert] added to the router logits (selection and weights),
  // and ffn_{gate,up,down}_exps.bias, one row per expert, added to each expert's projections.
  bool router_bias = false;
  bool expert_bias = false;

  bool is_moe() const { return n_expert > 0; }
};

// Multi-head latent attention (DeepSeek-V2/V3, GGUF arch "deepseek2"). K and V come from one
// latent of kv_lora_rank per token plus a shared rope key of qk_rope_dim.
struct MlaParams {
  int32_t q_lora_rank = 0;   // attention.q_lora_rank; 0: queries from a plain attn_q (V2-Lite)
  int32_t kv_lora_rank = 0;  // attention.kv_lora_rank; 0: not MLA
  int32_t qk_rope_dim = 0;   // rope.dimension_count: the rotated part of each query/key head
  int32_t qk_nope_dim = 0;   // the unrotated part: key head length - qk_rope_dim
  int32_t v_head_dim = 0;    // value head length
  // attn_k_b / attn_v_b (newer converters, which write key_length = kv_lora_rank + rope and the
  // per-head lengths as attention.key_length_mla / value_length_mla) instead of attn_kv_b.
  bool split_kv_b = false;
  float yarn_log_mul = 0.0f;  // rope.scaling.yarn_log_multiplier: DeepSeek's attention mscale

  bool is_mla() const { return kv_lora_rank > 0; }
};

// FFN activation: SwiGLU (silu(gate) * up), Gemma's GeGLU with the tanh approximation of GELU
// (gelu_tanh(gate) * up), or gpt-oss's clamped SwiGLU (model/oai_ops.h; its experts).
enum class FfnAct { kSilu, kGeluTanh, kSwigluOai };

// Gemma-2/3's switches (llama.cpp's gemma2 / gemma3 graphs); the defaults leave the other
// families as they are.
struct GemmaParams {
  bool scale_embd = false;     // token embeddings multiplied by sqrt(n_embd)
  bool post_norms = false;     // post_attention_norm / post_ffw_norm on each block's output
  float attn_softcap = 0.0f;   // attn_logit_softcapping: scores = c tanh(scores / c); 0 = off
  float final_softcap = 0.0f;  // final_logit_softcapping, on the logits likewise; 0 = off
};

struct ModelHParams {
  std::string arch;  // general.architecture: llama, qwen2, qwen2moe, qwen3, qwen3moe, gemma2,
                     // gemma3, deepseek2, phi3 or gpt-oss
  std::string name;  // general.name, if any
  int32_t n_vocab = 0;
  int32_t n_embd = 0;          // embedding_length
  int32_t n_layer = 0;         // block_count
  int32_t n_head = 0;          // attention.head_count
  int32_t n_head_kv = 0;       // attention.head_count_kv (GQA when < n_head)
  int32_t head_dim = 0;        // n_embd / n_head unless attention.key_length says otherwise;
                               // MLA: the query/key head length qk_nope + qk_rope
  int32_t n_ff = 0;            // feed_forward_length
  int32_t n_ctx_train = 0;     // context_length
  int32_t sliding_window = 0;  // attention.sliding_window; 0 = full attention
  // attention.sliding_window_pattern (llama.cpp's set_swa_pattern): with a window, layer l is
  // windowed when swa_period == 0 (every layer: Mistral) or l % swa_period < swa_period - 1
  // (gemma2: 2, even layers; gemma3: 6, five local layers then one global).
  int32_t swa_period = 0;
  float attn_scale = 0.0f;  // score scale; 0: 1 / sqrt(head_dim)
  FfnAct ffn_act = FfnAct::kSilu;
  GemmaParams gemma;
  float norm_eps = 1e-5f;        // attention.layer_norm_rms_epsilon
  bool qkv_bias = false;         // qwen2: attn_{q,k,v}.bias present
  bool qkv_fused = false;        // one attn_qkv [q_dim + 2 kv_dim] per layer (phi3's files)
  bool longrope = false;         // rope_factors_long / _short present (phi3's LongRoPE)
  bool qk_norm = false;          // qwen3(moe): attn_{q,k}_norm, per head, before RoPE
  bool gate_up_fused = false;    // phi3: ffn_up [2 n_ff x n_embd] = gate rows, then up rows
  bool tied_embeddings = false;  // no output.weight: logits use token_embd.weight
  // gpt-oss: a learned logit per query head (attn_sinks [n_head]) that joins each softmax's
  // denominator with no value row, so a head can attend to nothing.
  bool attn_sinks = false;
  bool attn_out_bias = false;  // gpt-oss: attn_output.bias [n_embd]
  RopeParams rope;
  // RoPE of the windowed layers when they have their own (gemma2: rope.freq_base_swa, else the
  // global base; gemma3: rope.freq_base_swa, else 10000, and never scaled); else unused.
  RopeParams rope_swa;
  bool has_rope_swa = false;
  MoeParams moe;
  MlaParams mla;

  bool is_swa_layer(int32_t l) const {
    return sliding_window > 0 && (swa_period == 0 || l % swa_period < swa_period - 1);
  }
  // Positions layer l attends back to (its own included); 0 = all.
  int32_t layer_window(int32_t l) const { return is_swa_layer(l) ? sliding_window : 0; }
  // The window every layer has, so blocks behind it can be freed; 0 when any layer is global.
  int32_t kv_window() const;
  // The rope layer l rotates with.
  const RopeParams& layer_rope(int32_t l) const {
    return has_rope_swa && is_swa_layer(l) ? rope_swa : rope;
  }
  // Whether layer l's FFN is routed experts (else the dense ffn_gate/up/down).
  bool is_moe_layer(int32_t l) const { return moe.is_moe() && l >= moe.n_layer_dense_lead; }
  int32_t q_dim() const { return n_head * head_dim; }
  int32_t kv_dim() const { return n_head_kv * head_dim; }
  // The KV cache's shape per token and layer: n_head_kv rows of head_dim, or for MLA one latent
  // row of kv_lora_rank + qk_rope_dim that serves as both K and V (model/mla_forward.cc).
  int32_t cache_heads() const { return mla.is_mla() ? 1 : n_head_kv; }
  int32_t cache_head_dim() const {
    return mla.is_mla() ? mla.kv_lora_rank + mla.qk_rope_dim : head_dim;
  }
  // Width of the attention output that attn_output reads.
  int32_t attn_out_dim() const { return mla.is_mla() ? n_head * mla.v_head_dim : q_dim(); }
};

// Reads and validates hyper-parameters; errors name the file and key.
Result<ModelHParams> hparams_from_gguf(const GgufFile& file);
// Calls of hparams_from_gguf in this process so far: start-up reads a file's hyper-parameters
// once and passes them along (the serve start-up test counts them).
uint64_t hparams_reads();

}  // namespace kvw
