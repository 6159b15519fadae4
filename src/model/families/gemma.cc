// model/families/gemma.cc: Gemma-2 ("gemma2") and Gemma-3 text ("gemma3").
#include <cmath>

#include "gguf/gguf_file.h"
#include "model/families/family.h"
#include "model/families/tensor_table.h"

namespace kvw::families {
namespace {

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
  hp.ffn_act = FfnAct::kGeluTanh;
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

// Llama's layout with the post-attention and post-FFN norms (hp.gemma.post_norms).
void declare_gemma(const ModelHParams& hp, TensorTable& t) {
  declare_llama_like(hp, /*shared_gate=*/false, t);
}

}  // namespace

// Listed in families.cc.
extern const ModelFamily kGemma2, kGemma3;

const ModelFamily kGemma2{
    .arch = "gemma2",
    .rope_style = RopeStyle::kNeox,
    .post_norms = true,
    .local_rope = true,
    .tiny_preset = "gemma2-tiny",
    .hf = {.model_types = {"gemma2"}, .windows = HfWindows::kEveryOther, .tied_default = true},
    .read_keys = read_gemma,
    .declare_tensors = declare_gemma};
const ModelFamily kGemma3{
    .arch = "gemma3",
    .rope_style = RopeStyle::kNeox,
    .qk_norm = true,
    .post_norms = true,
    .local_rope = true,
    .tiny_preset = "gemma3-tiny",
    .hf = {.model_types = {"gemma3", "gemma3_text"}, .windows = HfWindows::kPeriodic},
    .read_keys = read_gemma,
    .declare_tensors = declare_gemma};

}  // namespace kvw::families
