// model/families/qwen2.cc: Qwen2 / Qwen2.5 ("qwen2": NEOX rope, Q/K/V biases from the tensor
// table) and Qwen1.5-MoE / Qwen2-MoE ("qwen2moe").
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/families/family.h"
#include "model/families/tensor_table.h"
#include "model/model_maker.h"

namespace kvw::families {
namespace {

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

void declare_qwen2(const ModelHParams& hp, TensorTable& t) {
  declare_llama_like(hp, /*shared_gate=*/false, t);
}

// The shared expert's sigmoid gate (ffn_gate_inp_shexp) before its projections.
void declare_qwen2moe(const ModelHParams& hp, TensorTable& t) {
  declare_llama_like(hp, /*shared_gate=*/true, t);
}

void write_qwen2_keys(const MakeModelSpec& s, GgufWriter& w) {
  write_llama_layout_keys(s, /*head_len_keys=*/false, w);
  write_rope_scaling_keys(s, "qwen2.", w);
}

// As convert_hf_to_gguf.py's Qwen2MoeModel writes them: the experts' widths after their counts.
void write_qwen2moe_keys(const MakeModelSpec& s, GgufWriter& w) {
  const std::string a = "qwen2moe.";
  write_llama_layout_keys(s, /*head_len_keys=*/false, w);
  w.set_u32(a + "expert_feed_forward_length", s.n_ff_exp);
  w.set_u32(a + "expert_shared_feed_forward_length", s.n_ff_shexp);
  write_rope_scaling_keys(s, a, w);
}

// llama.cpp's LLM_ARCH_QWEN2MOE loader: every layer routed experts of --expert-ffn plus a
// shared expert of --shared-expert-ffn; output.weight is required (no tying).
Status validate_qwen2moe(const MakeModelSpec& s) {
  KVW_RETURN_IF_ERROR(validate_llama_shape(s));
  if (s.tied) return Error{"--tied: qwen2moe files always carry output.weight"};
  if (s.n_expert <= 0)
    return Error{"--experts must be > 0 for --arch qwen2moe (every layer is MoE)"};
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

// Qwen2.5-0.5B's structure (GQA, q/k/v biases, tied output, eps 1e-6, theta 1e6, byte-level
// BPE with Qwen2's pre-tokenizer and ChatML) at dim 128.
MakeModelSpec qwen2_tiny() {
  MakeModelSpec s;
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

// Qwen1.5-MoE-A2.7B's structure at dim 128: GQA 2:1, q/k/v biases, every layer 8 routed experts
// of 64 (top-2, softmax probabilities not renormalised) plus a gated shared expert of 256 (=
// feed_forward_length, as Qwen1.5-MoE's intermediate_size equals its shared expert's width),
// byte-level BPE with Qwen2's pre-tokenizer and ChatML.
MakeModelSpec qwen2moe_tiny() {
  MakeModelSpec s = qwen2_tiny();
  s.arch = "qwen2moe";
  s.name = "qwen2moe-tiny-random";
  s.tied = false;
  s.n_expert = 8;
  s.n_expert_used = 2;
  s.n_ff_exp = 64;
  s.n_ff_shexp = 256;
  return s;
}

constexpr MakerPreset kQwen2Presets[] = {{"qwen2-tiny", qwen2_tiny}};
constexpr MakerPreset kQwen2MoePresets[] = {{"qwen2moe-tiny", qwen2moe_tiny}};

}  // namespace

const ModelFamily kQwen2{
    .arch = "qwen2",
    .rope_style = RopeStyle::kNeox,
    .qkv_bias = true,
    .hf = {.model_types = {"qwen2"}, .windows = HfWindows::kWhenEnabled, .qkv_bias_default = true},
    .declare_tensors = declare_qwen2,
    .maker = {.presets = kQwen2Presets,
              .flags = kMakeWindow,
              .validate = validate_llama_shape,
              .write_keys = write_qwen2_keys,
              .bpe_pre = "qwen2",
              .chat_template = kChatMlTemplate}};
const ModelFamily kQwen2Moe{.arch = "qwen2moe",
                            .rope_style = RopeStyle::kNeox,
                            .shared_expert_gate = true,
                            .qkv_bias = true,
                            .hf = {.model_types = {"qwen2_moe"},
                                   .windows = HfWindows::kWhenEnabled,
                                   .qkv_bias_default = true},
                            .read_keys = read_qwen2moe,
                            .declare_tensors = declare_qwen2moe,
                            .maker = {.presets = kQwen2MoePresets,
                                      .flags = kMakeExperts | kMakeExpertFfn | kMakeSharedExpert,
                                      .validate = validate_qwen2moe,
                                      .write_keys = write_qwen2moe_keys,
                                      .bpe_pre = "qwen2",
                                      .chat_template = kChatMlTemplate}};

// This file's families, in the order the registry lists them (families.cc).
std::span<const ModelFamily* const> qwen2_families() {
  static constexpr const ModelFamily* kThisFile[] = {&kQwen2, &kQwen2Moe};
  return kThisFile;
}

}  // namespace kvw::families
