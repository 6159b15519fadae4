// model/families/tensor_table.h: the tensors a family's file holds, declared once per family
// (names, ggml shapes from the hyper-parameters, which are optional) and read by the loader
// (which refuses a missing tensor or a wrong shape, naming it with expected vs found) and by
// make-model (which writes every required entry, in order, drawn as the entry says).
// Plain values; built per call, so safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/hparams.h"

namespace kvw {

// Which storage type make-model writes an entry in.
enum class TensorStore {
  kWeight,      // --weight-type (matrices)
  kF32,         // always f32 (norms, biases, routers, rope factors)
  kExpertType,  // --expert-type (gpt-oss's stacked experts)
};

// How make-model fills an entry. Values are drawn from one seeded stream in table order, so a
// seed always makes the same model.
enum class TensorFill {
  kUniform,       // center + uniform noise of standard deviation `std`
  kLongRopeLong,  // kUniform plus 20 x^2 over the pairs (LongRoPE's low-frequency growth)
  kMlaKvBSplit,   // attn_k_b: one attn_kv_b draw split into k_b (this entry) and v_b (the next)
  kMlaKvBSecond,  // attn_v_b: the second part of the preceding kMlaKvBSplit draw
};

struct TensorDecl {
  std::string name;            // "blk.3.attn_q.weight"
  std::vector<int64_t> shape;  // ggml order: shape[0] is the row length
  TensorStore store = TensorStore::kWeight;
  bool optional = false;  // the loader accepts its absence; make-model never writes it
  // make-model's draw: std 0 means 1 / sqrt(shape[0]) (activations stay of order one).
  float center = 0.0f;
  float std = 0.0f;
  TensorFill fill = TensorFill::kUniform;
};

// An ordered list of declarations with lookup by name.
class TensorTable {
 public:
  // Matrix of n_rows x n_in (ggml [n_in, n_rows]).
  TensorDecl& matrix(const std::string& name, int64_t n_in, int64_t n_rows, float std = 0.0f);
  // n_expert stacked matrices (ggml [n_in, n_rows, n_expert]).
  TensorDecl& experts(const std::string& name, int64_t n_in, int64_t n_rows, int64_t n_expert,
                      float std = 0.0f);
  // f32 vector of n around `center` (norms near 1, biases near 0).
  TensorDecl& vector(const std::string& name, int64_t n, float center, float std);
  // f32 n_rows rows of n (ggml [n, n_rows]): per-expert biases.
  TensorDecl& rows(const std::string& name, int64_t n, int64_t n_rows, float std);
  TensorDecl& add(TensorDecl d);

  // nullptr when `name` is not declared.
  const TensorDecl* find(const std::string& name) const;
  const std::vector<TensorDecl>& entries() const { return entries_; }

 private:
  std::vector<TensorDecl> entries_;
};

// The tensors of a model with these hyper-parameters, from its family's declaration
// (ModelFamily::declare_tensors). hp.arch must be a registered family.
TensorTable declared_tensors(const ModelHParams& hp);

namespace families {
// Building blocks the family files share; `p` is the layer prefix "blk.N.".
// The optional rope factor vectors (rope_freqs; LongRoPE's long/short, required when
// hp.longrope), drawn as make-model writes Phi-3's.
void declare_rope_factors(const ModelHParams& hp, TensorTable& t);
// token_embd; output_norm and output (unless tied).
void declare_embedding(const ModelHParams& hp, TensorTable& t);
void declare_output(const ModelHParams& hp, TensorTable& t);
// Q, K, V (separate, or one attn_qkv when hp.qkv_fused), their biases (required with
// hp.qkv_bias, else optional), per-head Q/K norms, attn_output.
void declare_attention(const ModelHParams& hp, const std::string& p, TensorTable& t);
// The dense SwiGLU/GeGLU FFN (gate, up, down), or phi3's fused gate+up.
void declare_dense_ffn(const ModelHParams& hp, const std::string& p, TensorTable& t);
// Router and stacked experts (gate, up, down), the optional selection bias, and the shared
// experts (with qwen2moe's sigmoid gate when `shared_gate`).
void declare_moe_ffn(const ModelHParams& hp, const std::string& p, bool shared_gate,
                     TensorTable& t);
// Llama's layer layout (llama, qwen2, qwen2moe, qwen3, qwen3moe, gemma2, gemma3): attention,
// gemma's post-norms where hp says, the FFN or experts, and the embedding and output around.
void declare_llama_like(const ModelHParams& hp, bool shared_gate, TensorTable& t);
}  // namespace families

}  // namespace kvw
