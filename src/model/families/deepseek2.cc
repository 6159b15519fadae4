// model/families/deepseek2.cc: DeepSeek-V2/V3 ("deepseek2"): MLA and DeepSeek routing.
#include "gguf/gguf_file.h"
#include "model/families/family.h"

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

}  // namespace

// Listed in families.cc.
extern const ModelFamily kDeepseek2;

const ModelFamily kDeepseek2{.arch = "deepseek2", .mla = true, .read_keys = read_deepseek2};

}  // namespace kvw::families
