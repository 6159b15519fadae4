// model/families/phi3.cc: Phi-3 / 3.5 / 4-mini ("phi3", llama.cpp's llama_model_phi3): fused
// attn_qkv (the loader splits its rows), ffn_up holding the gate rows then the up rows, NEOX
// rope, and LongRoPE factors when the file has them (model.h's rope_factors).
#include "model/families/family.h"
#include "model/families/tensor_table.h"

namespace kvw::families {
namespace {

// Llama's layout with attn_qkv (or attn_q/k/v) and the fused ffn_up; the LongRoPE factors
// first, as make-model draws them.
void declare_phi3(const ModelHParams& hp, TensorTable& t) {
  declare_llama_like(hp, /*shared_gate=*/false, t);
}

}  // namespace

// Listed in families.cc.
extern const ModelFamily kPhi3;

const ModelFamily kPhi3{.arch = "phi3",
                        .rope_style = RopeStyle::kNeox,
                        .gate_up_fused = true,
                        .qkv_fused = true,
                        .tiny_preset = "phi3-tiny",
                        .hf = {.model_types = {"phi3"}},
                        .declare_tensors = declare_phi3};

}  // namespace kvw::families
