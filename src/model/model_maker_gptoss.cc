#include "model/model_maker_gptoss.h"

#include <cmath>
#include <string>

namespace kvw::maker {

// The shape of gpt-oss's own template (its messages in the harmony format, an assistant's
// final answer on the "final" channel, the generation prompt opening an assistant message)
// without its tool and reasoning branches.
const char* const kHarmonyTemplate =
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|start|>assistant<|channel|>final<|message|>' + message['content'] + '<|end|>' -}}"
    "{%- else -%}"
    "{{- '<|start|>' + message['role'] + '<|message|>' + message['content'] + '<|end|>' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%}";

MakeModelSpec gptoss_tiny() {
  MakeModelSpec s;
  s.arch = "gpt-oss";
  s.name = "gpt-oss-tiny-random";
  s.n_embd = 128;
  s.n_layer = 4;
  s.n_head = 8;
  s.n_head_kv = 2;
  s.head_dim = 32;
  s.n_ff = 64;
  s.n_expert = 16;
  s.n_expert_used = 4;
  s.n_ff_exp = 64;
  s.n_ctx = 2048;
  s.sliding_window = 16;
  s.norm_eps = 1e-5f;
  s.rope_theta = 150000.0f;
  s.rope_scaling = RopeScaling::kYarn;
  s.rope_scale = 32.0f;
  s.rope_orig_ctx = 64;
  s.vocab_type = "bpe";
  s.expert_type = GgmlType::kMXFP4;
  return s;
}

Status validate_gptoss(const MakeModelSpec& s) {
  if (s.n_embd <= 0 || s.n_layer <= 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.n_ctx <= 0)
    return Error{"--dim, --layers, --heads, --kv-heads and --context must be > 0"};
  if (s.head_dim < 0 || s.head_len() % 2 != 0)
    return Error{"head dimension (--head-dim or --dim / --heads) must be even and > 0"};
  if (s.head_dim == 0 && s.n_embd % s.n_head != 0)
    return Error{"--dim must be a multiple of --heads"};
  if (s.n_head % s.n_head_kv != 0) return Error{"--heads must be a multiple of --kv-heads"};
  if (s.n_expert <= 0)
    return Error{"--experts must be > 0 for --arch gpt-oss (every layer is MoE)"};
  if (s.n_expert_used < 1 || s.n_expert_used > s.n_expert)
    return Error{"--experts-used must be between 1 and --experts"};
  if (s.n_ff_exp <= 0) return Error{"--expert-ffn must be > 0 for --arch gpt-oss"};
  if (s.sliding_window <= 0) return Error{"--sliding-window must be > 0 for --arch gpt-oss"};
  if (s.tied) return Error{"--tied: gpt-oss files always carry output.weight"};
  if (s.n_ff_shexp != 0 || s.n_expert_shared != 0 || s.kv_lora_rank != 0 || s.probs_bias)
    return Error{"--shared-expert-ffn, --experts-shared, MLA and --probs-bias: not gpt-oss"};
  if (s.weight_type == GgmlType::kQ8_K || s.expert_type == GgmlType::kQ8_K)
    return Error{"--weight-type / --expert-type q8_K is not a weight type"};
  const int64_t blk = type_traits(s.weight_type).block_elems;
  if (s.n_embd % blk != 0 || ((int64_t)s.n_head * s.head_len()) % blk != 0)
    return Error{"--dim and --heads x head dimension must be multiples of " + std::to_string(blk) +
                 " for --weight-type"};
  const int64_t eblk = type_traits(s.expert_type).block_elems;
  if (s.n_embd % eblk != 0 || s.n_ff_exp % eblk != 0)
    return Error{"--dim and --expert-ffn must be multiples of " + std::to_string(eblk) +
                 " for --expert-type"};
  if (s.rope_scaling != RopeScaling::kNone && s.rope_scale <= 0)
    return Error{"--rope-scale must be > 0"};
  return {};
}

// As convert_hf_to_gguf.py's GptOssModel: the common keys with head_dim as key and value length
// (no rope.dimension_count), YaRN's three keys, the window and the experts' width.
void set_gptoss_keys(const MakeModelSpec& s, GgufWriter& w) {
  const std::string a = "gpt-oss.";
  w.set_u32(a + "context_length", s.n_ctx);
  w.set_u32(a + "embedding_length", s.n_embd);
  w.set_u32(a + "block_count", s.n_layer);
  w.set_u32(a + "feed_forward_length", s.n_ff_exp);
  w.set_u32(a + "attention.head_count", s.n_head);
  w.set_u32(a + "attention.head_count_kv", s.n_head_kv);
  w.set_f32(a + "rope.freq_base", s.rope_theta);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", s.norm_eps);
  w.set_u32(a + "expert_count", s.n_expert);
  w.set_u32(a + "expert_used_count", s.n_expert_used);
  w.set_u32(a + "attention.key_length", s.head_len());
  w.set_u32(a + "attention.value_length", s.head_len());
  if (s.rope_scaling != RopeScaling::kNone) {
    w.set_string(a + "rope.scaling.type", rope_scaling_name(s.rope_scaling));
    w.set_f32(a + "rope.scaling.factor", s.rope_scale);
    w.set_u32(a + "rope.scaling.original_context_length",
              s.rope_orig_ctx > 0 ? s.rope_orig_ctx : s.n_ctx);
  }
  w.set_u32(a + "attention.sliding_window", s.sliding_window);
  w.set_u32(a + "expert_feed_forward_length", s.n_ff_exp);
}

// Scales are chosen so that each gpt-oss feature is exercised: sinks of order one against
// scores of order one, expert pre-activations of std ~3 so the SwiGLU's clamp at 7 engages,
// biases of std 0.5, and router logits of std ~3 (rarely a near-tie in the top-k).
void write_gptoss_tensors(const MakeModelSpec& s, int64_t n_vocab, TensorMaker& tm) {
  const int64_t d = s.n_embd, hd = s.head_len(), q = s.n_head * hd, kv = s.n_head_kv * hd;
  const int64_t ne = s.n_expert, fe = s.n_ff_exp;
  const GgmlType t = s.weight_type;
  const float in_std = 1.0f / std::sqrt((float)d);
  tm.matrix("token_embd.weight", d, n_vocab, t, 1.0f);
  for (int32_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    tm.vector(p + "attn_norm.weight", d, 1.0f, 0.1f);
    tm.matrix(p + "attn_q.weight", d, q, t);
    tm.vector(p + "attn_q.bias", q, 0.0f, 0.1f);
    tm.matrix(p + "attn_k.weight", d, kv, t);
    tm.vector(p + "attn_k.bias", kv, 0.0f, 0.1f);
    tm.matrix(p + "attn_v.weight", d, kv, t);
    tm.vector(p + "attn_v.bias", kv, 0.0f, 0.1f);
    tm.matrix(p + "attn_output.weight", q, d, t);
    tm.vector(p + "attn_output.bias", d, 0.0f, 0.5f);
    tm.vector(p + "attn_sinks.weight", s.n_head, 0.0f, 1.5f);
    tm.vector(p + "post_attention_norm.weight", d, 1.0f, 0.1f);
    tm.matrix(p + "ffn_gate_inp.weight", d, ne, GgmlType::kF32, 3.0f * in_std);
    tm.vector(p + "ffn_gate_inp.bias", ne, 0.0f, 0.5f);
    tm.put(p + "ffn_gate_exps.weight", s.expert_type, {d, fe, ne},
           tm.draw(d * fe * ne, 3 * in_std));
    tm.put(p + "ffn_gate_exps.bias", GgmlType::kF32, {fe, ne}, tm.draw(fe * ne, 0.5f));
    tm.put(p + "ffn_up_exps.weight", s.expert_type, {d, fe, ne}, tm.draw(d * fe * ne, 3 * in_std));
    tm.put(p + "ffn_up_exps.bias", GgmlType::kF32, {fe, ne}, tm.draw(fe * ne, 0.5f));
    tm.put(p + "ffn_down_exps.weight", s.expert_type, {fe, d, ne},
           tm.draw(fe * d * ne, 0.3f / std::sqrt((float)fe)));
    tm.put(p + "ffn_down_exps.bias", GgmlType::kF32, {d, ne}, tm.draw(d * ne, 0.5f));
  }
  tm.vector("output_norm.weight", d, 1.0f, 0.1f);
  tm.matrix("output.weight", d, n_vocab, t);
}

}  // namespace kvw::maker
