// model/families/family.h: one description per architecture (GGUF general.architecture): the
// switches hparams_from_gguf applies, the keys and defaults only that family has, the tensors
// its files hold (which the loader checks and make-model writes: tensor_table.h), how the
// planner reads its Hugging Face config.json, and what make-model writes for it (presets, the
// flags it takes, its checks, keys and tokenizer). One small file per family in this folder
// defines its ModelFamily and `<file>_families()`, which the registry (families.cc) lists, the
// build finding the files. Adding a family: its file here and its tests (README "Adding a
// family").
// Immutable tables; safe to read from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "model/hparams.h"

namespace kvw {

class GgufFile;
class GgufWriter;
class TensorTable;
struct MakeModelSpec;

// Which layers a config.json's sliding_window applies to when it has no layer_types.
enum class HfWindows {
  kAll,          // every layer (Mistral, Phi-3)
  kEveryOther,   // even layers (Gemma-2, gpt-oss)
  kPeriodic,     // five in six, or sliding_window_pattern's period (Gemma-3)
  kWhenEnabled,  // every layer, only when use_sliding_window is true (Qwen2/3)
};

// How the planner reads the family's Hugging Face config.json (planner/model_source.cc).
struct HfConfigRules {
  std::array<std::string_view, 3> model_types{};  // config.json model_type values
  HfWindows windows = HfWindows::kAll;
  bool tied_default = false;      // tie_word_embeddings when absent (gemma2: always tied)
  bool qkv_bias_default = false;  // attention_bias when absent (Qwen2 has biases, no key)
};

// make-model flags only some families read (MakerRules::flags). A spec that sets one for a
// family without its bit is refused naming the flag and the families that take it.
enum MakerFlag : uint32_t {
  kMakeHeadDim = 1u << 0,        // --head-dim
  kMakeExperts = 1u << 1,        // --experts
  kMakeExpertFfn = 1u << 2,      // --expert-ffn
  kMakeSharedExpert = 1u << 3,   // --shared-expert-ffn
  kMakeWindow = 1u << 4,         // --sliding-window
  kMakeMla = 1u << 5,            // deepseek2's MLA and routing flags
  kMakeGemma = 1u << 6,          // --final-softcap, --swa-period
  kMakeAttnSoftcap = 1u << 7,    // --attn-softcap
  kMakeLocalRopeBase = 1u << 8,  // --rope-theta-swa
  kMakeLongRope = 1u << 9,       // --rope-dim, --longrope
  kMakeExpertType = 1u << 10,    // --expert-type
};

// A named make-model shape (make-model --preset).
struct MakerPreset {
  std::string_view name;
  MakeModelSpec (*make)() = nullptr;
};

// What make-model writes for the family (model/model_maker.cc reads only this).
struct MakerRules {
  // Its named shapes; the first is the tiny file the family tests write.
  std::span<const MakerPreset> presets;
  uint32_t flags = 0;  // the MakerFlag bits of the flags it reads
  // Its checks of a spec, after the shared ones (the flags above, vocabulary, types, GGUF
  // version); messages name the make-model flag. Required.
  Status (*validate)(const MakeModelSpec& s) = nullptr;
  // The keys llama.cpp's converter writes for the family, in its order. Required.
  void (*write_keys)(const MakeModelSpec& s, GgufWriter& w) = nullptr;
  // The tokenizer: byte-level BPE's tokenizer.ggml.pre; the chat template (null: ChatML with a
  // byte-level vocabulary, none with SentencePiece); the control token a SentencePiece
  // vocabulary ends in as its eos (phi3: llama.cpp sets attributes on it by name); and
  // tokenizer.ggml.add_space_prefix (false as the Gemma converters write).
  std::string_view bpe_pre = "llama3";
  const char* chat_template = nullptr;
  std::string_view spm_eos_token;
  bool add_space_prefix = true;
};

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
  // gemma2/3: post_attention_norm and post_ffw_norm on each block's output, and token
  // embeddings scaled by sqrt(n_embd).
  bool post_norms = false;
  bool scale_embd = false;
  // Windowed layers rotate with their own rope table when windowed (gemma2/3; the planner's
  // workspace counts its second cos/sin row).
  bool local_rope = false;
  // What make-model writes: attn_{q,k,v}.bias (the loader takes them from any file that has
  // them), and one fused attn_qkv instead of attn_q/k/v (the loader takes either).
  bool qkv_bias = false;
  bool qkv_fused = false;
  HfConfigRules hf;
  // The family's own keys and defaults, read after the shared ones (sizes, rope, expert counts,
  // the tied output, Q/K/V biases and the switches above); `prefix` is "<arch>.". Errors name
  // the file and key. Null: nothing more.
  Status (*read_keys)(const GgufFile& f, const std::string& prefix, ModelHParams& hp) = nullptr;
  // The tensors of a model of this family, in make-model's order (tensor_table.h). Required.
  void (*declare_tensors)(const ModelHParams& hp, TensorTable& t) = nullptr;
  MakerRules maker;

  // The make-model preset of a tiny file of this family (tests enumerate families through it).
  std::string_view tiny_preset() const {
    return maker.presets.empty() ? std::string_view() : maker.presets.front().name;
  }
};

// make-model: the size keys every converter writes first, in its order (context, embedding,
// blocks, FFN width, heads, KV heads) under `prefix` ("<arch>."); FFN width and KV heads as the
// family stores them.
void write_size_keys(const MakeModelSpec& s, const std::string& prefix, int64_t n_ff,
                     int64_t n_head_kv, GgufWriter& w);
// make-model: the llama converter's keys, which the Qwen families share, up to the experts: the
// size keys, RMS epsilon, rope base, the head length (rope.dimension_count; key_length and
// value_length when `head_len_keys`, as Qwen3's converter writes head_dim), the window and the
// expert counts. The family adds its own keys, then write_rope_scaling_keys.
void write_llama_layout_keys(const MakeModelSpec& s, bool head_len_keys, GgufWriter& w);

// Every supported family, in the order error messages list them: files by name, each file's
// families in its order.
std::span<const ModelFamily* const> all_families();
// The family of `arch`; nullptr when unsupported.
const ModelFamily* find_family(std::string_view arch);
// The family whose Hugging Face model_type (config.json) or GGUF architecture is `name`;
// nullptr when none.
const ModelFamily* find_family_by_model_type(std::string_view name);
// "llama, qwen2, ...": the supported architectures for error messages.
std::string supported_families();
// "qwen3, gemma2 or gpt-oss": the families whose make-model rules take `maker_flag` (MakerFlag).
std::string families_taking(uint32_t maker_flag);

namespace families {
// Optional GGUF keys, as every family reads them: absent keeps `out` (or errors when
// `required`); present with a wrong type or an integer outside [0, 2^30] errors naming the key.
Status read_int(const GgufFile& f, const std::string& key, int32_t& out, bool required);
Status read_float(const GgufFile& f, const std::string& key, float& out);
Status read_bool(const GgufFile& f, const std::string& key, bool& out);
}  // namespace families

}  // namespace kvw
