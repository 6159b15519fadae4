// make-model's per-family checks of a spec (model_maker_validate.h).
#include "model/model_maker_validate.h"

#include <string>

namespace kvw::maker {

// Flags only deepseek2 reads: refused elsewhere, so a llama file cannot silently ignore them.
// --expert-ffn is qwen2moe's too (validate_qwen2moe clears it before calling this).
Status refuse_deepseek2_flags(const MakeModelSpec& s) {
  const struct {
    bool set;
    const char* flag;
  } flags[] = {
      {s.q_lora_rank != 0, "--q-lora-rank"},
      {s.kv_lora_rank != 0, "--kv-lora-rank"},
      {s.qk_rope_dim != 0, "--qk-rope-dim"},
      {s.qk_nope_dim != 0, "--qk-nope-dim"},
      {s.v_head_dim != 0, "--v-head-dim"},
      {s.mla_layout != MlaLayout::kKvB, "--mla-layout"},
      {s.n_expert_shared != 0, "--experts-shared"},
      {s.n_ff_exp != 0, "--expert-ffn"},
      {s.n_layer_dense_lead != 0, "--dense-lead"},
      {s.gating != ExpertGating::kSoftmax, "--gating"},
      {s.n_group != 0, "--expert-groups"},
      {s.n_group_used != 0, "--expert-groups-used"},
      {s.expert_weights_scale != 1.0f, "--expert-weights-scale"},
      {s.expert_weights_norm, "--expert-weights-norm"},
      {s.probs_bias, "--probs-bias"},
      {s.yarn_log_multiplier != 0.0f, "--yarn-log-multiplier"},
  };
  for (const auto& f : flags) {
    if (!f.set) continue;
    const bool also_qwen_moe = std::string(f.flag) == "--expert-ffn";
    return Error{std::string(f.flag) + " needs --arch deepseek2" +
                 (also_qwen_moe ? ", qwen2moe or qwen3moe" : "")};
  }
  return {};
}

Status validate_llama_shape(const MakeModelSpec& s);

bool is_gemma(const MakeModelSpec& s) {
  return s.arch == "gemma2" || s.arch == "gemma3";
}

// gemma2 / gemma3 (llama.cpp's loaders): dense GeGLU layers, no biases or experts; gemma2 is
// always tied (llama.cpp reads token_embd as the output even when output.weight exists), always
// windowed and soft-capped.
Status validate_gemma(const MakeModelSpec& s) {
  KVW_RETURN_IF_ERROR(refuse_deepseek2_flags(s));
  KVW_RETURN_IF_ERROR(validate_llama_shape(s));
  if (s.n_expert != 0 || s.n_expert_used != 0 || s.n_ff_shexp != 0)
    return Error{"--experts, --experts-used and --shared-expert-ffn: gemma layers are dense"};
  if (s.sliding_window < 0 || s.swa_period < 0 || s.rope_theta_swa < 0 || s.final_softcap < 0)
    return Error{"--sliding-window, --swa-period, --rope-theta-swa, --final-softcap must be >= 0"};
  if (s.arch == "gemma3") {
    if (s.attn_softcap != 0) return Error{"--attn-softcap needs --arch gemma2"};
    return {};
  }
  if (!s.tied) return Error{"--tied=false: gemma2 files never carry output.weight"};
  if (s.sliding_window <= 0) return Error{"--sliding-window must be > 0 for --arch gemma2"};
  if (!(s.attn_softcap > 0) || !(s.final_softcap > 0))
    return Error{"--attn-softcap and --final-softcap must be > 0 for --arch gemma2"};
  return {};
}
// Attention and FFN shapes of the llama-style architectures (llama, qwen2, qwen2moe, qwen3,
// gemma2, gemma3).
Status validate_llama_shape(const MakeModelSpec& s) {
  if (s.n_embd <= 0 || s.n_layer <= 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.n_ff <= 0 ||
      s.n_ctx <= 0)
    return Error{"--dim, --layers, --heads, --kv-heads, --ffn and --context must be > 0"};
  if (s.head_dim < 0) return Error{"--head-dim must be >= 0 (0: --dim / --heads)"};
  if (s.head_dim != 0 && s.arch != "qwen3" && s.arch != "qwen3moe" && !is_gemma(s))
    return Error{"--head-dim needs --arch qwen3, qwen3moe, gemma2 or gemma3"};
  if (s.head_dim == 0 && s.n_embd % s.n_head != 0)
    return Error{"--dim must be a multiple of --heads"};
  if (s.n_head % s.n_head_kv != 0) return Error{"--heads must be a multiple of --kv-heads"};
  if (s.head_len() % 2 != 0)
    return Error{"head dimension (--head-dim or --dim / --heads) must be even"};
  const int64_t blk = type_traits(s.weight_type).block_elems;
  if (s.n_embd % blk != 0 || s.n_ff % blk != 0 || ((int64_t)s.n_head * s.head_len()) % blk != 0) {
    return Error{"--dim, --ffn and --heads x head dimension must be multiples of " +
                 std::to_string(blk) + " for --weight-type " +
                 std::string(type_traits(s.weight_type).name)};
  }
  return {};
}

// qwen2moe (llama.cpp's LLM_ARCH_QWEN2MOE loader): every layer routed experts of --expert-ffn
// plus a shared expert of --shared-expert-ffn; output.weight is required (no tying) and
// there is no sliding window.
Status validate_qwen2moe(const MakeModelSpec& s) {
  MakeModelSpec rest = s;
  rest.n_ff_exp = 0;  // qwen2moe's own
  KVW_RETURN_IF_ERROR(refuse_deepseek2_flags(rest));
  KVW_RETURN_IF_ERROR(validate_llama_shape(s));
  if (s.sliding_window != 0) return Error{"--sliding-window needs --arch llama or qwen2"};
  if (s.tied) return Error{"--tied: qwen2moe files always carry output.weight"};
  if (s.n_expert <= 0)
    return Error{"--experts must be > 0 for --arch qwen2moe (every layer is MoE)"};
  if (s.n_expert_used < 1 || s.n_expert_used > s.n_expert)
    return Error{"--experts-used must be between 1 and --experts"};
  if (s.n_ff_exp <= 0) return Error{"--expert-ffn must be > 0 for --arch qwen2moe"};
  if (s.n_ff_shexp <= 0) {
    return Error{
        "--shared-expert-ffn must be > 0 for --arch qwen2moe (its layers always have the "
        "shared expert)"};
  }
  const int64_t blk = type_traits(s.weight_type).block_elems;
  if (s.n_ff_exp % blk != 0 || s.n_ff_shexp % blk != 0) {
    return Error{"--expert-ffn and --shared-expert-ffn must be multiples of " +
                 std::to_string(blk) + " for --weight-type " +
                 std::string(type_traits(s.weight_type).name)};
  }
  return {};
}

// qwen3moe (llama.cpp's LLM_ARCH_QWEN3MOE loader): qwen3 attention, every layer routed experts
// of --expert-ffn with renormalised top-k weights, no shared expert, output tied or not.
Status validate_qwen3moe(const MakeModelSpec& s) {
  MakeModelSpec rest = s;
  rest.n_ff_exp = 0;  // qwen3moe's own
  KVW_RETURN_IF_ERROR(refuse_deepseek2_flags(rest));
  KVW_RETURN_IF_ERROR(validate_llama_shape(s));
  if (s.sliding_window != 0) return Error{"--sliding-window needs --arch llama or qwen2"};
  if (s.n_ff_shexp != 0) return Error{"--shared-expert-ffn needs --arch qwen2moe"};
  if (s.n_expert <= 0)
    return Error{"--experts must be > 0 for --arch qwen3moe (every layer is MoE)"};
  if (s.n_expert_used < 1 || s.n_expert_used > s.n_expert)
    return Error{"--experts-used must be between 1 and --experts"};
  if (s.n_ff_exp <= 0) return Error{"--expert-ffn must be > 0 for --arch qwen3moe"};
  const int64_t blk = type_traits(s.weight_type).block_elems;
  if (s.n_ff_exp % blk != 0) {
    return Error{"--expert-ffn must be a multiple of " + std::to_string(blk) +
                 " for --weight-type " + std::string(type_traits(s.weight_type).name)};
  }
  return {};
}

Status validate_deepseek2_routing(const MakeModelSpec& s) {
  if (s.n_expert < 0) return Error{"--experts must be >= 0"};
  if (s.n_expert == 0) {
    if (s.n_expert_used != 0 || s.n_expert_shared != 0 || s.n_ff_exp != 0 ||
        s.n_layer_dense_lead != 0 || s.n_group != 0 || s.n_group_used != 0 || s.probs_bias) {
      return Error{
          "--experts-used, --experts-shared, --expert-ffn, --dense-lead, --expert-groups, "
          "--expert-groups-used and --probs-bias need --experts"};
    }
    return {};
  }
  if (s.n_expert_used < 1 || s.n_expert_used > s.n_expert)
    return Error{"--experts-used must be between 1 and --experts"};
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
  if (s.sliding_window != 0) return Error{"--sliding-window needs --arch llama or qwen2"};
  if (s.n_ff_shexp != 0)
    return Error{"--shared-expert-ffn needs --arch qwen2moe (deepseek2: --experts-shared)"};
  if (s.rope_scaling != RopeScaling::kNone && s.rope_scaling != RopeScaling::kYarn)
    return Error{"--rope-scaling must be none or yarn for --arch deepseek2"};
  if (s.rope_scaling == RopeScaling::kYarn && !(s.yarn_log_multiplier > 0.0f)) {
    // Without it llama.cpp versions disagree on DeepSeek's YaRN attention scale.
    return Error{"--yarn-log-multiplier must be > 0 with --rope-scaling yarn for --arch deepseek2"};
  }
  if (s.rope_scaling != RopeScaling::kYarn && s.yarn_log_multiplier != 0.0f)
    return Error{"--yarn-log-multiplier needs --rope-scaling yarn"};
  KVW_RETURN_IF_ERROR(validate_deepseek2_routing(s));
  // Quantised rows are whole blocks: every row length (a matrix's input width) must be.
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

// phi3 (llama.cpp's llama_model_phi3): attn_output is [n_embd x n_embd], so heads are
// n_embd / n_head long; dense SwiGLU only; LongRoPE instead of the rope scaling types.
Status validate_phi3(const MakeModelSpec& s) {
  KVW_RETURN_IF_ERROR(refuse_deepseek2_flags(s));
  KVW_RETURN_IF_ERROR(validate_llama_shape(s));
  if (s.n_expert != 0 || s.n_ff_shexp != 0)
    return Error{"--experts needs another --arch than phi3"};
  if (s.rope_scaling != RopeScaling::kNone)
    return Error{"--rope-scaling: phi3 files carry LongRoPE factors instead (--longrope)"};
  if (s.n_rot < 0 || s.n_rot % 2 != 0 || s.n_rot > s.head_len())
    return Error{"--rope-dim must be even and at most the head length (0: the whole head)"};
  if (s.rope_orig_ctx < 0 || s.rope_orig_ctx > s.n_ctx)
    return Error{"--rope-orig-ctx must be between 0 (--context) and --context for --arch phi3"};
  if (s.sliding_window < 0) return Error{"--sliding-window must be >= 0"};
  return {};
}

}  // namespace kvw::maker
