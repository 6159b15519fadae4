// model/families/family.h: one description per architecture (GGUF general.architecture): the
// switches hparams_from_gguf applies from the table and the keys and defaults only that family
// has. One small file per family in this folder defines its ModelFamily; families.cc lists them.
// Adding a family: its file here, a line in families.cc, and its tests.
// Immutable tables; safe to read from any thread.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "model/hparams.h"

namespace kvw {

class GgufFile;

struct ModelFamily {
  std::string_view arch;                      // general.architecture, the GGUF key prefix
  RopeStyle rope_style = RopeStyle::kNormal;  // kNormal: llama's permuted pairs; kNeox: HF's
  bool qk_norm = false;                       // per-head attn_{q,k}_norm before RoPE
  bool gate_up_fused = false;                 // ffn_up holds the gate rows, then the up rows
  // The key and value head lengths are MLA's, read by read_keys (else value_length must equal
  // key_length).
  bool mla = false;
  // Tensor names the loader reads: the FFN input norm (gpt-oss: post_attention_norm), and
  // whether the shared expert has a sigmoid gate (ffn_gate_inp_shexp, qwen2moe).
  std::string_view ffn_norm = "ffn_norm";
  bool shared_expert_gate = false;
  // The family's own keys and defaults, read after the shared ones (sizes, rope, expert counts,
  // the tied output, Q/K/V biases and the switches above); `prefix` is "<arch>.". Errors name
  // the file and key. Null: nothing more.
  Status (*read_keys)(const GgufFile& f, const std::string& prefix, ModelHParams& hp) = nullptr;
};

// Every supported family, in the order error messages list them.
std::span<const ModelFamily* const> all_families();
// The family of `arch`; nullptr when unsupported.
const ModelFamily* find_family(std::string_view arch);
// "llama, qwen2, ...": the supported architectures for error messages.
std::string supported_families();

namespace families {
// Optional GGUF keys, as every family reads them: absent keeps `out` (or errors when
// `required`); present with a wrong type or an integer outside [0, 2^30] errors naming the key.
Status read_int(const GgufFile& f, const std::string& key, int32_t& out, bool required);
Status read_float(const GgufFile& f, const std::string& key, float& out);
Status read_bool(const GgufFile& f, const std::string& key, bool& out);
}  // namespace families

}  // namespace kvw
