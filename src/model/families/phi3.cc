// model/families/phi3.cc: Phi-3 / 3.5 / 4-mini ("phi3", llama.cpp's llama_model_phi3): fused
// attn_qkv (the loader splits its rows), ffn_up holding the gate rows then the up rows, NEOX
// rope, and LongRoPE factors when the file has them (model.h's rope_factors).
#include "model/families/family.h"

namespace kvw::families {

// Listed in families.cc.
extern const ModelFamily kPhi3;

const ModelFamily kPhi3{.arch = "phi3", .rope_style = RopeStyle::kNeox, .gate_up_fused = true};

}  // namespace kvw::families
