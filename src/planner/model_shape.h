// planner/model_shape.h: the architecture facts the memory planner needs, and the data types it
// sizes weights and KV caches in. A ModelShape comes from the catalogue, a Hugging Face
// config.json or a GGUF file (model_source.h); everything downstream is pure arithmetic on it.
// Plain value types; safe to copy and share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/kv_dtype.h"
#include "core/status.h"
#include "model/workspace_layout.h"

namespace kvw::planner {

// Which layers use a sliding window of `sliding_window` tokens (when `layer_window` is empty).
enum class WindowPattern {
  kNone,        // every layer attends to the whole sequence
  kAll,         // every layer is windowed (Mistral-7B-v0.1)
  kEveryOther,  // even layers windowed, odd layers global (Gemma-2: layer 0 is local)
  kPeriodic,    // layer l windowed when l % window_period < window_period - 1 (Gemma-3: 6)
};

// Extra facts only a GGUF file gives; they make kvwarden's own engine budget exact.
struct GgufFacts {
  std::string path;           // the file, as given
  uint64_t weight_bytes = 0;  // sum of every tensor's bytes in the file
  uint64_t num_params = 0;    // sum of every tensor's elements
  // The engine's dimensions and matmul needs, as Model::Model reads them from the same file:
  // its workspace and KV rows are workspace_layout() / kv_bytes_per_token_layer() of these.
  ModelDims dims;
  uint64_t routed_expert_bytes = 0;  // ffn_{gate,up,down}_exps tensors, all experts
  // Weight bytes one single-sequence decode step streams: every tensor but the embedding (tied:
  // it is the output head), with only expert_used_count of expert_count routed experts.
  uint64_t decode_bytes_per_token = 0;
  std::string weight_type_summary;  // "q4_K x 155, f32 x 45"
};

struct ModelShape {
  std::string name;          // catalogue key or file name
  std::string hf_id;         // "meta-llama/Llama-2-7b-hf"; used in recommended flags
  std::string source;        // where the numbers come from
  bool unconfirmed = false;  // some value not seen in a primary copy of this model's config
  std::string note;          // what is unconfirmed or approximated
  std::string arch;          // "llama", "qwen2", "qwen3", "qwen3_moe", "mistral", "mixtral",
                             // "gemma2", "gemma3", "deepseek_v2", "deepseek_v3"

  int64_t n_layer = 0;    // decoder layers (DeepSeek-V3's extra MTP layer is not counted)
  int64_t n_embd = 0;     // hidden_size
  int64_t n_head = 0;     // attention heads (queries)
  int64_t n_kv_head = 0;  // key/value heads: == n_head MHA, 1 MQA, in between GQA
  int64_t head_dim = 0;   // per-head dimension of K and V (non-MLA)
  int64_t n_ff = 0;       // dense MLP intermediate size
  int64_t n_vocab = 0;
  int64_t max_position = 0;      // max_position_embeddings (trained context, after rope scaling)
  bool tied_embeddings = false;  // output head reuses the embedding matrix
  bool qkv_bias = false;         // Qwen2: biases on q, k, v projections
  bool qk_norm = false;          // Qwen3: RMSNorm on q and k heads
  // Rotated dims per head (partial rotary, e.g. Phi-4-mini's 0.75); 0: all of head_dim (MLA:
  // qk_rope_head_dim). Set from GGUF files; catalogue entries leave it 0.
  int64_t rope_dims = 0;

  int64_t sliding_window = 0;  // tokens; 0 = none
  WindowPattern window_pattern = WindowPattern::kNone;
  int64_t window_period = 0;  // kPeriodic: one global layer every window_period
  // Windowed layers rotate with their own RoPE (Gemma-2/3): kvwarden's engine keeps a second
  // cos/sin row per token in its workspace.
  bool local_rope = false;
  // Hybrid stacks: when non-empty, one entry per layer overriding the pattern:
  // 0 = full attention, > 0 = sliding window of that many tokens, -1 = no KV cache (a linear
  // attention or recurrent layer, whose fixed state is not modelled here).
  std::vector<int64_t> layer_window;

  // Multi-head latent attention (DeepSeek-V2/V3). kv_lora_rank > 0 switches the KV cache to one
  // latent of (kv_lora_rank + qk_rope_head_dim) elements per layer per token.
  int64_t kv_lora_rank = 0;
  int64_t q_lora_rank = 0;  // 0: queries use a plain projection
  int64_t qk_rope_head_dim = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t v_head_dim = 0;

  // Mixture of experts. n_routed_experts > 0 makes layers [first_k_dense, n_layer) MoE layers.
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t n_experts_per_tok = 0;
  int64_t moe_ff = 0;         // per-expert intermediate size
  int64_t first_k_dense = 0;  // leading dense layers (DeepSeek first_k_dense_replace)
  // Width of the shared-expert FFN when it is not n_shared_experts x moe_ff (Qwen-MoE's
  // shared_expert_intermediate_size; GGUF expert_shared_feed_forward_length).
  int64_t shared_expert_ff = 0;

  std::string default_weight_dtype = "bf16";  // torch_dtype of the published checkpoint
  std::optional<GgufFacts> gguf;              // set when read from a GGUF file

  bool is_mla() const { return kv_lora_rank > 0; }
  bool is_moe() const { return n_routed_experts > 0; }
  int64_t shared_ff() const {
    return shared_expert_ff > 0 ? shared_expert_ff : n_shared_experts * moe_ff;
  }
  // Window of layer l: 0 full attention, > 0 window tokens, -1 no KV cache.
  int64_t window_of_layer(int64_t l) const;
  // "MHA", "GQA", "MQA" or "MLA".
  const char* attention_kind() const;
  Status validate() const;  // messages name the model and the field
};

// A data type for weights or KV entries, as bytes per `block_elems` elements (ggml-style
// blocks make 4.5-bit formats exact: q4_K is 144 bytes per 256 weights).
struct Dtype {
  std::string name;
  int64_t block_elems = 1;
  int64_t block_bytes = 2;
  // Bytes of n elements, rounded up to whole blocks.
  uint64_t bytes(uint64_t n) const {
    return (n + (uint64_t)block_elems - 1) / (uint64_t)block_elems * (uint64_t)block_bytes;
  }
  double bits_per_elem() const { return 8.0 * (double)block_bytes / (double)block_elems; }
};

// Weight dtypes: f32, f16, bf16, fp8, int8, int4 (AWQ/GPTQ with 128-weight groups: 4 bits +
// an f16 scale + a 4-bit zero per group = 4.156 bits), and the GGUF types q8_0, q4_0, q4_K,
// q5_K, q6_K with their exact block sizes.
Result<Dtype> parse_weight_dtype(const std::string& name);

// KV cache dtypes are core/kv_dtype.h's KvDtype (fp8 included); "auto" is resolved by the
// caller (cmd_plan: the model's activation dtype).

}  // namespace kvw::planner
