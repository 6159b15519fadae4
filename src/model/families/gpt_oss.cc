// model/families/gpt_oss.cc: OpenAI's gpt-oss ("gpt-oss").
#include <cmath>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/families/family.h"
#include "model/families/tensor_table.h"
#include "model/model_maker.h"

namespace kvw::families {
namespace {

// gpt-oss (llama.cpp's openai-moe loader and graph): NEOX rope (YaRN in the released files),
// a sliding window on even layers (attention.sliding_window required, period 2 unless
// sliding_window_pattern says otherwise; windowed layers rotate with rope.freq_base_swa when
// present, scaled as the global ones), learned attention sinks, an attn_output bias, and every
// layer routed: router logits plus bias, top-k, softmax over the chosen k (not renormalised),
// experts with biases and the clamped SwiGLU. Scores scaled by 1/sqrt(head_dim).
Status read_gptoss(const GgufFile& f, const std::string& a, ModelHParams& hp) {
  MoeParams& moe = hp.moe;
  if (!moe.is_moe()) {
    return Error{f.path() + ": key '" + a + "expert_count': gpt-oss needs > 0, found 0"};
  }
  KVW_RETURN_IF_ERROR(read_int(f, a + "expert_feed_forward_length", moe.n_ff_exp, true));
  moe.gating = ExpertGating::kSoftmaxWeight;
  moe.norm_weights = false;
  moe.router_bias = true;
  moe.expert_bias = true;
  hp.ffn_act = FfnAct::kSwigluOai;
  hp.attn_sinks = true;
  hp.attn_out_bias = true;
  KVW_RETURN_IF_ERROR(read_int(f, a + "attention.sliding_window", hp.sliding_window, true));
  if (hp.sliding_window <= 0) {
    return Error{f.path() + ": key '" + a + "attention.sliding_window': expected > 0, found 0"};
  }
  hp.swa_period = 2;
  KVW_RETURN_IF_ERROR(read_int(f, a + "attention.sliding_window_pattern", hp.swa_period, false));
  if (f.find(a + "rope.freq_base_swa") != nullptr) {
    hp.rope_swa = hp.rope;
    KVW_RETURN_IF_ERROR(read_float(f, a + "rope.freq_base_swa", hp.rope_swa.freq_base));
    hp.has_rope_swa = true;
  }
  return {};
}

// Every layer: biased Q/K/V/O, sinks, experts with biases in --expert-type. make-model's scales
// exercise each feature: sinks of order one against scores of order one, expert
// pre-activations of std ~3 so the SwiGLU's clamp at 7 engages, biases of std 0.5, and router
// logits of std ~3 (rarely a near-tie in the top-k).
void declare_gptoss(const ModelHParams& hp, TensorTable& t) {
  const int64_t d = hp.n_embd, q = hp.q_dim(), kv = hp.kv_dim();
  const int64_t ne = hp.moe.n_expert, fe = hp.moe.n_ff_exp;
  const float in_std = 1.0f / std::sqrt((float)d);
  declare_rope_factors(hp, t);
  declare_embedding(hp, t);
  for (int32_t l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    t.vector(p + "attn_norm.weight", d, 1.0f, 0.1f);
    t.matrix(p + "attn_q.weight", d, q);
    t.vector(p + "attn_q.bias", q, 0.0f, 0.1f);
    t.matrix(p + "attn_k.weight", d, kv);
    t.vector(p + "attn_k.bias", kv, 0.0f, 0.1f);
    t.matrix(p + "attn_v.weight", d, kv);
    t.vector(p + "attn_v.bias", kv, 0.0f, 0.1f);
    t.matrix(p + "attn_output.weight", q, d);
    t.vector(p + "attn_output.bias", d, 0.0f, 0.5f);
    t.vector(p + "attn_sinks.weight", hp.n_head, 0.0f, 1.5f);
    t.vector(p + "post_attention_norm.weight", d, 1.0f, 0.1f);  // the FFN's input norm
    t.matrix(p + "ffn_gate_inp.weight", d, ne, 3.0f * in_std).store = TensorStore::kF32;
    t.vector(p + "ffn_gate_inp.bias", ne, 0.0f, 0.5f);
    t.vector(p + "exp_probs_b.bias", ne, 0.0f, 0.1f).optional = true;
    t.experts(p + "ffn_gate_exps.weight", d, fe, ne, 3 * in_std).store = TensorStore::kExpertType;
    t.rows(p + "ffn_gate_exps.bias", fe, ne, 0.5f);
    t.experts(p + "ffn_up_exps.weight", d, fe, ne, 3 * in_std).store = TensorStore::kExpertType;
    t.rows(p + "ffn_up_exps.bias", fe, ne, 0.5f);
    t.experts(p + "ffn_down_exps.weight", fe, d, ne, 0.3f / std::sqrt((float)fe)).store =
        TensorStore::kExpertType;
    t.rows(p + "ffn_down_exps.bias", d, ne, 0.5f);
  }
  declare_output(hp, t);
}

// As convert_hf_to_gguf.py's GptOssModel: the common keys with head_dim as key and value length
// (no rope.dimension_count), YaRN's three keys, the window and the experts' width.
void write_gptoss_keys(const MakeModelSpec& s, GgufWriter& w) {
  const std::string a = "gpt-oss.";
  write_size_keys(s, a, s.n_ff_exp, s.n_head_kv, w);
  w.set_f32(a + "rope.freq_base", s.rope_theta);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", s.norm_eps);
  w.set_u32(a + "expert_count", s.n_expert);
  w.set_u32(a + "expert_used_count", s.n_expert_used);
  w.set_u32(a + "attention.key_length", s.head_len());
  w.set_u32(a + "attention.value_length", s.head_len());
  write_rope_scaling_keys(s, a, w);
  w.set_u32(a + "attention.sliding_window", s.sliding_window);
  w.set_u32(a + "expert_feed_forward_length", s.n_ff_exp);
}

// Every layer MoE with biased experts in --expert-type, always windowed, never tied.
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
  if (s.n_ff_exp <= 0) return Error{"--expert-ffn must be > 0 for --arch gpt-oss"};
  if (s.sliding_window <= 0) return Error{"--sliding-window must be > 0 for --arch gpt-oss"};
  if (s.tied) return Error{"--tied: gpt-oss files always carry output.weight"};
  if (s.expert_type == GgmlType::kQ8_K) return Error{"--expert-type q8_K is not a weight type"};
  const int64_t blk = type_traits(s.weight_type).block_elems;
  if (s.n_embd % blk != 0 || ((int64_t)s.n_head * s.head_len()) % blk != 0)
    return Error{"--dim and --heads x head dimension must be multiples of " + std::to_string(blk) +
                 " for --weight-type"};
  const int64_t eblk = type_traits(s.expert_type).block_elems;
  if (s.n_embd % eblk != 0 || s.n_ff_exp % eblk != 0)
    return Error{"--dim and --expert-ffn must be multiples of " + std::to_string(eblk) +
                 " for --expert-type"};
  return {};
}

// gpt-oss-20b's structure at dim 128: heads of 32 so q is twice n_embd wide, GQA 4:1, even
// layers windowed (16), sinks, biases, 16 MXFP4 experts of 64 top-4, YaRN x32, o200k-style BPE.
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

constexpr MakerPreset kPresets[] = {{"gpt-oss-tiny", gptoss_tiny}};

}  // namespace

// The shape of gpt-oss's own template (its messages in the harmony format, an assistant's
// final answer on the "final" channel, the generation prompt opening an assistant message)
// without its tool and reasoning branches: make-model's chat template for gpt-oss.
constexpr char kHarmonyTemplate[] =
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|start|>assistant<|channel|>final<|message|>' + message['content'] + '<|end|>' -}}"
    "{%- else -%}"
    "{{- '<|start|>' + message['role'] + '<|message|>' + message['content'] + '<|end|>' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%}";

// gpt-oss names its FFN input norm post_attention_norm (llama.cpp's attn_post_norm).
const ModelFamily kGptOss{
    .arch = "gpt-oss",
    .rope_style = RopeStyle::kNeox,
    .ffn_norm = "post_attention_norm",
    .qkv_bias = true,
    .hf = {.model_types = {"gpt_oss"}, .windows = HfWindows::kEveryOther},
    .read_keys = read_gptoss,
    .declare_tensors = declare_gptoss,
    .maker = {.presets = kPresets,
              .flags = kMakeHeadDim | kMakeExperts | kMakeExpertFfn | kMakeWindow | kMakeExpertType,
              .validate = validate_gptoss,
              .write_keys = write_gptoss_keys,
              .bpe_pre = "gpt-4o",  // o200k's
              .chat_template = kHarmonyTemplate}};

// This file's families, in the order the registry lists them (families.cc).
std::span<const ModelFamily* const> gpt_oss_families() {
  static constexpr const ModelFamily* kThisFile[] = {&kGptOss};
  return kThisFile;
}

}  // namespace kvw::families
