// model/families/qwen3.cc: Qwen3 dense ("qwen3") and MoE ("qwen3moe"): per-head Q/K norms
// (llama.cpp requires both; the loader checks each layer), NEOX rope, explicit key_length.
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/families/family.h"
#include "model/families/tensor_table.h"
#include "model/model_maker.h"

namespace kvw::families {
namespace {

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

void declare_qwen3(const ModelHParams& hp, TensorTable& t) {
  declare_llama_like(hp, /*shared_gate=*/false, t);
}

// As convert_hf_to_gguf.py: config.json's head_dim as key and value length, no
// rope.dimension_count; qwen3moe adds the experts' width after their counts.
void write_qwen3_keys(const MakeModelSpec& s, GgufWriter& w) {
  const std::string a = s.arch + ".";
  write_llama_layout_keys(s, /*head_len_keys=*/true, w);
  if (s.n_expert > 0) w.set_u32(a + "expert_feed_forward_length", s.n_ff_exp);
  write_rope_scaling_keys(s, a, w);
}

// llama.cpp's LLM_ARCH_QWEN3MOE loader: qwen3 attention, every layer routed experts of
// --expert-ffn with renormalised top-k weights, no shared expert, output tied or not.
Status validate_qwen3moe(const MakeModelSpec& s) {
  KVW_RETURN_IF_ERROR(validate_llama_shape(s));
  if (s.n_expert <= 0)
    return Error{"--experts must be > 0 for --arch qwen3moe (every layer is MoE)"};
  if (s.n_ff_exp <= 0) return Error{"--expert-ffn must be > 0 for --arch qwen3moe"};
  const int64_t blk = type_traits(s.weight_type).block_elems;
  if (s.n_ff_exp % blk != 0) {
    return Error{"--expert-ffn must be a multiple of " + std::to_string(blk) +
                 " for --weight-type " + std::string(type_traits(s.weight_type).name)};
  }
  return {};
}

// Qwen3-0.6B's structure (heads of 128 while n_embd / n_head is 64, GQA 2:1, per-head Q/K
// RMSNorm, no biases, tied output, eps 1e-6, theta 1e6) at dim 128 with heads of 64.
MakeModelSpec qwen3_tiny() {
  MakeModelSpec s;
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

// Qwen3-30B-A3B's structure (qwen3 attention, 128 experts top-8 renormalised, no shared
// expert, untied) at dim 128: 16 experts of 64, top-4, heads of 64.
MakeModelSpec qwen3moe_tiny() {
  MakeModelSpec s = qwen3_tiny();
  s.arch = "qwen3moe";
  s.name = "qwen3moe-tiny-random";
  s.tied = false;
  s.n_expert = 16;
  s.n_expert_used = 4;
  s.n_ff_exp = 64;
  return s;
}

constexpr MakerPreset kQwen3Presets[] = {{"qwen3-tiny", qwen3_tiny}};
constexpr MakerPreset kQwen3MoePresets[] = {{"qwen3moe-tiny", qwen3moe_tiny}};

}  // namespace

const ModelFamily kQwen3{.arch = "qwen3",
                         .rope_style = RopeStyle::kNeox,
                         .qk_norm = true,
                         .hf = {.model_types = {"qwen3"}, .windows = HfWindows::kWhenEnabled},
                         .declare_tensors = declare_qwen3,
                         .maker = {.presets = kQwen3Presets,
                                   .flags = kMakeHeadDim,
                                   .validate = validate_llama_shape,
                                   .write_keys = write_qwen3_keys,
                                   .bpe_pre = "qwen2",
                                   .chat_template = kChatMlTemplate}};
const ModelFamily kQwen3Moe{
    .arch = "qwen3moe",
    .rope_style = RopeStyle::kNeox,
    .qk_norm = true,
    .hf = {.model_types = {"qwen3_moe"}, .windows = HfWindows::kWhenEnabled},
    .read_keys = read_qwen3moe,
    .declare_tensors = declare_qwen3,
    .maker = {.presets = kQwen3MoePresets,
              .flags = kMakeHeadDim | kMakeExperts | kMakeExpertFfn,
              .validate = validate_qwen3moe,
              .write_keys = write_qwen3_keys,
              .bpe_pre = "qwen2",
              .chat_template = kChatMlTemplate}};

// This file's families, in the order the registry lists them (families.cc).
std::span<const ModelFamily* const> qwen3_families() {
  static constexpr const ModelFamily* kThisFile[] = {&kQwen3, &kQwen3Moe};
  return kThisFile;
}

}  // namespace kvw::families
