#include "model/families/tensor_table.h"

#include <cmath>

#include "core/check.h"
#include "model/families/family.h"

namespace kvw {

TensorDecl& TensorTable::add(TensorDecl d) {
  CHECK(find(d.name) == nullptr) << "tensor '" << d.name << "' declared twice";
  entries_.push_back(std::move(d));
  return entries_.back();
}

TensorDecl& TensorTable::matrix(const std::string& name, int64_t n_in, int64_t n_rows, float std) {
  return add({.name = name, .shape = {n_in, n_rows}, .std = std});
}

TensorDecl& TensorTable::experts(const std::string& name, int64_t n_in, int64_t n_rows,
                                 int64_t n_expert, float std) {
  return add({.name = name, .shape = {n_in, n_rows, n_expert}, .std = std});
}

TensorDecl& TensorTable::vector(const std::string& name, int64_t n, float center, float std) {
  return add(
      {.name = name, .shape = {n}, .store = TensorStore::kF32, .center = center, .std = std});
}

TensorDecl& TensorTable::rows(const std::string& name, int64_t n, int64_t n_rows, float std) {
  return add({.name = name, .shape = {n, n_rows}, .store = TensorStore::kF32, .std = std});
}

const TensorDecl* TensorTable::find(const std::string& name) const {
  // Linear: a table has a few hundred entries and the loader looks each up once.
  for (const TensorDecl& d : entries_) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

TensorTable declared_tensors(const ModelHParams& hp) {
  const ModelFamily* family = find_family(hp.arch);
  CHECK(family != nullptr && family->declare_tensors != nullptr)
      << "declared_tensors: '" << hp.arch << "' is not a family with a tensor declaration";
  TensorTable t;
  family->declare_tensors(hp, t);
  return t;
}

namespace families {

void declare_rope_factors(const ModelHParams& hp, TensorTable& t) {
  const int64_t half = hp.rope.n_rot / 2;
  t.vector("rope_freqs.weight", half, 1.0f, 0.0f).optional = true;
  // Short factors near 1, long ones growing to ~20 towards the low frequencies: the profile of
  // Phi-3.5-mini's (1.0 .. 1.2 and 1.0 .. ~60). Short is drawn first.
  t.vector("rope_factors_short.weight", half, 1.1f, 0.05f).optional = !hp.longrope;
  TensorDecl& lng = t.vector("rope_factors_long.weight", half, 1.0f, 0.1f);
  lng.optional = !hp.longrope;
  lng.fill = TensorFill::kLongRopeLong;
}

void declare_embedding(const ModelHParams& hp, TensorTable& t) {
  // Gemma scales embeddings by sqrt(d): std 1/sqrt(d) keeps them, and the tied logits, of order 1.
  t.matrix("token_embd.weight", hp.n_embd, hp.n_vocab,
           hp.gemma.scale_embd ? 1.0f / std::sqrt((float)hp.n_embd) : 1.0f);
}

void declare_output(const ModelHParams& hp, TensorTable& t) {
  t.vector("output_norm.weight", hp.n_embd, 1.0f, 0.1f);
  if (!hp.tied_embeddings) t.matrix("output.weight", hp.n_embd, hp.n_vocab);
}

void declare_attention(const ModelHParams& hp, const std::string& p, TensorTable& t) {
  const int64_t d = hp.n_embd, q = hp.q_dim(), kv = hp.kv_dim();
  if (hp.qkv_fused) {
    t.matrix(p + "attn_qkv.weight", d, q + 2 * kv);
  } else {
    t.matrix(p + "attn_q.weight", d, q);
    t.matrix(p + "attn_k.weight", d, kv);
    t.matrix(p + "attn_v.weight", d, kv);
  }
  t.vector(p + "attn_q.bias", q, 0.0f, 0.1f).optional = !hp.qkv_bias;
  t.vector(p + "attn_k.bias", kv, 0.0f, 0.1f).optional = !hp.qkv_bias;
  t.vector(p + "attn_v.bias", kv, 0.0f, 0.1f).optional = !hp.qkv_bias;
  if (hp.qk_norm) {
    t.vector(p + "attn_q_norm.weight", hp.head_dim, 1.0f, 0.3f);  // per head; std 0.3: they matter
    t.vector(p + "attn_k_norm.weight", hp.head_dim, 1.0f, 0.3f);
  }
  t.matrix(p + "attn_output.weight", q, d);
}

void declare_dense_ffn(const ModelHParams& hp, const std::string& p, TensorTable& t) {
  const int64_t d = hp.n_embd, ff = hp.n_ff;
  if (hp.gate_up_fused) {
    t.matrix(p + "ffn_up.weight", d, 2 * ff);  // gate rows, then up rows
  } else {
    t.matrix(p + "ffn_gate.weight", d, ff);
    t.matrix(p + "ffn_up.weight", d, ff);
  }
  t.matrix(p + "ffn_down.weight", ff, d);
}

void declare_moe_ffn(const ModelHParams& hp, const std::string& p, bool shared_gate,
                     TensorTable& t) {
  const MoeParams& m = hp.moe;
  const int64_t d = hp.n_embd, ne = m.n_expert, fe = m.n_ff_exp;
  // The router stays f32, as llama.cpp's quantizer leaves ffn_gate_inp; std 3/sqrt(d) spreads
  // router logits (std ~3) so the top-k choice is rarely a near-tie.
  t.matrix(p + "ffn_gate_inp.weight", d, ne, 3.0f / std::sqrt((float)d)).store = TensorStore::kF32;
  t.vector(p + "exp_probs_b.bias", ne, 0.0f, 0.1f).optional = !m.probs_bias;
  t.experts(p + "ffn_gate_exps.weight", d, fe, ne);
  t.experts(p + "ffn_up_exps.weight", d, fe, ne);
  t.experts(p + "ffn_down_exps.weight", fe, d, ne);
  if (m.n_ff_shared <= 0) return;
  const int64_t fs = m.n_ff_shared;
  // The shared expert's gate is one row (f32 like every vector): std 1/sqrt(d) gives gate logits
  // of order one, so sigmoid(gate . x) varies across tokens.
  if (shared_gate) t.vector(p + "ffn_gate_inp_shexp.weight", d, 0.0f, 1.0f / std::sqrt((float)d));
  t.matrix(p + "ffn_gate_shexp.weight", d, fs);
  t.matrix(p + "ffn_up_shexp.weight", d, fs);
  t.matrix(p + "ffn_down_shexp.weight", fs, d);
}

void declare_llama_like(const ModelHParams& hp, bool shared_gate, TensorTable& t) {
  const int64_t d = hp.n_embd;
  declare_rope_factors(hp, t);
  declare_embedding(hp, t);
  for (int32_t l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    t.vector(p + "attn_norm.weight", d, 1.0f, 0.1f);
    declare_attention(hp, p, t);
    // Gemma's norms as the converter stores them (HF's weight + 1): around 1.
    if (hp.gemma.post_norms) t.vector(p + "post_attention_norm.weight", d, 1.0f, 0.1f);
    t.vector(p + "ffn_norm.weight", d, 1.0f, 0.1f);
    // The fused gate+up is dense on every layer, as the loader reads it.
    if (hp.is_moe_layer(l) && !hp.gate_up_fused) {
      declare_moe_ffn(hp, p, shared_gate, t);
    } else {
      declare_dense_ffn(hp, p, t);
    }
    if (hp.gemma.post_norms) t.vector(p + "post_ffw_norm.weight", d, 1.0f, 0.1f);
  }
  declare_output(hp, t);
}

}  // namespace families
}  // namespace kvw
