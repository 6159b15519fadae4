#include "model/hparams.h"

#include <atomic>
#include <cmath>

#include "gguf/gguf_file.h"

namespace kvw {

const char* rope_scaling_name(RopeScaling s) {
  switch (s) {
    case RopeScaling::kNone:
      return "none";
    case RopeScaling::kLinear:
      return "linear";
    case RopeScaling::kNtk:
      return "ntk";
    case RopeScaling::kYarn:
      return "yarn";
  }
  return "?";
}

Result<RopeScaling> parse_rope_scaling(const std::string& name) {
  if (name.empty() || name == "none") return RopeScaling::kNone;
  if (name == "linear") return RopeScaling::kLinear;
  if (name == "ntk") return RopeScaling::kNtk;
  if (name == "yarn") return RopeScaling::kYarn;
  return Error{"unknown rope scaling '" + name + "' (expected none, linear, ntk or yarn)"};
}

namespace {

// Reads an optional integer key, keeping `fallback` when absent.
Status read_int(const GgufFile& f, const std::string& key, int32_t& out, bool required) {
  if (f.find(key) == nullptr) {
    if (required) return Error{f.path() + ": key '" + key + "': missing"};
    return {};
  }
  auto v = f.get_int(key);
  if (!v) return Error{v.message()};
  if (*v < 0 || *v > (int64_t{1} << 30)) {
    return Error{f.path() + ": key '" + key + "': value " + std::to_string(*v) + " out of range"};
  }
  out = (int32_t)*v;
  return {};
}

Status read_float(const GgufFile& f, const std::string& key, float& out) {
  if (f.find(key) == nullptr) return {};
  auto v = f.get_float(key);
  if (!v) return Error{v.message()};
  out = (float)*v;
  return {};
}

Status validate(const GgufFile& f, const ModelHParams& hp) {
  auto bad = [&](const std::string& what) { return Error{f.path() + ": " + what}; };
  if (hp.n_embd <= 0 || hp.n_layer <= 0 || hp.n_head <= 0 || hp.n_ff <= 0)
    return bad("embedding_length, block_count, head_count and feed_forward_length must be > 0");
  if (hp.n_head_kv <= 0 || hp.n_head % hp.n_head_kv != 0)
    return bad("head_count " + std::to_string(hp.n_head) + " is not a multiple of head_count_kv " +
               std::to_string(hp.n_head_kv));
  if (hp.head_dim <= 0 || hp.head_dim % 2 != 0) return bad("head dimension must be even and > 0");
  if (hp.rope.n_rot <= 0 || hp.rope.n_rot > hp.head_dim || hp.rope.n_rot % 2 != 0)
    return bad("rope.dimension_count " + std::to_string(hp.rope.n_rot) +
               " must be even and at most the head dimension " + std::to_string(hp.head_dim));
  if (hp.rope.scale_factor <= 0.0f) return bad("rope.scaling.factor must be > 0");
  if (!(hp.norm_eps > 0.0f)) return bad("attention.layer_norm_rms_epsilon must be > 0");
  return {};
}

// Expert counts and routing knobs, checked against each other; messages name the key and give
// the expected and found values.
Status validate_moe(const GgufFile& f, const std::string& a, const MoeParams& m) {
  auto bad = [&](const std::string& key, const std::string& what) {
    return Error{f.path() + ": key '" + a + key + "': " + what};
  };
  const auto n = [](int64_t v) { return std::to_string(v); };
  if (!m.is_moe()) {
    if (m.n_expert_used > 0)
      return bad("expert_used_count", n(m.n_expert_used) + " but expert_count is 0");
    return {};
  }
  if (m.n_expert_used < 1 || m.n_expert_used > m.n_expert) {
    return bad("expert_used_count",
               "expected 1.." + n(m.n_expert) + " (expert_count), found " + n(m.n_expert_used));
  }
  if (m.n_ff_exp <= 0) return bad("expert_feed_forward_length", "expected > 0, found 0");
  if (m.n_group > 1) {
    if (m.n_expert % m.n_group != 0) {
      return bad("expert_group_count",
                 "expected a divisor of expert_count " + n(m.n_expert) + ", found " + n(m.n_group));
    }
    if (m.n_group_used < 1 || m.n_group_used > m.n_group) {
      return bad(
          "expert_group_used_count",
          "expected 1.." + n(m.n_group) + " (expert_group_count), found " + n(m.n_group_used));
    }
    const int64_t reachable = (int64_t)m.n_group_used * (m.n_expert / m.n_group);
    if (m.n_expert_used > reachable) {
      return bad("expert_used_count", "expected at most " + n(reachable) +
                                          " (experts in the used groups), found " +
                                          n(m.n_expert_used));
    }
  }
  if (!(m.weights_scale > 0.0f)) return bad("expert_weights_scale", "expected > 0");
  return {};
}

Status read_bool(const GgufFile& f, const std::string& key, bool& out) {
  if (f.find(key) == nullptr) return {};
  auto v = f.get_bool(key);
  if (!v) return Error{v.message()};
  out = *v;
  return {};
}

// DeepSeek-V2/V3 ("deepseek2"): MLA ranks and head lengths, and DeepSeek's routing knobs, under
// llama.cpp's key names. Two layouts exist: older files give the per-head key/value lengths as
// attention.key_length / value_length (attn_kv_b); newer ones (attn_k_b / attn_v_b) give
// key_length = kv_lora_rank + rope dims and the per-head lengths as key_length_mla /
// value_length_mla.
Status read_deepseek2(const GgufFile& f, const std::string& a, ModelHParams& hp) {
  MlaParams& mla = hp.mla;
  MoeParams& moe = hp.moe;
  KVW_RETURN_IF_ERROR(read_int(f, a + "attention.q_lora_rank", mla.q_lora_rank, false));
  KVW_RETURN_IF_ERROR(read_int(f, a + "attention.kv_lora_rank", mla.kv_lora_rank, true));
  mla.qk_rope_dim = hp.rope.n_rot;
  int32_t key_length = 0, value_length = 0, key_mla = 0, value_mla = 0;
  KVW_RETURN_IF_ERROR(read_int(f, a + "attention.key_length", key_length, true));
  KVW_RETURN_IF_ERROR(read_int(f, a + "attention.value_length", value_length, true));
  KVW_RETURN_IF_ERROR(read_int(f, a + "attention.key_length_mla", key_mla, false));
  KVW_RETURN_IF_ERROR(read_int(f, a + "attention.value_length_mla", value_mla, false));
  auto bad = [&](const std::string& key, const std::string& what) {
    return Error{f.path() + ": key '" + a + key + "': " + what};
  };
  const auto n = [](int64_t v) { return std::to_string(v); };
  if (mla.kv_lora_rank <= 0) return bad("attention.kv_lora_rank", "expected > 0, found 0");
  int32_t qk_head = key_length;
  mla.v_head_dim = value_length;
  if (key_mla > 0) {
    const int32_t latent = mla.kv_lora_rank + mla.qk_rope_dim;
    if (key_length != latent) {
      return bad("attention.key_length",
                 "expected kv_lora_rank + rope.dimension_count = " + n(latent) +
                     " beside key_length_mla, found " + n(key_length));
    }
    qk_head = key_mla;
    mla.v_head_dim = value_mla;
  }
  if (qk_head <= mla.qk_rope_dim) {
    return bad(
        key_mla > 0 ? "attention.key_length_mla" : "attention.key_length",
        "expected more than rope.dimension_count " + n(mla.qk_rope_dim) + ", found " + n(qk_head));
  }
  if (mla.v_head_dim <= 0) {
    return bad(key_mla > 0 ? "attention.value_length_mla" : "attention.value_length",
               "expected > 0, found 0");
  }
  mla.qk_nope_dim = qk_head - mla.qk_rope_dim;
  hp.head_dim = qk_head;
  mla.split_kv_b = f.find_tensor("blk.0.attn_k_b.weight") != nullptr;
  KVW_RETURN_IF_ERROR(read_float(f, a + "rope.scaling.yarn_log_multiplier", mla.yarn_log_mul));

  if (!moe.is_moe()) return {};
  KVW_RETURN_IF_ERROR(read_int(f, a + "expert_feed_forward_length", moe.n_ff_exp, true));
  KVW_RETURN_IF_ERROR(read_int(f, a + "expert_shared_count", moe.n_expert_shared, false));
  moe.n_ff_shared = moe.n_ff_exp * moe.n_expert_shared;
  KVW_RETURN_IF_ERROR(read_int(f, a + "leading_dense_block_count", moe.n_layer_dense_lead, false));
  if (moe.n_layer_dense_lead > hp.n_layer) {
    return bad("leading_dense_block_count", "expected at most block_count " + n(hp.n_layer) +
                                                ", found " + n(moe.n_layer_dense_lead));
  }
  if (f.find(a + "expert_weights_scale") == nullptr) {
    return Error{f.path() + ": key '" + a + "expert_weights_scale': missing"};
  }
  KVW_RETURN_IF_ERROR(read_float(f, a + "expert_weights_scale", moe.weights_scale));
  moe.norm_weights = false;  // DeepSeek-V2 does not renormalise; V3 files say true
  KVW_RETURN_IF_ERROR(read_bool(f, a + "expert_weights_norm", moe.norm_weights));
  int32_t gating = 0;  // 0 (absent): softmax, as V2 / V2.5 files predate the key
  KVW_RETURN_IF_ERROR(read_int(f, a + "expert_gating_func", gating, false));
  if (gating != 0 && gating != (int32_t)ExpertGating::kSoftmax &&
      gating != (int32_t)ExpertGating::kSigmoid) {
    return bad("expert_gating_func", "expected 1 (softmax) or 2 (sigmoid), found " + n(gating));
  }
  moe.gating = gating == 2 ? ExpertGating::kSigmoid : ExpertGating::kSoftmax;
  KVW_RETURN_IF_ERROR(read_int(f, a + "expert_group_count", moe.n_group, false));
  KVW_RETURN_IF_ERROR(read_int(f, a + "expert_group_used_count", moe.n_group_used, false));
  return {};
}

// Qwen1.5-MoE / Qwen2-57B-A14B ("qwen2moe", llama.cpp's names): every layer routes softmax
// top-k without renormalising, plus one gated shared expert. Widths default as llama.cpp does
// when a key is absent: experts feed_forward_length / expert_used_count, the shared expert
// feed_forward_length.
Status read_qwen2moe(const GgufFile& f, const std::string& a, ModelHParams& hp) {
  MoeParams& moe = hp.moe;
  if (!moe.is_moe()) {
    return Error{f.path() + ": key '" + a + "expert_count': qwen2moe needs > 0, found 0"};
  }
  if (moe.n_expert_used > 0) moe.n_ff_exp = hp.n_ff / moe.n_expert_used;
  KVW_RETURN_IF_ERROR(read_int(f, a + "expert_feed_forward_length", moe.n_ff_exp, false));
  moe.n_ff_shared = hp.n_ff;
  KVW_RETURN_IF_ERROR(read_int(f, a + "expert_shared_feed_forward_length", moe.n_ff_shared, false));
  moe.norm_weights = false;
  moe.gating = ExpertGating::kSoftmax;
  return {};
}

// Qwen3-MoE ("qwen3moe", llama.cpp's build_qwen3moe): every layer routes softmax top-k with the
// chosen weights renormalised, no shared expert. Experts are expert_feed_forward_length wide
// (absent: feed_forward_length / expert_used_count, as llama.cpp).
Status read_qwen3moe(const GgufFile& f, const std::string& a, ModelHParams& hp) {
  MoeParams& moe = hp.moe;
  if (!moe.is_moe()) {
    return Error{f.path() + ": key '" + a + "expert_count': qwen3moe needs > 0, found 0"};
  }
  if (moe.n_expert_used > 0) moe.n_ff_exp = hp.n_ff / moe.n_expert_used;
  KVW_RETURN_IF_ERROR(read_int(f, a + "expert_feed_forward_length", moe.n_ff_exp, false));
  moe.norm_weights = true;
  moe.gating = ExpertGating::kSoftmax;
  return {};
}

// Gemma-2 and Gemma-3 (llama.cpp's gemma2 / gemma3 loaders and graphs): embeddings scaled by
// sqrt(n_embd), post-attention and post-FFN norms, GeGLU (tanh GELU), NEOX rope, windowed layers
// in a period with their own rope. gemma2: window 4096 unless the key says otherwise, period 2,
// attention and final logit soft-capping (defaults 50 and 30), the output always tied (llama.cpp
// reads token_embd even when output.weight exists). gemma3: windowed only when the file has a
// window (period 6), per-head Q/K norms, local rope base 10000 unless rope.freq_base_swa, the
// global layers alone scaled, final soft-capping only when the key is there. Scores are scaled by
// 1/sqrt(head_dim), except on the 27B shapes (46 and 62 layers), whose query_pre_attn_scalar
// llama.cpp takes as n_embd / n_head: no GGUF key carries it, so this follows llama.cpp.
Status read_gemma(const GgufFile& f, const std::string& a, ModelHParams& hp) {
  const bool gemma2 = hp.arch == "gemma2";
  GemmaParams& g = hp.gemma;
  g.scale_embd = true;
  g.post_norms = true;
  hp.ffn_act = FfnAct::kGeluTanh;
  hp.rope.style = RopeStyle::kNeox;
  const int32_t large_layers = gemma2 ? 46 : 62;
  const int32_t head_for_scale = hp.n_layer == large_layers ? hp.n_embd / hp.n_head : hp.head_dim;
  hp.attn_scale = 1.0f / std::sqrt((float)head_for_scale);
  KVW_RETURN_IF_ERROR(read_float(f, a + "final_logit_softcapping", g.final_softcap));
  if (gemma2) {
    if (f.find(a + "attention.sliding_window") == nullptr) hp.sliding_window = 4096;
    g.attn_softcap = 50.0f;
    KVW_RETURN_IF_ERROR(read_float(f, a + "attn_logit_softcapping", g.attn_softcap));
    if (f.find(a + "final_logit_softcapping") == nullptr) g.final_softcap = 30.0f;
    hp.tied_embeddings = true;
  } else {
    hp.qk_norm = true;
  }
  if (!(g.attn_softcap >= 0.0f) || !(g.final_softcap >= 0.0f))
    return Error{f.path() + ": logit soft-capping values must be >= 0"};
  if (hp.sliding_window <= 0) return {};
  hp.swa_period = gemma2 ? 2 : 6;
  KVW_RETURN_IF_ERROR(read_int(f, a + "attention.sliding_window_pattern", hp.swa_period, false));
  hp.rope_swa = hp.rope;
  if (!gemma2) {  // llama.cpp's gemma3: the local layers keep the training rope, unscaled
    hp.rope_swa.freq_base = 10000.0f;
    hp.rope_swa.scaling = RopeScaling::kNone;
    hp.rope_swa.scale_factor = 1.0f;
  }
  KVW_RETURN_IF_ERROR(read_float(f, a + "rope.freq_base_swa", hp.rope_swa.freq_base));
  hp.has_rope_swa = true;
  return {};
}

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
  hp.rope.style = RopeStyle::kNeox;
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

std::atomic<uint64_t> g_hparams_reads{0};

}  // namespace

uint64_t hparams_reads() {
  return g_hparams_reads.load(std::memory_order_relaxed);
}

int32_t ModelHParams::kv_window() const {
  for (int32_t l = 0; l < n_layer; ++l) {
    if (!is_swa_layer(l)) return 0;
  }
  return sliding_window;
}

Result<ModelHParams> hparams_from_gguf(const GgufFile& f) {
  g_hparams_reads.fetch_add(1, std::memory_order_relaxed);
  ModelHParams hp;
  auto arch = f.get_string("general.architecture");
  if (!arch) return Error{arch.message()};
  hp.arch = *arch;
  const bool gemma = hp.arch == "gemma2" || hp.arch == "gemma3";
  const bool gptoss = hp.arch == "gpt-oss";
  if (hp.arch != "llama" && hp.arch != "qwen2" && hp.arch != "qwen2moe" && hp.arch != "qwen3" &&
      hp.arch != "qwen3moe" && hp.arch != "deepseek2" && hp.arch != "phi3" && !gemma && !gptoss) {
    return Error{f.path() + ": key 'general.architecture': '" + hp.arch +
                 "' is not supported (supported: llama, qwen2, qwen2moe, qwen3, qwen3moe, "
                 "gemma2, gemma3, deepseek2, phi3, gpt-oss)"};
  }
  const bool qwen3 = hp.arch == "qwen3" || hp.arch == "qwen3moe";
  if (auto name = f.get_string("general.name")) hp.name = *name;
  const std::string a = hp.arch + ".";
  KVW_RETURN_IF_ERROR(read_int(f, a + "embedding_length", hp.n_embd, true));
  KVW_RETURN_IF_ERROR(read_int(f, a + "block_count", hp.n_layer, true));
  KVW_RETURN_IF_ERROR(read_int(f, a + "attention.head_count", hp.n_head, true));
  hp.n_head_kv = hp.n_head;
  KVW_RETURN_IF_ERROR(read_int(f, a + "attention.head_count_kv", hp.n_head_kv, false));
  KVW_RETURN_IF_ERROR(read_int(f, a + "feed_forward_length", hp.n_ff, true));
  KVW_RETURN_IF_ERROR(read_int(f, a + "context_length", hp.n_ctx_train, true));
  // Applied as written (every layer, key positions pos - w < j <= pos, llama.cpp's standard SWA
  // mask). llama.cpp's own llama graph never reads this key and attends to everything, so on
  // Mistral-7B-v0.1 (w 4096) greedy text differs from llama.cpp's only past 4096 tokens.
  // phi3: llama.cpp reads it but switches it off (llama_model_phi3, "Phi SWA is currently
  // disabled"); Hugging Face's Phi3 applies it, and so does kvwarden: Phi-3-mini-4k's 2047 makes
  // text differ from llama.cpp's only once a sequence passes 2047 tokens.
  KVW_RETURN_IF_ERROR(read_int(f, a + "attention.sliding_window", hp.sliding_window, false));
  KVW_RETURN_IF_ERROR(read_float(f, a + "attention.layer_norm_rms_epsilon", hp.norm_eps));
  if (hp.n_head > 0) hp.head_dim = hp.n_embd / hp.n_head;
  KVW_RETURN_IF_ERROR(read_int(f, a + "attention.key_length", hp.head_dim, false));
  if (hp.arch != "deepseek2") {
    // Value heads as long as key heads (Qwen3: both 128 where n_embd / n_head is not).
    int32_t value_length = hp.head_dim;
    KVW_RETURN_IF_ERROR(read_int(f, a + "attention.value_length", value_length, false));
    if (value_length != hp.head_dim) {
      return Error{f.path() + ": key '" + a + "attention.value_length': " +
                   std::to_string(value_length) + ", expected key_length " +
                   std::to_string(hp.head_dim) + " (different key and value lengths)"};
    }
  }

  const bool phi3 = hp.arch == "phi3";
  hp.rope.style = hp.arch == "qwen2" || hp.arch == "qwen2moe" || qwen3 || phi3 ? RopeStyle::kNeox
                                                                               : RopeStyle::kNormal;
  hp.rope.n_rot = hp.head_dim;
  KVW_RETURN_IF_ERROR(read_int(f, a + "rope.dimension_count", hp.rope.n_rot, false));
  KVW_RETURN_IF_ERROR(read_float(f, a + "rope.freq_base", hp.rope.freq_base));
  if (f.find(a + "rope.scaling.type") != nullptr) {
    auto type = f.get_string(a + "rope.scaling.type");
    if (!type) return Error{type.message()};
    auto s = parse_rope_scaling(*type);
    if (!s) return Error{f.path() + ": key '" + a + "rope.scaling.type': " + s.message()};
    hp.rope.scaling = *s;
  }
  KVW_RETURN_IF_ERROR(read_float(f, a + "rope.scaling.factor", hp.rope.scale_factor));
  // Older files store only the inverse (rope.scale_linear).
  if (f.find(a + "rope.scale_linear") != nullptr && hp.rope.scaling == RopeScaling::kNone) {
    KVW_RETURN_IF_ERROR(read_float(f, a + "rope.scale_linear", hp.rope.scale_factor));
    if (hp.rope.scale_factor != 1.0f) hp.rope.scaling = RopeScaling::kLinear;
  }
  hp.rope.orig_ctx = hp.n_ctx_train;
  KVW_RETURN_IF_ERROR(
      read_int(f, a + "rope.scaling.original_context_length", hp.rope.orig_ctx, false));
  KVW_RETURN_IF_ERROR(read_float(f, a + "rope.scaling.attn_factor", hp.rope.attn_factor));
  if (hp.rope.scaling == RopeScaling::kNone) hp.rope.scale_factor = 1.0f;

  // Mixtral-style llama files: softmax over all experts, top-k, weights renormalised (llama.cpp's
  // llama graph); experts are feed_forward_length wide.
  KVW_RETURN_IF_ERROR(read_int(f, a + "expert_count", hp.moe.n_expert, false));
  KVW_RETURN_IF_ERROR(read_int(f, a + "expert_used_count", hp.moe.n_expert_used, false));
  hp.moe.n_ff_exp = hp.n_ff;
  if (hp.arch == "deepseek2") KVW_RETURN_IF_ERROR(read_deepseek2(f, a, hp));
  if (hp.arch == "qwen2moe") KVW_RETURN_IF_ERROR(read_qwen2moe(f, a, hp));
  if (hp.arch == "qwen3moe") KVW_RETURN_IF_ERROR(read_qwen3moe(f, a, hp));
  if (gptoss) KVW_RETURN_IF_ERROR(read_gptoss(f, a, hp));
  KVW_RETURN_IF_ERROR(validate_moe(f, a, hp.moe));
  hp.moe.probs_bias =
      hp.moe.is_moe() && f.find_tensor("blk." + std::to_string(hp.moe.n_layer_dense_lead) +
                                       ".exp_probs_b.bias") != nullptr;

  hp.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  hp.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  // qwen3 and qwen3moe always have them (llama.cpp requires both); the loader checks each layer.
  hp.qk_norm = qwen3;
  if (gemma) KVW_RETURN_IF_ERROR(read_gemma(f, a, hp));
  // phi3 (llama.cpp's llama_model_phi3): ffn_up holds the gate rows then the up rows.
  hp.gate_up_fused = phi3;
  // n_vocab from the embedding matrix: the tokenizer may list fewer entries than rows.
  if (const auto* emb = f.find_tensor("token_embd.weight"); emb && emb->shape.size() == 2) {
    hp.n_vocab = (int32_t)emb->shape[1];
  } else {
    return Error{f.path() + ": tensor 'token_embd.weight': missing or not 2-dimensional"};
  }
  KVW_RETURN_IF_ERROR(validate(f, hp));
  return hp;
}

}  // namespace kvw
