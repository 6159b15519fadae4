// model/families/phi3.cc: Phi-3 / 3.5 / 4-mini ("phi3", llama.cpp's llama_model_phi3): fused
// attn_qkv (the loader splits its rows), ffn_up holding the gate rows then the up rows, NEOX
// rope, and LongRoPE factors when the file has them (model.h's rope_factors).
#include <cmath>

#include "gguf/gguf_writer.h"
#include "model/families/family.h"
#include "model/families/tensor_table.h"
#include "model/model_maker.h"

namespace kvw::families {
namespace {

// Llama's layout with attn_qkv (or attn_q/k/v) and the fused ffn_up; the LongRoPE factors
// first, as make-model draws them.
void declare_phi3(const ModelHParams& hp, TensorTable& t) {
  declare_llama_like(hp, /*shared_gate=*/false, t);
}

// The keys convert_hf_to_gguf.py's Phi3MiniModel writes: rope.dimension_count from
// partial_rotary_factor, original_context_length and sliding_window always (0: none), and
// with LongRoPE factors the attention factor sqrt(1 + ln(s) / ln(orig)), s = context / orig.
void write_phi3_keys(const MakeModelSpec& s, GgufWriter& w) {
  const std::string a = "phi3.";
  const int32_t orig = s.rope_orig_ctx > 0 ? s.rope_orig_ctx : s.n_ctx;
  w.set_u32(a + "context_length", s.n_ctx);
  w.set_u32(a + "rope.scaling.original_context_length", orig);
  w.set_u32(a + "embedding_length", s.n_embd);
  w.set_u32(a + "feed_forward_length", s.n_ff);
  w.set_u32(a + "block_count", s.n_layer);
  w.set_u32(a + "attention.head_count", s.n_head);
  w.set_u32(a + "attention.head_count_kv", s.n_head_kv);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", s.norm_eps);
  w.set_u32(a + "rope.dimension_count", s.n_rot > 0 ? s.n_rot : s.head_len());
  w.set_f32(a + "rope.freq_base", s.rope_theta);
  w.set_u32(a + "attention.sliding_window", s.sliding_window);
  if (!s.longrope) return;
  const double scale = (double)s.n_ctx / orig;
  const double attn = scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log((double)orig)) : 1.0;
  w.set_f32(a + "rope.scaling.attn_factor", (float)attn);
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
                        .declare_tensors = declare_phi3,
                        .write_keys = write_phi3_keys};

}  // namespace kvw::families
