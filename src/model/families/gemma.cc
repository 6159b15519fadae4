// model/families/gemma.cc: Gemma-2 ("gemma2") and Gemma-3 text ("gemma3").
#include <cmath>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/families/family.h"
#include "model/families/tensor_table.h"
#include "model/model_maker.h"

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

// The keys convert_hf_to_gguf.py's Gemma2Model / Gemma3Model write: the common ones, key and
// value length, no rope.dimension_count; gemma2 no rope.freq_base (10000 is the default) but
// both soft-capping keys and the window; gemma3 the final cap, window and local base if any.
void write_gemma_keys(const MakeModelSpec& s, GgufWriter& w) {
  const std::string a = s.arch + ".";
  write_size_keys(s, a, s.n_ff, s.n_head_kv, w);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", s.norm_eps);
  w.set_u32(a + "attention.key_length", s.head_len());
  w.set_u32(a + "attention.value_length", s.head_len());
  if (s.arch == "gemma2") {
    w.set_f32(a + "attn_logit_softcapping", s.attn_softcap);
  } else {
    w.set_f32(a + "rope.freq_base", s.rope_theta);
    if (s.rope_theta_swa > 0) w.set_f32(a + "rope.freq_base_swa", s.rope_theta_swa);
  }
  if (s.final_softcap > 0) w.set_f32(a + "final_logit_softcapping", s.final_softcap);
  if (s.sliding_window > 0) w.set_u32(a + "attention.sliding_window", s.sliding_window);
  if (s.swa_period > 0) w.set_u32(a + "attention.sliding_window_pattern", s.swa_period);
  write_rope_scaling_keys(s, a, w);
}

// llama.cpp's loaders: dense GeGLU layers, no biases or experts; gemma2 is always tied
// (llama.cpp reads token_embd as the output even when output.weight exists), always windowed
// and soft-capped.
Status validate_gemma(const MakeModelSpec& s) {
  KVW_RETURN_IF_ERROR(validate_llama_shape(s));
  if (s.sliding_window < 0 || s.swa_period < 0 || s.rope_theta_swa < 0 || s.final_softcap < 0)
    return Error{"--sliding-window, --swa-period, --rope-theta-swa, --final-softcap must be >= 0"};
  if (s.arch == "gemma3") return {};
  if (!s.tied) return Error{"--tied=false: gemma2 files never carry output.weight"};
  if (s.sliding_window <= 0) return Error{"--sliding-window must be > 0 for --arch gemma2"};
  if (!(s.attn_softcap > 0) || !(s.final_softcap > 0))
    return Error{"--attn-softcap and --final-softcap must be > 0 for --arch gemma2"};
  return {};
}

// Gemma-2-2B's structure ("gemma2-tiny": layers alternating local and global, heads longer than
// dim / heads, GQA 2:1, soft-capping 50 / 30 as its config.json) or Gemma-3-1B's ("gemma3-tiny":
// five local layers then a global one, MQA, Q/K norms, rope bases 1e6 / 1e4, no soft-capping),
// at dim 128 with heads of 64 and a window of 16 so that short tests cross it.
MakeModelSpec gemma_tiny(bool gemma3) {
  MakeModelSpec s;
  s.arch = gemma3 ? "gemma3" : "gemma2";
  s.name = gemma3 ? "gemma3-tiny-random" : "gemma2-tiny-random";
  s.n_embd = 128;
  s.n_layer = gemma3 ? 6 : 4;
  s.n_head = 4;
  s.n_head_kv = gemma3 ? 1 : 2;
  s.head_dim = 64;
  s.n_ff = 256;
  s.norm_eps = 1e-6f;
  s.sliding_window = 16;
  s.tied = true;
  if (gemma3) {
    s.rope_theta = 1000000.0f;
    s.rope_theta_swa = 10000.0f;
  } else {
    s.attn_softcap = 50.0f;
    s.final_softcap = 30.0f;
  }
  return s;
}

MakeModelSpec gemma2_tiny() {
  return gemma_tiny(false);
}
MakeModelSpec gemma3_tiny() {
  return gemma_tiny(true);
}

constexpr MakerPreset kGemma2Presets[] = {{"gemma2-tiny", gemma2_tiny}};
constexpr MakerPreset kGemma3Presets[] = {{"gemma3-tiny", gemma3_tiny}};
// gemma3 also takes --rope-theta-swa (gemma2 files have one rope base), gemma2 --attn-softcap.
constexpr uint32_t kGemmaFlags = kMakeHeadDim | kMakeWindow | kMakeGemma;

}  // namespace

const ModelFamily kGemma2{
    .arch = "gemma2",
    .rope_style = RopeStyle::kNeox,
    .post_norms = true,
    .scale_embd = true,
    .local_rope = true,
    .hf = {.model_types = {"gemma2"}, .windows = HfWindows::kEveryOther, .tied_default = true},
    .read_keys = read_gemma,
    .declare_tensors = declare_gemma,
    .maker = {.presets = kGemma2Presets,
              .flags = kGemmaFlags | kMakeAttnSoftcap,
              .validate = validate_gemma,
              .write_keys = write_gemma_keys,
              .add_space_prefix = false}};
const ModelFamily kGemma3{
    .arch = "gemma3",
    .rope_style = RopeStyle::kNeox,
    .qk_norm = true,
    .post_norms = true,
    .scale_embd = true,
    .local_rope = true,
    .hf = {.model_types = {"gemma3", "gemma3_text"}, .windows = HfWindows::kPeriodic},
    .read_keys = read_gemma,
    .declare_tensors = declare_gemma,
    .maker = {.presets = kGemma3Presets,
              .flags = kGemmaFlags | kMakeLocalRopeBase,
              .validate = validate_gemma,
              .write_keys = write_gemma_keys,
              .add_space_prefix = false}};

// This file's families, in the order the registry lists them (families.cc).
std::span<const ModelFamily* const> gemma_families() {
  static constexpr const ModelFamily* kThisFile[] = {&kGemma2, &kGemma3};
  return kThisFile;
}

}  // namespace kvw::families
