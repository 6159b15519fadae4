// model/families/deepseek2.cc: DeepSeek-V2/V3 ("deepseek2"): MLA and DeepSeek routing.
#include <cmath>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/families/family.h"
#include "model/families/tensor_table.h"
#include "model/model_maker.h"

namespace kvw::families {
namespace {

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

// Multi-head latent attention of one layer, shapes as llama.cpp's deepseek2 loader expects.
// attn_kv_b: per head h, rows [h (nope + v), h (nope + v) + nope) are W_kb[h] and the next v
// rows W_vb[h], each row kv_lora_rank long; the split layout stores attn_k_b = W_kb[h]^T
// ({nope, r, nh}) and attn_v_b = W_vb[h] ({r, v, nh}), as the converter's kv_b_proj split does
// (make-model draws the one matrix for both, so a seed gives the same model either way).
void declare_mla(const ModelHParams& hp, const std::string& p, TensorTable& t) {
  const MlaParams& m = hp.mla;
  const int64_t d = hp.n_embd, nh = hp.n_head, r = m.kv_lora_rank;
  const int64_t nope = m.qk_nope_dim, vd = m.v_head_dim;
  if (m.q_lora_rank > 0) {
    t.matrix(p + "attn_q_a.weight", d, m.q_lora_rank);
    t.vector(p + "attn_q_a_norm.weight", m.q_lora_rank, 1.0f, 0.1f);
    t.matrix(p + "attn_q_b.weight", m.q_lora_rank, hp.q_dim());
  } else {
    t.matrix(p + "attn_q.weight", d, hp.q_dim());
  }
  t.matrix(p + "attn_kv_a_mqa.weight", d, r + m.qk_rope_dim);
  t.vector(p + "attn_kv_a_norm.weight", r, 1.0f, 0.1f);
  if (m.split_kv_b) {
    const float std = 1.0f / std::sqrt((float)r);
    t.add({.name = p + "attn_k_b.weight",
           .shape = {nope, r, nh},
           .std = std,
           .fill = TensorFill::kMlaKvBSplit});
    t.add({.name = p + "attn_v_b.weight",
           .shape = {r, vd, nh},
           .std = std,
           .fill = TensorFill::kMlaKvBSecond});
  } else {
    t.matrix(p + "attn_kv_b.weight", r, nh * (nope + vd));
  }
  t.matrix(p + "attn_output.weight", hp.attn_out_dim(), d);
}

// Leading dense layers, then routed experts plus the always-on shared ones (one FFN of
// n_ff_exp x expert_shared_count).
void declare_deepseek2(const ModelHParams& hp, TensorTable& t) {
  const int64_t d = hp.n_embd;
  declare_rope_factors(hp, t);
  declare_embedding(hp, t);
  for (int32_t l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    t.vector(p + "attn_norm.weight", d, 1.0f, 0.1f);
    declare_mla(hp, p, t);
    t.vector(p + "ffn_norm.weight", d, 1.0f, 0.1f);
    if (hp.is_moe_layer(l)) {
      declare_moe_ffn(hp, p, /*shared_gate=*/false, t);
    } else {
      declare_dense_ffn(hp, p, t);
    }
  }
  declare_output(hp, t);
}

// The keys llama.cpp's convert_hf_to_gguf.py writes for DeepseekV2/V3ForCausalLM. The split
// layout is what newer converters write: MLA declared as MQA over the latent (one KV head,
// key_length = kv_lora_rank + rope, value_length = kv_lora_rank) with the per-head lengths in
// key_length_mla / value_length_mla.
void write_deepseek2_keys(const MakeModelSpec& s, GgufWriter& w) {
  const std::string a = "deepseek2.";
  const bool split = s.mla_layout == MlaLayout::kSplit;
  const bool moe = s.n_expert > 0;
  write_size_keys(s, a, s.n_ff, split ? 1 : s.n_head, w);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", s.norm_eps);
  w.set_f32(a + "rope.freq_base", s.rope_theta);
  w.set_u32(a + "rope.dimension_count", s.qk_rope_dim);
  if (s.q_lora_rank > 0) w.set_u32(a + "attention.q_lora_rank", s.q_lora_rank);
  w.set_u32(a + "attention.kv_lora_rank", s.kv_lora_rank);
  const int32_t qk_head = s.qk_nope_dim + s.qk_rope_dim;
  w.set_u32(a + "attention.key_length", split ? s.kv_lora_rank + s.qk_rope_dim : qk_head);
  w.set_u32(a + "attention.value_length", split ? s.kv_lora_rank : s.v_head_dim);
  if (split) {
    w.set_u32(a + "attention.key_length_mla", qk_head);
    w.set_u32(a + "attention.value_length_mla", s.v_head_dim);
  }
  // Without experts every layer is dense (as converters write non-MoE deepseek2 models).
  w.set_u32(a + "leading_dense_block_count", moe ? s.n_layer_dense_lead : s.n_layer);
  w.set_u32(a + "expert_feed_forward_length", moe ? s.n_ff_exp : s.n_ff);
  w.set_u32(a + "expert_shared_count", s.n_expert_shared);
  if (moe) {
    w.set_u32(a + "expert_count", s.n_expert);
    w.set_u32(a + "expert_used_count", s.n_expert_used);
    w.set_f32(a + "expert_weights_scale", s.expert_weights_scale);
    w.set_bool(a + "expert_weights_norm", s.expert_weights_norm);
    w.set_u32(a + "expert_gating_func", (uint32_t)s.gating);
    if (s.n_group > 1) {
      w.set_u32(a + "expert_group_count", s.n_group);
      w.set_u32(a + "expert_group_used_count", s.n_group_used);
    }
  }
  write_rope_scaling_keys(s, a, w);
  if (s.rope_scaling == RopeScaling::kYarn)
    w.set_f32(a + "rope.scaling.yarn_log_multiplier", s.yarn_log_multiplier);
}

// DeepSeekMoE's routing flags: with --experts, the routed and shared experts, dense lead layers
// and expert groups must fit; without, none of them may be set.
Status validate_deepseek2_routing(const MakeModelSpec& s) {
  if (s.n_expert == 0) {
    if (s.n_expert_shared != 0 || s.n_ff_exp != 0 || s.n_layer_dense_lead != 0 || s.n_group != 0 ||
        s.n_group_used != 0 || s.probs_bias) {
      return Error{
          "--experts-shared, --expert-ffn, --dense-lead, --expert-groups, --expert-groups-used "
          "and --probs-bias need --experts"};
    }
    return {};
  }
  if (s.n_ff_exp <= 0) return Error{"--expert-ffn must be > 0 with --experts"};
  if (s.n_expert_shared < 0) return Error{"--experts-shared must be >= 0"};
  if (s.n_layer_dense_lead < 0 || s.n_layer_dense_lead > s.n_layer)
    return Error{"--dense-lead must be between 0 and --layers"};
  if (s.n_group < 0) return Error{"--expert-groups must be >= 0"};
  if (s.n_group <= 1) {
    if (s.n_group_used > s.n_group) return Error{"--expert-groups-used needs --expert-groups > 1"};
  } else {
    // A group's score is the sum of its two best experts (DeepSeek-V3), so groups hold >= 2.
    if (s.n_expert % s.n_group != 0 || s.n_expert / s.n_group < 2)
      return Error{"--expert-groups must divide --experts into groups of at least 2"};
    if (s.n_group_used < 1 || s.n_group_used > s.n_group)
      return Error{"--expert-groups-used must be between 1 and --expert-groups"};
    if (s.n_expert_used > s.n_group_used * (s.n_expert / s.n_group))
      return Error{"--experts-used must be at most the experts in --expert-groups-used groups"};
  }
  if (!(s.expert_weights_scale > 0.0f)) return Error{"--expert-weights-scale must be > 0"};
  return {};
}

// MLA ranks and head lengths, DeepSeek's YaRN, the routing; every row length whole quant blocks.
Status validate_deepseek2(const MakeModelSpec& s) {
  if (s.n_embd <= 0 || s.n_layer <= 0 || s.n_head <= 0 || s.n_ff <= 0 || s.n_ctx <= 0)
    return Error{"--dim, --layers, --heads, --ffn and --context must be > 0"};
  if (s.kv_lora_rank <= 0) return Error{"--kv-lora-rank must be > 0 for --arch deepseek2"};
  if (s.q_lora_rank < 0) return Error{"--q-lora-rank must be >= 0 (0: no query compression)"};
  if (s.qk_rope_dim <= 0 || s.qk_rope_dim % 2 != 0)
    return Error{"--qk-rope-dim must be even and > 0"};
  if (s.qk_nope_dim <= 0 || s.qk_nope_dim % 2 != 0)
    return Error{"--qk-nope-dim must be even and > 0"};
  if (s.v_head_dim <= 0) return Error{"--v-head-dim must be > 0"};
  if (s.rope_scaling != RopeScaling::kNone && s.rope_scaling != RopeScaling::kYarn)
    return Error{"--rope-scaling must be none or yarn for --arch deepseek2"};
  if (s.rope_scaling == RopeScaling::kYarn && !(s.yarn_log_multiplier > 0.0f)) {
    // Without it llama.cpp versions disagree on DeepSeek's YaRN attention scale.
    return Error{"--yarn-log-multiplier must be > 0 with --rope-scaling yarn for --arch deepseek2"};
  }
  if (s.rope_scaling != RopeScaling::kYarn && s.yarn_log_multiplier != 0.0f)
    return Error{"--yarn-log-multiplier needs --rope-scaling yarn"};
  KVW_RETURN_IF_ERROR(validate_deepseek2_routing(s));
  const int64_t blk = type_traits(s.weight_type).block_elems;
  const struct {
    int64_t row;
    const char* what;
  } rows[] = {
      {s.n_embd, "--dim"},
      {s.n_ff, "--ffn"},
      {s.kv_lora_rank, "--kv-lora-rank"},
      {(int64_t)s.n_head * s.v_head_dim, "--heads x --v-head-dim"},
      {s.q_lora_rank, "--q-lora-rank"},
      {s.n_ff_exp, "--expert-ffn"},
      {s.mla_layout == MlaLayout::kSplit ? s.qk_nope_dim : 0,
       "--qk-nope-dim (attn_k_b rows with --mla-layout split)"},
  };
  for (const auto& r : rows) {
    if (r.row % blk != 0) {
      return Error{std::string(r.what) + " must be a multiple of " + std::to_string(blk) +
                   " for --weight-type " + std::string(type_traits(s.weight_type).name)};
    }
  }
  return {};
}

// DeepSeek-V2-Lite's structure at dim 128 ("deepseek-v2-lite-tiny": no q compression, softmax
// routing, 2 shared experts, attn_kv_b), or DeepSeek-V3's ("deepseek-v3-tiny": q compression,
// sigmoid routing in 4 groups with a selection bias, renormalised and scaled weights, YaRN, the
// split attn_k_b / attn_v_b layout).
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

MakeModelSpec deepseek_v2_lite_tiny() {
  return deepseek_tiny(false);
}
MakeModelSpec deepseek_v3_tiny() {
  return deepseek_tiny(true);
}

// DeepSeek-V2-Lite (config.json of deepseek-ai/DeepSeek-V2-Lite): 15.7B parameters, 2.4B
// active; about 9 GB at q4_0.
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

constexpr MakerPreset kPresets[] = {{"deepseek-v2-lite-tiny", deepseek_v2_lite_tiny},
                                    {"deepseek-v3-tiny", deepseek_v3_tiny},
                                    {"deepseek-v2-lite", deepseek_v2_lite}};

}  // namespace

const ModelFamily kDeepseek2{.arch = "deepseek2",
                             .mla = true,
                             .hf = {.model_types = {"deepseek_v2", "deepseek_v3"}},
                             .read_keys = read_deepseek2,
                             .declare_tensors = declare_deepseek2,
                             .maker = {.presets = kPresets,
                                       .flags = kMakeExperts | kMakeExpertFfn | kMakeMla,
                                       .validate = validate_deepseek2,
                                       .write_keys = write_deepseek2_keys}};

// This file's families, in the order the registry lists them (families.cc).
std::span<const ModelFamily* const> deepseek2_families() {
  static constexpr const ModelFamily* kThisFile[] = {&kDeepseek2};
  return kThisFile;
}

}  // namespace kvw::families
