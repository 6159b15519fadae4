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

// The keys convert_hf_to_gguf.py's Phi3MiniModel writes, in its order (not write_size_keys':
// original_context_length second, feed_forward_length before block_count): rope.dimension_count
// from partial_rotary_factor, sliding_window always (0: none), and with LongRoPE factors the
// attention factor sqrt(1 + ln(s) / ln(orig)), s = context / orig.
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

// llama.cpp's llama_model_phi3: attn_output is [n_embd x n_embd], so heads are n_embd / n_head
// long; dense SwiGLU only; LongRoPE instead of the rope scaling types.
Status validate_phi3(const MakeModelSpec& s) {
  KVW_RETURN_IF_ERROR(validate_llama_shape(s));
  if (s.rope_scaling != RopeScaling::kNone)
    return Error{"--rope-scaling: phi3 files carry LongRoPE factors instead (--longrope)"};
  if (s.n_rot < 0 || s.n_rot % 2 != 0 || s.n_rot > s.head_len())
    return Error{"--rope-dim must be even and at most the head length (0: the whole head)"};
  if (s.rope_orig_ctx < 0 || s.rope_orig_ctx > s.n_ctx)
    return Error{"--rope-orig-ctx must be between 0 (--context) and --context for --arch phi3"};
  if (s.sliding_window < 0) return Error{"--sliding-window must be >= 0"};
  return {};
}

// Phi-3.5-mini's structure (MHA, heads of 96 = n_embd / n_head, fused QKV and gate/up, LongRoPE
// from 4096 of 131072 with sliding_window 262144, untied, SentencePiece) at dim 128: heads of
// 32, LongRoPE from 256 of 8192 (the same factor 32, attn_factor 1.27), window twice the context.
MakeModelSpec phi3_tiny() {
  MakeModelSpec s;
  s.arch = "phi3";
  s.name = "phi3-tiny-random";
  s.n_embd = 128;
  s.n_layer = 2;
  s.n_head = 4;
  s.n_head_kv = 4;
  s.n_ff = 256;
  s.n_ctx = 8192;
  s.rope_orig_ctx = 256;
  s.sliding_window = 16384;
  s.longrope = true;
  return s;
}

// Phi-4-mini's (GQA 3:1, heads of 128 with 96 rotated, LongRoPE from 4096 of 131072, no window,
// tied, byte-level BPE) at dim 192: heads of 32 with 24 rotated.
MakeModelSpec phi4_mini_tiny() {
  MakeModelSpec s = phi3_tiny();
  s.name = "phi4-mini-tiny-random";
  s.n_embd = 192;
  s.n_head = 6;
  s.n_head_kv = 2;
  s.n_rot = 24;
  s.n_ff = 512;
  s.sliding_window = 0;
  s.tied = true;
  s.vocab_type = "bpe";
  return s;
}

constexpr MakerPreset kPresets[] = {{"phi3-tiny", phi3_tiny}, {"phi4-mini-tiny", phi4_mini_tiny}};

}  // namespace

const ModelFamily kPhi3{.arch = "phi3",
                        .rope_style = RopeStyle::kNeox,
                        .gate_up_fused = true,
                        .qkv_fused = true,
                        .hf = {.model_types = {"phi3"}},
                        .declare_tensors = declare_phi3,
                        .maker = {.presets = kPresets,
                                  .flags = kMakeWindow | kMakeLongRope,
                                  .validate = validate_phi3,
                                  .write_keys = write_phi3_keys,
                                  .spm_eos_token = "<|endoftext|>"}};

// This file's families, in the order the registry lists them (families.cc).
std::span<const ModelFamily* const> phi3_families() {
  static constexpr const ModelFamily* kThisFile[] = {&kPhi3};
  return kThisFile;
}

}  // namespace kvw::families
