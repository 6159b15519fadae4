// model/families/qwen2.cc: Qwen2 / Qwen2.5 ("qwen2": NEOX rope, Q/K/V biases from the tensor
// table) and Qwen1.5-MoE / Qwen2-MoE ("qwen2moe").
#include "gguf/gguf_file.h"
#include "model/families/family.h"
#include "model/families/tensor_table.h"

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

}  // namespace

// Listed in families.cc.
extern const ModelFamily kQwen2, kQwen2Moe;

const ModelFamily kQwen2{
    .arch = "qwen2",
    .rope_style = RopeStyle::kNeox,
    .qkv_bias = true,
    .tiny_preset = "qwen2-tiny",
    .hf = {.model_types = {"qwen2"}, .windows = HfWindows::kWhenEnabled, .qkv_bias_default = true},
    .declare_tensors = declare_qwen2};
const ModelFamily kQwen2Moe{.arch = "qwen2moe",
                            .rope_style = RopeStyle::kNeox,
                            .shared_expert_gate = true,
                            .qkv_bias = true,
                            .tiny_preset = "qwen2moe-tiny",
                            .hf = {.model_types = {"qwen2_moe"},
                                   .windows = HfWindows::kWhenEnabled,
                                   .qkv_bias_default = true},
                            .read_keys = read_qwen2moe,
                            .declare_tensors = declare_qwen2moe};

}  // namespace kvw::families
