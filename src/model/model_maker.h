// model/model_maker.h: writes GGUF models with seeded random weights in the real layouts of
// every registered family (model/families: each family's MakerRules gives its presets, flags,
// checks, keys and tokenizer; its tensor declaration the tensors), with a tokenizer built from
// a word list. Used by `kvwarden make-model`, tests and benchmarks; the files are ordinary GGUF
// files that any GGUF reader accepts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/tensor_types.h"
#include "model/hparams.h"

namespace kvw {

class GgufWriter;

// deepseek2's K/V up-projection as stored: one attn_kv_b (older converters) or attn_k_b +
// attn_v_b per layer (newer converters, which also switch the head-length keys; see hparams.h).
enum class MlaLayout { kKvB, kSplit };

const char* mla_layout_name(MlaLayout layout);                      // "kv_b", "split"
Result<MlaLayout> parse_mla_layout(const std::string& name);        // error names --mla-layout
Result<ExpertGating> parse_expert_gating(const std::string& name);  // softmax|sigmoid, --gating

struct MakeModelSpec {
  std::string arch = "llama";  // a registered family's GGUF architecture (model/families)
  std::string name = "kvwarden-random";
  int32_t n_embd = 64;
  int32_t n_layer = 2;
  int32_t n_head = 4;
  int32_t n_head_kv = 2;
  int32_t head_dim = 0;  // qwen3(moe), gemma2/3: key_length = value_length (0: n_embd / n_head)
  int32_t n_ff = 256;    // dense FFN width; llama: each expert's width when n_expert > 0
  int32_t n_expert = 0;  // llama: > 0 writes Mixtral-style ffn_*_exps layers
  int32_t n_expert_used = 0;  // experts per token (top-k)
  int32_t n_vocab = 0;        // pad the tokenizer to this size (0: as built)
  int32_t n_ctx = 512;
  int32_t sliding_window = 0;  // 0: full attention
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling = RopeScaling::kNone;
  float rope_scale = 1.0f;
  int32_t rope_orig_ctx = 0;              // YaRN: original context (0: n_ctx)
  GgmlType weight_type = GgmlType::kF32;  // every matrix; norms and biases stay f32
  bool tied = false;                      // no output.weight: logits reuse token_embd
  std::string vocab_type = "spm";         // "spm" (tokenizer.ggml.model llama) or "bpe" (gpt2)
  // Appended to the vocabulary as control tokens (after any padding to n_vocab), as a GGUF whose
  // converter marked added tokens special: e.g. <tool_call> </tool_call> for a Hermes/Qwen file.
  std::vector<std::string> extra_control_tokens = {};
  uint64_t seed = 1;
  uint32_t gguf_version = 3;

  // qwen2moe: every layer is n_expert routed experts of n_ff_exp (below) plus one shared expert
  // of n_ff_shexp, scaled per token by sigmoid(ffn_gate_inp_shexp . x). n_ff is only written as
  // feed_forward_length (Qwen1.5-MoE's converter writes intermediate_size there). Other
  // architectures refuse n_ff_shexp != 0.
  int32_t n_ff_shexp = 0;

  // deepseek2 only (other architectures refuse non-default values; qwen2moe also takes
  // n_ff_exp). Head lengths come from these, not from n_embd / n_head; n_head_kv is not used:
  // head_count_kv is written as the converters write it (head_count with attn_kv_b, 1 with
  // attn_k_b / attn_v_b). Layers below n_layer_dense_lead keep a dense FFN of n_ff; the others
  // are n_expert routed experts of n_ff_exp plus n_expert_shared always-on ones (n_expert 0:
  // every layer dense).
  int32_t q_lora_rank = 0;  // 0: queries from a plain attn_q (V2-Lite)
  int32_t kv_lora_rank = 0;
  int32_t qk_rope_dim = 0;  // rotated part of each query/key head (rope.dimension_count)
  int32_t qk_nope_dim = 0;  // unrotated part
  int32_t v_head_dim = 0;
  MlaLayout mla_layout = MlaLayout::kKvB;
  int32_t n_expert_shared = 0;
  int32_t n_ff_exp = 0;  // each routed expert's width (deepseek2, qwen2moe and qwen3moe)
  int32_t n_layer_dense_lead = 0;
  ExpertGating gating = ExpertGating::kSoftmax;
  int32_t n_group = 0;  // > 1: top-k limited to the n_group_used best groups of experts
  int32_t n_group_used = 0;
  float expert_weights_scale = 1.0f;
  bool expert_weights_norm = false;
  bool probs_bias = false;           // exp_probs_b.bias: a selection-only bias (DeepSeek-V3)
  float yarn_log_multiplier = 0.0f;  // rope.scaling.yarn_log_multiplier (with yarn)

  // gemma2 / gemma3 only (others refuse non-default values). Written as the converter writes
  // them: gemma2 always carries both soft-capping keys and the window; gemma3 the final cap only
  // when > 0, the window only when > 0, and rope.freq_base_swa when rope_theta_swa > 0.
  float attn_softcap = 0.0f;    // gemma2: attn_logit_softcapping (> 0)
  float final_softcap = 0.0f;   // final_logit_softcapping (gemma2: > 0; gemma3: 0 = absent)
  float rope_theta_swa = 0.0f;  // rope.freq_base_swa; 0 = absent
  int32_t swa_period = 0;       // attention.sliding_window_pattern; 0 = absent (2 / 6)

  // phi3 only (fused attn_qkv and gate+up ffn_up, NEOX rope, sliding_window always written).
  // n_rot: rotated dims per head (0: the whole head; Phi-4-mini rotates 3/4). longrope: write
  // rope_factors_long / _short and rope.scaling.attn_factor as convert_hf_to_gguf.py computes it
  // from --context over --rope-orig-ctx (rope.scaling.original_context_length, always written).
  int32_t n_rot = 0;
  bool longrope = false;

  // gpt-oss only: the type of its stacked expert matrices (MXFP4 in the released files, which
  // keep the other matrices in a float or 8-bit type: weight_type). Also uses n_ff_exp (each
  // expert's width), sliding_window (even layers; required > 0) and swa_period.
  GgmlType expert_type = GgmlType::kMXFP4;

  Status validate() const;  // messages name the make-model flag
  int32_t head_len() const { return head_dim > 0 ? head_dim : n_embd / n_head; }
};

// A named shape from a family's presets (model/families: MakerRules::presets; "tiny" is the
// default spec above); an unknown name is refused listing every preset.
Result<MakeModelSpec> make_model_preset(const std::string& name);
// "tiny, tinyllama-1.1b, ...": every preset, in family order, for help and error messages.
std::string make_model_preset_names();

Status make_model(const MakeModelSpec& spec, const std::string& path);

// For the families' make-model rules (model/families: MakerRules).
// The rope.scaling.* keys of a spec with --rope-scaling (type, factor, original context);
// `prefix` is "<arch>.".
void write_rope_scaling_keys(const MakeModelSpec& s, const std::string& prefix, GgufWriter& w);
// Attention and FFN shapes of the llama-style layers (sizes > 0, head length even and dividing
// as stored, whole quant blocks); messages name the flag.
Status validate_llama_shape(const MakeModelSpec& s);
// ChatML (Qwen's and a common choice for small chat models).
inline constexpr char kChatMlTemplate[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

}  // namespace kvw
