#include "model/model_maker.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "gguf/gguf_writer.h"
#include "model/families/family.h"
#include "model/families/tensor_table.h"
#include "model/model_maker_gptoss.h"
#include "model/model_maker_tensors.h"
#include "model/model_maker_validate.h"
#include "tokenizer/tokenizer.h"

namespace kvw {
namespace {

using namespace maker;  // the per-family checks (model_maker_validate.h)

// Common English words: text built from them tokenises into whole-word pieces.
const char* const kWords[] = {
    "the",     "a",       "an",      "and",   "or",      "but",    "if",     "then",   "so",
    "because", "of",      "to",      "in",    "on",      "at",     "by",     "for",    "with",
    "from",    "up",      "down",    "out",   "over",    "under",  "again",  "once",   "upon",
    "time",    "there",   "was",     "were",  "is",      "are",    "be",     "been",   "has",
    "had",     "have",    "do",      "did",   "does",    "say",    "said",   "go",     "went",
    "come",    "came",    "see",     "saw",   "look",    "looked", "want",   "wanted", "like",
    "liked",   "love",    "loved",   "play",  "played",  "run",    "ran",    "walk",   "walked",
    "find",    "found",   "give",    "gave",  "take",    "took",   "make",   "made",   "know",
    "knew",    "think",   "thought", "feel",  "felt",    "happy",  "sad",    "big",    "small",
    "little",  "good",    "bad",     "new",   "old",     "red",    "blue",   "green",  "sun",
    "moon",    "sky",     "tree",    "park",  "house",   "home",   "dog",    "cat",    "bird",
    "fish",    "ball",    "toy",     "car",   "boat",    "girl",   "boy",    "mom",    "dad",
    "friend",  "friends", "day",     "night", "morning", "water",  "food",   "cake",   "box",
    "door",    "he",      "she",     "it",    "they",    "we",     "you",    "i",      "his",
    "her",     "their",   "our",     "your",  "my",      "this",   "that",   "these",  "those",
    "what",    "who",     "where",   "when",  "why",     "how",    "not",    "no",     "yes",
    "very",    "too",     "also",    "all",   "some",    "many",   "one",    "two",    "three",
    "first",   "last",    "memory",  "cache", "block",   "token",  "server", "model",  "request",
    "budget",  "never",   "fast",    "slow",  "hello",   "world",  "story",  "name",   "named",
    "lily",    "tom",     "ben",     "sam",
};

// ChatML: used by Qwen2 and a common choice for small chat models.
const char* const kChatMlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

// The keys convert_hf_to_gguf.py's Gemma2Model / Gemma3Model add to the common ones: key and
// value length, no rope.dimension_count; gemma2 no rope.freq_base (10000 is the default) but
// both soft-capping keys and the window; gemma3 the final cap, window and local base if any.
void set_gemma_keys(const MakeModelSpec& s, const std::string& a, GgufWriter& w) {
  w.set_u32(a + "attention.key_length", s.head_len());
  w.set_u32(a + "attention.value_length", s.head_len());
  if (s.arch == "gemma2") {
    w.set_f32(a + "attn_logit_softcapping", s.attn_softcap);
  } else {
    w.set_f32(a + "rope.freq_base", s.rope_theta);
    if (s.rope_theta_swa > 0) w.set_f32(a + "rope.freq_base_swa", s.rope_theta_swa);
  }
  if (s.final_softcap > 0) w.set_f32(a + "final_logit_softcapping", s.final_softcap);
  if (s.sliding_window > 0) w.set_u32(a + "attention.sliding_window", s.sliding_window);
  if (s.swa_period > 0) w.set_u32(a + "attention.sliding_window_pattern", s.swa_period);
}

void set_llama_keys(const MakeModelSpec& s, GgufWriter& w) {
  const std::string a = s.arch + ".";
  write_size_keys(s, a, s.n_ff, s.n_head_kv, w);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", s.norm_eps);
  if (is_gemma(s)) {
    set_gemma_keys(s, a, w);
    write_rope_scaling_keys(s, a, w);
    return;
  }
  w.set_f32(a + "rope.freq_base", s.rope_theta);
  if (s.arch == "qwen3" || s.arch == "qwen3moe") {
    // As convert_hf_to_gguf.py: config.json's head_dim as key and value length, and no
    // rope.dimension_count (readers rotate the whole key_length head).
    w.set_u32(a + "attention.key_length", s.head_len());
    w.set_u32(a + "attention.value_length", s.head_len());
  } else {
    w.set_u32(a + "rope.dimension_count", s.head_len());
  }
  if (s.sliding_window > 0) w.set_u32(a + "attention.sliding_window", s.sliding_window);
  if (s.n_expert > 0) {
    w.set_u32(a + "expert_count", s.n_expert);
    w.set_u32(a + "expert_used_count", s.n_expert_used);
  }
  if (s.arch == "qwen2moe") {  // as convert_hf_to_gguf.py's Qwen2MoeModel writes them
    w.set_u32(a + "expert_feed_forward_length", s.n_ff_exp);
    w.set_u32(a + "expert_shared_feed_forward_length", s.n_ff_shexp);
  }
  if (s.arch == "qwen3moe") w.set_u32(a + "expert_feed_forward_length", s.n_ff_exp);
  write_rope_scaling_keys(s, a, w);
}

// The hyper-parameters a reader finds in the file make_model writes for `s`: the keys the
// set_*_keys functions write and the tensors the spec's switches add. The family's tensor
// declaration is made from them, as the loader makes it from the file's (the family test
// checks the two agree for every family).
ModelHParams spec_hparams(const MakeModelSpec& s, int64_t n_vocab) {
  const ModelFamily& family = *find_family(s.arch);
  ModelHParams hp;
  hp.arch = s.arch;
  hp.n_vocab = (int32_t)n_vocab;
  hp.n_embd = s.n_embd;
  hp.n_layer = s.n_layer;
  hp.n_head = s.n_head;
  hp.n_head_kv = s.n_head_kv;
  hp.head_dim = s.head_len();
  hp.n_ff = s.n_ff;
  hp.tied_embeddings = s.tied;
  hp.qkv_bias = family.qkv_bias;
  hp.qkv_fused = family.qkv_fused;
  hp.qk_norm = family.qk_norm;
  hp.gate_up_fused = family.gate_up_fused;
  hp.gemma.post_norms = family.post_norms;
  hp.gemma.scale_embd = is_gemma(s);
  hp.rope.n_rot = s.n_rot > 0 ? s.n_rot : s.head_len();
  hp.longrope = s.longrope;
  MoeParams& moe = hp.moe;
  moe.n_expert = s.n_expert;
  moe.n_expert_used = s.n_expert_used;
  moe.n_ff_exp = s.n_ff_exp > 0 ? s.n_ff_exp : s.n_ff;  // llama's experts: feed_forward_length
  moe.n_ff_shared = s.n_ff_shexp > 0 ? s.n_ff_shexp : s.n_ff_exp * s.n_expert_shared;
  moe.n_layer_dense_lead = s.n_layer_dense_lead;
  moe.probs_bias = s.probs_bias;
  if (s.kv_lora_rank > 0) {
    MlaParams& mla = hp.mla;
    mla.q_lora_rank = s.q_lora_rank;
    mla.kv_lora_rank = s.kv_lora_rank;
    mla.qk_rope_dim = s.qk_rope_dim;
    mla.qk_nope_dim = s.qk_nope_dim;
    mla.v_head_dim = s.v_head_dim;
    mla.split_kv_b = s.mla_layout == MlaLayout::kSplit;
    hp.head_dim = s.qk_nope_dim + s.qk_rope_dim;
    hp.rope.n_rot = s.qk_rope_dim;
  }
  return hp;
}

// Writes every required entry of the family's declaration, in order, drawn as it says.
void write_declared(const TensorTable& table, const MakeModelSpec& s, TensorMaker& tm) {
  const std::vector<TensorDecl>& entries = table.entries();
  std::vector<float> v_b;  // the second part of a split attn_kv_b draw
  for (size_t i = 0; i < entries.size(); ++i) {
    const TensorDecl& d = entries[i];
    if (d.optional) continue;
    const GgmlType type = d.store == TensorStore::kF32          ? GgmlType::kF32
                          : d.store == TensorStore::kExpertType ? s.expert_type
                                                                : s.weight_type;
    int64_t n = 1;
    for (int64_t x : d.shape) n *= x;
    const float std = d.std != 0 ? d.std : 1.0f / std::sqrt((float)d.shape[0]);
    switch (d.fill) {
      case TensorFill::kUniform:
        tm.put(d.name, type, d.shape, tm.draw(n, std, d.center));
        break;
      case TensorFill::kLongRopeLong: {
        std::vector<float> v = tm.draw(n, std, d.center);
        for (int64_t k = 0; k < n; ++k) {
          const float x = (float)k / (float)n;
          v[k] += 20.0f * x * x;
        }
        tm.put(d.name, type, d.shape, v);
        break;
      }
      case TensorFill::kMlaKvBSplit: {
        // One attn_kv_b draw (per head h: nope rows of W_kb[h], then vd rows of W_vb[h], each r
        // long): k_b = W_kb[h]^T ({nope, r, nh}), v_b = W_vb[h] ({r, vd, nh}).
        CHECK(i + 1 < entries.size() && entries[i + 1].fill == TensorFill::kMlaKvBSecond);
        const int64_t nope = d.shape[0], r = d.shape[1], nh = d.shape[2];
        const int64_t vd = entries[i + 1].shape[1];
        const std::vector<float> kv_b = tm.draw(nh * (nope + vd) * r, std);
        std::vector<float> k_b(nh * r * nope);
        v_b.assign(nh * vd * r, 0.0f);
        for (int64_t h = 0; h < nh; ++h) {
          const float* head = kv_b.data() + h * (nope + vd) * r;
          for (int64_t a = 0; a < nope; ++a)
            for (int64_t j = 0; j < r; ++j) k_b[(h * r + j) * nope + a] = head[a * r + j];
          std::copy(head + nope * r, head + (nope + vd) * r, v_b.begin() + h * vd * r);
        }
        tm.put(d.name, type, d.shape, k_b);
        break;
      }
      case TensorFill::kMlaKvBSecond:
        tm.put(d.name, type, d.shape, v_b);
        break;
    }
  }
}

}  // namespace

void write_rope_scaling_keys(const MakeModelSpec& s, const std::string& a, GgufWriter& w) {
  if (s.rope_scaling == RopeScaling::kNone) return;
  w.set_string(a + "rope.scaling.type", rope_scaling_name(s.rope_scaling));
  w.set_f32(a + "rope.scaling.factor", s.rope_scale);
  w.set_u32(a + "rope.scaling.original_context_length",
            s.rope_orig_ctx > 0 ? s.rope_orig_ctx : s.n_ctx);
}

const char* mla_layout_name(MlaLayout layout) {
  return layout == MlaLayout::kSplit ? "split" : "kv_b";
}

Result<MlaLayout> parse_mla_layout(const std::string& name) {
  if (name == "kv_b") return MlaLayout::kKvB;
  if (name == "split") return MlaLayout::kSplit;
  return Error{"--mla-layout must be kv_b or split, not '" + name + "'"};
}

Result<ExpertGating> parse_expert_gating(const std::string& name) {
  if (name == "softmax") return ExpertGating::kSoftmax;
  if (name == "sigmoid") return ExpertGating::kSigmoid;
  return Error{"--gating must be softmax or sigmoid, not '" + name + "'"};
}

Status MakeModelSpec::validate() const {
  // The families the reader knows (model/families), no others.
  if (find_family(arch) == nullptr) return Error{"--arch must be one of " + supported_families()};
  if (arch != "phi3" && (n_rot != 0 || longrope))
    return Error{"--rope-dim and --longrope need --arch phi3"};
  if (arch != "gpt-oss" && expert_type != GgmlType::kMXFP4)
    return Error{"--expert-type needs --arch gpt-oss"};
  for (const std::string& t : extra_control_tokens) {
    if (t.empty()) return Error{"--control-tokens: a token must not be empty"};
  }
  if (!is_gemma(*this) &&
      (attn_softcap != 0 || final_softcap != 0 || rope_theta_swa != 0 || swa_period != 0)) {
    return Error{
        "--attn-softcap, --final-softcap, --rope-theta-swa and --swa-period need --arch gemma2 "
        "or gemma3"};
  }
  if (arch == "phi3") return validate_phi3(*this);
  if (arch == "gpt-oss") return validate_gptoss(*this);
  if (vocab_type != "spm" && vocab_type != "bpe") return Error{"--vocab-type must be spm or bpe"};
  if (weight_type == GgmlType::kQ8_K) return Error{"--weight-type q8_K is not a weight type"};
  if (rope_scaling != RopeScaling::kNone && rope_scale <= 0)
    return Error{"--rope-scale must be > 0"};
  if (gguf_version != 2 && gguf_version != 3) return Error{"--gguf-version must be 2 or 3"};
  if (arch == "deepseek2") {
    if (head_dim != 0) return Error{"--head-dim needs --arch qwen3 (deepseek2: --qk-nope-dim)"};
    return validate_deepseek2(*this);
  }
  if (arch == "qwen2moe") return validate_qwen2moe(*this);
  if (arch == "qwen3moe") return validate_qwen3moe(*this);
  if (is_gemma(*this)) return validate_gemma(*this);
  KVW_RETURN_IF_ERROR(refuse_deepseek2_flags(*this));
  if (n_ff_shexp != 0) return Error{"--shared-expert-ffn needs --arch qwen2moe"};
  KVW_RETURN_IF_ERROR(validate_llama_shape(*this));
  if (n_expert < 0) return Error{"--experts must be >= 0"};
  if (sliding_window != 0 && arch == "qwen3")
    return Error{"--sliding-window needs --arch llama or qwen2"};
  if (n_expert > 0 && arch != "llama")
    return Error{"--experts needs --arch llama, qwen2moe, qwen3moe or deepseek2"};
  if (n_expert > 0 && (n_expert_used < 1 || n_expert_used > n_expert))
    return Error{"--experts-used must be between 1 and --experts"};
  if (n_expert == 0 && n_expert_used != 0) return Error{"--experts-used needs --experts"};
  return {};
}

namespace {

// DeepSeek-V2-Lite's structure at dim 128 ("deepseek-v2-lite-tiny"), or DeepSeek-V3's
// ("deepseek-v3-tiny": q compression, sigmoid routing in groups with a selection bias,
// renormalised and scaled weights, YaRN, the split attn_k_b / attn_v_b layout).
MakeModelSpec deepseek_tiny(bool v3) {
  MakeModelSpec s;
  s.arch = "deepseek2";
  s.name = v3 ? "deepseek-v3-tiny-random" : "deepseek-v2-lite-tiny-random";
  s.n_embd = 128;
  s.n_layer = 3;
  s.n_head = 4;
  s.n_head_kv = 4;
  s.n_ff = 256;
  s.norm_eps = 1e-6f;
  s.kv_lora_rank = 64;
  s.qk_rope_dim = 16;
  s.qk_nope_dim = 32;
  s.v_head_dim = 32;
  s.n_expert = 8;
  s.n_expert_used = 2;
  s.n_expert_shared = 2;
  s.n_ff_exp = 64;
  s.n_layer_dense_lead = 1;
  if (!v3) return s;
  s.q_lora_rank = 48;
  s.n_expert_shared = 1;
  s.gating = ExpertGating::kSigmoid;
  s.n_group = 4;
  s.n_group_used = 2;
  s.probs_bias = true;
  s.expert_weights_norm = true;
  s.expert_weights_scale = 2.5f;
  s.mla_layout = MlaLayout::kSplit;
  s.n_ctx = 512;
  s.rope_scaling = RopeScaling::kYarn;
  s.rope_scale = 4.0f;
  s.rope_orig_ctx = 128;
  s.yarn_log_multiplier = 0.1f;
  return s;
}

// Gemma-2-2B's structure ("gemma2-tiny": layers alternating local and global, heads longer than
// dim / heads, GQA 2:1, soft-capping 50 / 30 as its config.json) or Gemma-3-1B's ("gemma3-tiny":
// five local layers then a global one, MQA, Q/K norms, rope bases 1e6 / 1e4, no soft-capping),
// at dim 128 with heads of 64 and a window of 16 so that short tests cross it.
MakeModelSpec gemma_tiny(bool gemma3) {
  MakeModelSpec s;
  s.arch = gemma3 ? "gemma3" : "gemma2";
  s.name = gemma3 ? "gemma3-tiny-random" : "gemma2-tiny-random";
  s.n_embd = 128;
  s.n_layer = gemma3 ? 6 : 4;
  s.n_head = 4;
  s.n_head_kv = gemma3 ? 1 : 2;
  s.head_dim = 64;
  s.n_ff = 256;
  s.norm_eps = 1e-6f;
  s.sliding_window = 16;
  s.tied = true;
  if (gemma3) {
    s.rope_theta = 1000000.0f;
    s.rope_theta_swa = 10000.0f;
  } else {
    s.attn_softcap = 50.0f;
    s.final_softcap = 30.0f;
  }
  return s;
}

// DeepSeek-V2-Lite (config.json of deepseek-ai/DeepSeek-V2-Lite): 15.7B parameters, 2.4B active.
MakeModelSpec deepseek_v2_lite() {
  MakeModelSpec s = deepseek_tiny(false);
  s.name = "deepseek-v2-lite-shaped-random";
  s.n_embd = 2048;
  s.n_layer = 27;
  s.n_head = 16;
  s.n_head_kv = 16;
  s.n_ff = 10944;
  s.kv_lora_rank = 512;
  s.qk_rope_dim = 64;
  s.qk_nope_dim = 128;
  s.v_head_dim = 128;
  s.n_expert = 64;
  s.n_expert_used = 6;
  s.n_expert_shared = 2;
  s.n_ff_exp = 1408;
  s.n_vocab = 102400;
  s.n_ctx = 163840;
  s.rope_scaling = RopeScaling::kYarn;
  s.rope_scale = 40.0f;
  s.rope_orig_ctx = 4096;
  s.yarn_log_multiplier = 0.0707f;  // the converter writes 0.1 * mscale_all_dim (0.707)
  return s;
}

}  // namespace

Result<MakeModelSpec> make_model_preset(const std::string& name) {
  MakeModelSpec s;
  if (name == "tiny") return s;
  if (name == "tinyllama-1.1b") {
    s.name = "tinyllama-1.1b-shaped-random";
    s.n_embd = 2048;
    s.n_layer = 22;
    s.n_head = 32;
    s.n_head_kv = 4;
    s.n_ff = 5632;
    s.n_vocab = 32000;
    s.n_ctx = 2048;
    return s;
  }
  if (name == "mixtral-tiny") {
    s.name = "mixtral-tiny-random";
    s.n_layer = 4;
    s.n_expert = 8;
    s.n_expert_used = 2;
    return s;
  }
  if (name == "mixtral-1b") {
    // Mixtral-8x7B's proportions (GQA 4:1, ffn 3.5 x dim, 8 experts, top-2) at dim 1024:
    // 0.79B parameters, 0.26B active per token.
    s.name = "mixtral-1b-shaped-random";
    s.n_embd = 1024;
    s.n_layer = 8;
    s.n_head = 16;
    s.n_head_kv = 4;
    s.n_ff = 3584;
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_vocab = 32000;
    s.n_ctx = 4096;
    return s;
  }
  if (name == "qwen2moe-tiny") {
    // Qwen1.5-MoE-A2.7B's structure at dim 128: GQA 2:1, q/k/v biases, every layer 8 routed
    // experts of 64 (top-2, softmax probabilities not renormalised) plus a gated shared expert
    // of 256 (= feed_forward_length, as Qwen1.5-MoE's intermediate_size equals its shared
    // expert's width), byte-level BPE with Qwen2's pre-tokenizer and ChatML.
    s.arch = "qwen2moe";
    s.name = "qwen2moe-tiny-random";
    s.n_embd = 128;
    s.n_layer = 2;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_ff = 256;
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_ff_exp = 64;
    s.n_ff_shexp = 256;
    s.norm_eps = 1e-6f;
    s.rope_theta = 1000000.0f;
    s.vocab_type = "bpe";
    return s;
  }
  if (name == "qwen2-tiny") {
    // Qwen2.5-0.5B's structure (GQA, q/k/v biases, tied output, eps 1e-6, theta 1e6, byte-level
    // BPE with Qwen2's pre-tokenizer and ChatML) at dim 128.
    s.arch = "qwen2";
    s.name = "qwen2-tiny-random";
    s.n_embd = 128;
    s.n_layer = 2;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_ff = 256;
    s.norm_eps = 1e-6f;
    s.rope_theta = 1000000.0f;
    s.tied = true;
    s.vocab_type = "bpe";
    return s;
  }
  if (name == "qwen3-tiny") {
    // Qwen3-0.6B's structure (heads of 128 while n_embd / n_head is 64, GQA 2:1, per-head Q/K
    // RMSNorm, no biases, tied output, eps 1e-6, theta 1e6) at dim 128 with heads of 64.
    s.arch = "qwen3";
    s.name = "qwen3-tiny-random";
    s.n_embd = 128;
    s.n_layer = 2;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.head_dim = 64;
    s.n_ff = 384;
    s.norm_eps = 1e-6f;
    s.rope_theta = 1000000.0f;
    s.tied = true;
    s.vocab_type = "bpe";
    return s;
  }
  if (name == "qwen3moe-tiny") {
    // Qwen3-30B-A3B's structure (qwen3 attention, 128 experts top-8 renormalised, no shared
    // expert, untied) at dim 128: 16 experts of 64, top-4, heads of 64.
    s = *make_model_preset("qwen3-tiny");
    s.arch = "qwen3moe";
    s.name = "qwen3moe-tiny-random";
    s.tied = false;
    s.n_expert = 16;
    s.n_expert_used = 4;
    s.n_ff_exp = 64;
    return s;
  }
  if (name == "gemma2-tiny" || name == "gemma3-tiny") return gemma_tiny(name == "gemma3-tiny");
  if (name == "phi3-tiny") {
    // Phi-3.5-mini's structure (MHA, heads of 96 = n_embd / n_head, fused QKV and gate/up,
    // LongRoPE from 4096 of 131072 with sliding_window 262144, untied, SentencePiece) at dim 128:
    // heads of 32, LongRoPE from 256 of 8192 (the same factor 32, attn_factor 1.27), window
    // twice the context.
    s.arch = "phi3";
    s.name = "phi3-tiny-random";
    s.n_embd = 128;
    s.n_layer = 2;
    s.n_head = 4;
    s.n_head_kv = 4;
    s.n_ff = 256;
    s.n_ctx = 8192;
    s.rope_orig_ctx = 256;
    s.sliding_window = 16384;
    s.longrope = true;
    return s;
  }
  if (name == "phi4-mini-tiny") {
    // Phi-4-mini's (GQA 3:1, heads of 128 with 96 rotated, LongRoPE from 4096 of 131072, tied,
    // byte-level BPE) at dim 192: heads of 32 with 24 rotated.
    s = *make_model_preset("phi3-tiny");
    s.name = "phi4-mini-tiny-random";
    s.n_embd = 192;
    s.n_head = 6;
    s.n_head_kv = 2;
    s.n_rot = 24;
    s.n_ff = 512;
    s.sliding_window = 0;
    s.tied = true;
    s.vocab_type = "bpe";
    return s;
  }
  if (name == "gpt-oss-tiny") return gptoss_tiny();
  if (name == "deepseek-v2-lite-tiny") return deepseek_tiny(false);
  if (name == "deepseek-v3-tiny") return deepseek_tiny(true);
  if (name == "deepseek-v2-lite") return deepseek_v2_lite();
  return Error{
      "unknown --preset '" + name +
      "' (expected tiny, tinyllama-1.1b, mixtral-tiny, mixtral-1b, qwen2-tiny, qwen2moe-tiny, "
      "qwen3-tiny, "
      "qwen3moe-tiny, gemma2-tiny, gemma3-tiny, phi3-tiny, phi4-mini-tiny, gpt-oss-tiny, "
      "deepseek-v2-lite-tiny, deepseek-v3-tiny or deepseek-v2-lite)"};
}

Status make_model(const MakeModelSpec& s, const std::string& path) {
  KVW_RETURN_IF_ERROR(s.validate());
  std::vector<std::string> words(std::begin(kWords), std::end(kWords));
  const bool qwen =
      s.arch == "qwen2" || s.arch == "qwen2moe" || s.arch == "qwen3" || s.arch == "qwen3moe";
  // Phi-3's SentencePiece vocabulary ends in added control tokens, <|endoftext|> (its eos) first;
  // llama.cpp sets attributes on that token by name in any model named phi3, so it must exist.
  const bool phi3_spm = s.arch == "phi3" && s.vocab_type == "spm";
  const bool gptoss = s.arch == "gpt-oss";
  const char* bpe_pre = qwen ? "qwen2" : gptoss ? "gpt-4o" : "llama3";  // gpt-oss: o200k's
  Vocab vocab = s.vocab_type == "spm"
                    ? build_spm_vocab(words, phi3_spm && s.n_vocab > 0 ? s.n_vocab - 1 : s.n_vocab)
                    : build_bpe_vocab(words, bpe_pre, s.n_vocab);
  if (phi3_spm) {
    vocab.eos_id = (int32_t)vocab.tokens.size();
    vocab.tokens.push_back("<|endoftext|>");
    vocab.scores.push_back(-1000.0f);  // as convert_hf_to_gguf.py scores added tokens
    vocab.types.push_back(TokenType::kControl);
  }
  for (const std::string& t : s.extra_control_tokens) {
    vocab.tokens.push_back(t);
    if (!vocab.scores.empty()) vocab.scores.push_back(-1000.0f);  // byte-level BPE has none
    vocab.types.push_back(TokenType::kControl);
  }
  if (qwen || s.vocab_type == "bpe") vocab.chat_template = kChatMlTemplate;
  if (gptoss) vocab.chat_template = kHarmonyTemplate;
  if (is_gemma(s)) vocab.add_space_prefix = false;  // as the Gemma converters write
  const int64_t n_vocab = (int64_t)vocab.tokens.size();

  GgufWriter w(s.gguf_version);
  w.set_string("general.architecture", s.arch);
  w.set_string("general.name", s.name);
  // The family's own keys (model/families), else the llama layout's.
  const ModelFamily& family = *find_family(s.arch);
  if (family.write_keys != nullptr) {
    family.write_keys(s, w);
  } else {
    set_llama_keys(s, w);
  }
  vocab_to_gguf(vocab, w);

  TensorMaker tm(w, s.seed);
  write_declared(declared_tensors(spec_hparams(s, n_vocab)), s, tm);
  return w.write(path);
}

}  // namespace kvw
