// model/families/llama.cc: Llama and the files that share its layout ("llama"): Llama 1-3,
// Mistral (attention.sliding_window on every layer), Mixtral-style MoE (expert_count; experts
// feed_forward_length wide, softmax top-k renormalised: hparams.cc's shared defaults). Its GGUF
// Q/K weights are permuted on conversion, so RoPE rotates adjacent pairs.
#include "gguf/gguf_writer.h"
#include "model/families/family.h"
#include "model/families/tensor_table.h"
#include "model/model_maker.h"

namespace kvw {

void write_llama_layout_keys(const MakeModelSpec& s, bool head_len_keys, GgufWriter& w) {
  const std::string a = s.arch + ".";
  write_size_keys(s, a, s.n_ff, s.n_head_kv, w);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", s.norm_eps);
  w.set_f32(a + "rope.freq_base", s.rope_theta);
  if (head_len_keys) {
    // No rope.dimension_count: readers rotate the whole key_length head.
    w.set_u32(a + "attention.key_length", s.head_len());
    w.set_u32(a + "attention.value_length", s.head_len());
  } else {
    w.set_u32(a + "rope.dimension_count", s.head_len());
  }
  if (s.sliding_window > 0) w.set_u32(a + "attention.sliding_window", s.sliding_window);
  if (s.n_expert > 0) {
    w.set_u32(a + "expert_count", s.n_expert);
    w.set_u32(a + "expert_used_count", s.n_expert_used);
  }
}

namespace families {
namespace {

void declare_llama(const ModelHParams& hp, TensorTable& t) {
  declare_llama_like(hp, /*shared_gate=*/false, t);
}

void write_llama_keys(const MakeModelSpec& s, GgufWriter& w) {
  write_llama_layout_keys(s, /*head_len_keys=*/false, w);
  write_rope_scaling_keys(s, "llama.", w);
}

// make-model's default dims (model_maker.h).
MakeModelSpec tiny() {
  return {};
}

MakeModelSpec tinyllama() {
  MakeModelSpec s;
  s.name = "tinyllama-1.1b-shaped-random";
  s.n_embd = 2048;
  s.n_layer = 22;
  s.n_head = 32;
  s.n_head_kv = 4;
  s.n_ff = 5632;
  s.n_vocab = 32000;
  s.n_ctx = 2048;
  return s;
}

// Tiny with 8 experts, 2 per token, as Mixtral-8x7B routes.
MakeModelSpec mixtral_tiny() {
  MakeModelSpec s;
  s.name = "mixtral-tiny-random";
  s.n_layer = 4;
  s.n_expert = 8;
  s.n_expert_used = 2;
  return s;
}

// Mixtral-8x7B's proportions (GQA 4:1, ffn 3.5 x dim, 8 experts, top-2) at dim 1024: 0.79B
// parameters, 0.26B active per token.
MakeModelSpec mixtral_1b() {
  MakeModelSpec s;
  s.name = "mixtral-1b-shaped-random";
  s.n_embd = 1024;
  s.n_layer = 8;
  s.n_head = 16;
  s.n_head_kv = 4;
  s.n_ff = 3584;
  s.n_expert = 8;
  s.n_expert_used = 2;
  s.n_vocab = 32000;
  s.n_ctx = 4096;
  return s;
}

constexpr MakerPreset kPresets[] = {{"tiny", tiny},
                                    {"tinyllama-1.1b", tinyllama},
                                    {"mixtral-tiny", mixtral_tiny},
                                    {"mixtral-1b", mixtral_1b}};

}  // namespace

const ModelFamily kLlama{.arch = "llama",
                         .hf = {.model_types = {"llama", "mistral", "mixtral"}},
                         .declare_tensors = declare_llama,
                         .maker = {.presets = kPresets,
                                   .flags = kMakeExperts | kMakeWindow,
                                   .validate = validate_llama_shape,
                                   .write_keys = write_llama_keys}};

// This file's families, in the order the registry lists them (families.cc).
std::span<const ModelFamily* const> llama_families() {
  static constexpr const ModelFamily* kThisFile[] = {&kLlama};
  return kThisFile;
}

}  // namespace families
}  // namespace kvw
