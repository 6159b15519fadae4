// model/families/qwen3.cc: Qwen3 dense ("qwen3") and MoE ("qwen3moe"): per-head Q/K norms
// (llama.cpp requires both; the loader checks each layer), NEOX rope, explicit key_length.
#include "gguf/gguf_file.h"
#include "model/families/family.h"
#include "model/families/tensor_table.h"

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

}  // namespace

// Listed in families.cc.
extern const ModelFamily kQwen3, kQwen3Moe;

const ModelFamily kQwen3{.arch = "qwen3",
                         .rope_style = RopeStyle::kNeox,
                         .qk_norm = true,
                         .tiny_preset = "qwen3-tiny",
                         .hf = {.model_types = {"qwen3"}, .windows = HfWindows::kWhenEnabled},
                         .declare_tensors = declare_qwen3};
const ModelFamily kQwen3Moe{
    .arch = "qwen3moe",
    .rope_style = RopeStyle::kNeox,
    .qk_norm = true,
    .tiny_preset = "qwen3moe-tiny",
    .hf = {.model_types = {"qwen3_moe"}, .windows = HfWindows::kWhenEnabled},
    .read_keys = read_qwen3moe,
    .declare_tensors = declare_qwen3};

}  // namespace kvw::families
