// model/families/gpt_oss.cc: OpenAI's gpt-oss ("gpt-oss").
#include "gguf/gguf_file.h"
#include "model/families/family.h"

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

}  // namespace

// Listed in families.cc.
extern const ModelFamily kGptOss;

// gpt-oss names its FFN input norm post_attention_norm (llama.cpp's attn_post_norm).
const ModelFamily kGptOss{.arch = "gpt-oss",
                          .rope_style = RopeStyle::kNeox,
                          .ffn_norm = "post_attention_norm",
                          .read_keys = read_gptoss};

}  // namespace kvw::families
