#include "model/weights.h"

#include <string>

#include "core/check.h"
#include "gguf/gguf_file.h"
#include "model/families/family.h"

namespace kvw {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

class Loader {
 public:
  explicit Loader(const GgufFile& f) : f_(f) {}

  Result<WeightMatrix> matrix(const std::string& name, int64_t n_in, int64_t n_rows) {
    auto t = tensor(name, {n_in, n_rows});
    if (!t) return Error{t.message()};
    return WeightMatrix{(*t)->type, data(*t), n_rows, n_in, *row_bytes((*t)->type, n_in)};
  }

  // n_expert stacked matrices of n_rows x n_in (ggml shape [n_in, n_rows, n_expert]).
  Result<ExpertMatrices> experts(const std::string& name, int64_t n_in, int64_t n_rows,
                                 int32_t n_expert) {
    if (f_.find_tensor(name) == nullptr) {
      // Older llama.cpp converters wrote one 2-D tensor per expert: blk.N.ffn_gate.E.weight.
      const std::string per_expert = name.substr(0, name.size() - 12) + ".0.weight";
      return Error{f_.path() + ": tensor '" + name + "': missing" +
                   (f_.find_tensor(per_expert) != nullptr
                        ? " (the file has one tensor per expert, e.g. '" + per_expert +
                              "', as older converters wrote; re-convert to stacked experts)"
                        : "")};
    }
    auto t = tensor(name, {n_in, n_rows, n_expert});
    if (!t) return Error{t.message()};
    const uint64_t rb = *row_bytes((*t)->type, n_in);
    return ExpertMatrices{WeightMatrix{(*t)->type, data(*t), n_rows, n_in, rb}, n_expert,
                          (uint64_t)n_rows * rb};
  }

  const void* data(const GgufTensorInfo* t) const { return f_.tensor_data(*t); }
  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }
  const std::string& path() const { return f_.path(); }

  // The tensor holding `name`, shape-checked against `shape` (errors give found and expected).
  Result<const GgufTensorInfo*> tensor(const std::string& name, const std::vector<int64_t>& shape) {
    const GgufTensorInfo* t = f_.find_tensor(name);
    if (t == nullptr) return Error{f_.path() + ": tensor '" + name + "': missing"};
    if (t->shape != shape) {
      return Error{f_.path() + ": tensor '" + name + "': shape " + shape_str(t->shape) +
                   ", expected " + shape_str(shape)};
    }
    if (!row_bytes(t->type, shape[0])) {
      return Error{f_.path() + ": tensor '" + name + "': row length not a block multiple"};
    }
    return t;
  }

  // A 1-D tensor converted to f32; optional ones return an empty vector when absent.
  Result<std::vector<float>> vector(const std::string& name, int64_t n, bool optional = false) {
    const GgufTensorInfo* t = f_.find_tensor(name);
    if (t == nullptr) {
      if (optional) return std::vector<float>{};
      return Error{f_.path() + ": tensor '" + name + "': missing"};
    }
    if (t->shape.size() != 1 || t->shape[0] != n) {
      return Error{f_.path() + ": tensor '" + name + "': shape " + shape_str(t->shape) +
                   ", expected [" + std::to_string(n) + "]"};
    }
    if (!row_bytes(t->type, n)) {
      return Error{f_.path() + ": tensor '" + name + "': length not a block multiple"};
    }
    std::vector<float> out(n);
    dequantize_row(t->type, f_.tensor_data(*t), out.data(), n);
    return out;
  }

  // A 2-D tensor of n_rows rows of n converted to f32 ([n_rows][n]): per-expert biases.
  Result<std::vector<float>> rows(const std::string& name, int64_t n, int64_t n_rows) {
    auto t = tensor(name, {n, n_rows});
    if (!t) return Error{t.message()};
    std::vector<float> out(n * n_rows);
    dequantize_row((*t)->type, data(*t), out.data(), n * n_rows);
    return out;
  }

 private:
  const GgufFile& f_;
};

#define KVW_ASSIGN(lhs, expr)            \
  do {                                   \
    auto _r = (expr);                    \
    if (!_r) return Error{_r.message()}; \
    lhs = std::move(_r.value());         \
  } while (0)

// Rows [first, first + n_rows) of `m`, a matrix of its own: the parts of a fused tensor are
// contiguous row ranges, so they need no copy and compute exactly as separate tensors would.
WeightMatrix row_range(const WeightMatrix& m, int64_t first, int64_t n_rows) {
  WeightMatrix part = m;
  part.data = static_cast<const uint8_t*>(m.data) + (uint64_t)first * m.row_bytes;
  part.n_rows = n_rows;
  return part;
}

// Multi-head attention tensors of layer `p` (llama, qwen2, qwen3, gemma2,
// gemma3, phi3). Q, K and V come as
// attn_q/k/v or as one attn_qkv of q + 2 kv rows (phi3's converter; llama.cpp takes either).
Status load_attention(Loader& ld, const std::string& p, const ModelHParams& hp, LayerWeights& l) {
  const int64_t d = hp.n_embd, q = hp.q_dim(), kv = hp.kv_dim();
  if (ld.has(p + "attn_qkv.weight")) {
    if (ld.has(p + "attn_qkv.bias")) {
      return Error{ld.path() + ": tensor '" + p +
                   "attn_qkv.bias': fused QKV biases are not supported"};
    }
    WeightMatrix qkv;
    KVW_ASSIGN(qkv, ld.matrix(p + "attn_qkv.weight", d, q + 2 * kv));
    l.wq = row_range(qkv, 0, q);
    l.wk = row_range(qkv, q, kv);
    l.wv = row_range(qkv, q + kv, kv);
  } else {
    KVW_ASSIGN(l.wq, ld.matrix(p + "attn_q.weight", d, q));
    KVW_ASSIGN(l.wk, ld.matrix(p + "attn_k.weight", d, kv));
    KVW_ASSIGN(l.wv, ld.matrix(p + "attn_v.weight", d, kv));
  }
  KVW_ASSIGN(l.wo, ld.matrix(p + "attn_output.weight", q, d));
  KVW_ASSIGN(l.bq, ld.vector(p + "attn_q.bias", q, !hp.qkv_bias));
  KVW_ASSIGN(l.bk, ld.vector(p + "attn_k.bias", kv, !hp.qkv_bias));
  KVW_ASSIGN(l.bv, ld.vector(p + "attn_v.bias", kv, !hp.qkv_bias));
  if (hp.qk_norm) {
    KVW_ASSIGN(l.q_norm, ld.vector(p + "attn_q_norm.weight", hp.head_dim));
    KVW_ASSIGN(l.k_norm, ld.vector(p + "attn_k_norm.weight", hp.head_dim));
  }
  if (hp.attn_sinks) KVW_ASSIGN(l.attn_sinks, ld.vector(p + "attn_sinks.weight", hp.n_head));
  if (hp.attn_out_bias) KVW_ASSIGN(l.bo, ld.vector(p + "attn_output.bias", d));
  return {};
}

// MLA attention tensors of layer `p` (llama.cpp's deepseek2 names and shapes).
Status load_mla(Loader& ld, const std::string& p, const ModelHParams& hp, LayerWeights& l) {
  const MlaParams& m = hp.mla;
  const int64_t d = hp.n_embd, nh = hp.n_head, nope = m.qk_nope_dim, v = m.v_head_dim;
  const int64_t r = m.kv_lora_rank;
  if (m.q_lora_rank > 0) {
    KVW_ASSIGN(l.wq_a, ld.matrix(p + "attn_q_a.weight", d, m.q_lora_rank));
    KVW_ASSIGN(l.q_a_norm, ld.vector(p + "attn_q_a_norm.weight", m.q_lora_rank));
    KVW_ASSIGN(l.wq_b, ld.matrix(p + "attn_q_b.weight", m.q_lora_rank, hp.q_dim()));
  } else {
    KVW_ASSIGN(l.wq, ld.matrix(p + "attn_q.weight", d, hp.q_dim()));
  }
  KVW_ASSIGN(l.wkv_a, ld.matrix(p + "attn_kv_a_mqa.weight", d, r + m.qk_rope_dim));
  KVW_ASSIGN(l.kv_a_norm, ld.vector(p + "attn_kv_a_norm.weight", r));
  KVW_ASSIGN(l.wo, ld.matrix(p + "attn_output.weight", hp.attn_out_dim(), d));
  auto heads = [&](const GgufTensorInfo* t, int64_t n_in, int64_t n_rows, uint64_t offset_rows,
                   uint64_t stride_rows) {
    const uint64_t rb = *row_bytes(t->type, n_in);
    const auto* base = static_cast<const uint8_t*>(ld.data(t));
    return ExpertMatrices{WeightMatrix{t->type, base + offset_rows * rb, n_rows, n_in, rb},
                          (int32_t)nh, stride_rows * rb};
  };
  if (m.split_kv_b) {
    const GgufTensorInfo* kb = nullptr;
    const GgufTensorInfo* vb = nullptr;
    KVW_ASSIGN(kb, ld.tensor(p + "attn_k_b.weight", {nope, r, nh}));
    KVW_ASSIGN(vb, ld.tensor(p + "attn_v_b.weight", {r, v, nh}));
    l.k_b = heads(kb, nope, r, 0, r);
    l.v_b = heads(vb, r, v, 0, v);
    return {};
  }
  const GgufTensorInfo* kvb = nullptr;
  KVW_ASSIGN(kvb, ld.tensor(p + "attn_kv_b.weight", {r, nh * (nope + v)}));
  l.k_b = heads(kvb, r, nope, 0, nope + v);
  l.k_b_transposed = true;
  l.v_b = heads(kvb, r, v, nope, nope + v);
  return {};
}

}  // namespace

Result<ModelWeights> weights_from_gguf(const GgufFile& f, const ModelHParams& hp) {
  Loader ld(f);
  ModelWeights w;
  const ModelFamily* found = find_family(hp.arch);
  CHECK(found != nullptr) << "weights_from_gguf: '" << hp.arch
                          << "' is not a family (hparams_from_gguf refuses it)";
  const ModelFamily& family = *found;
  const int64_t d = hp.n_embd, ff = hp.n_ff;
  KVW_ASSIGN(w.token_embd, ld.matrix("token_embd.weight", d, hp.n_vocab));
  KVW_ASSIGN(w.output_norm, ld.vector("output_norm.weight", d));
  if (hp.tied_embeddings) {
    w.output = w.token_embd;
  } else {
    KVW_ASSIGN(w.output, ld.matrix("output.weight", d, hp.n_vocab));
  }
  KVW_ASSIGN(w.rope_freqs, ld.vector("rope_freqs.weight", hp.rope.n_rot / 2, true));
  KVW_ASSIGN(w.rope_long, ld.vector("rope_factors_long.weight", hp.rope.n_rot / 2, true));
  KVW_ASSIGN(w.rope_short, ld.vector("rope_factors_short.weight", hp.rope.n_rot / 2, true));
  w.layers.resize(hp.n_layer);
  for (int32_t i = 0; i < hp.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerWeights& l = w.layers[i];
    KVW_ASSIGN(l.attn_norm, ld.vector(p + "attn_norm.weight", d));
    KVW_ASSIGN(l.ffn_norm, ld.vector(p + std::string(family.ffn_norm) + ".weight", d));
    if (hp.gemma.post_norms) {
      KVW_ASSIGN(l.post_attn_norm, ld.vector(p + "post_attention_norm.weight", d));
      KVW_ASSIGN(l.post_ffw_norm, ld.vector(p + "post_ffw_norm.weight", d));
    }
    if (hp.mla.is_mla()) {
      KVW_RETURN_IF_ERROR(load_mla(ld, p, hp, l));
    } else {
      KVW_RETURN_IF_ERROR(load_attention(ld, p, hp, l));
    }
    if (hp.gate_up_fused) {
      WeightMatrix gate_up;
      KVW_ASSIGN(gate_up, ld.matrix(p + "ffn_up.weight", d, 2 * ff));
      l.gate = row_range(gate_up, 0, ff);
      l.up = row_range(gate_up, ff, ff);
      KVW_ASSIGN(l.down, ld.matrix(p + "ffn_down.weight", ff, d));
      continue;
    }
    if (!hp.is_moe_layer(i)) {
      KVW_ASSIGN(l.gate, ld.matrix(p + "ffn_gate.weight", d, ff));
      KVW_ASSIGN(l.up, ld.matrix(p + "ffn_up.weight", d, ff));
      KVW_ASSIGN(l.down, ld.matrix(p + "ffn_down.weight", ff, d));
      continue;
    }
    const int32_t ne = hp.moe.n_expert;
    const int64_t fe = hp.moe.n_ff_exp;
    KVW_ASSIGN(l.router, ld.matrix(p + "ffn_gate_inp.weight", d, ne));
    KVW_ASSIGN(l.gate_exps, ld.experts(p + "ffn_gate_exps.weight", d, fe, ne));
    KVW_ASSIGN(l.up_exps, ld.experts(p + "ffn_up_exps.weight", d, fe, ne));
    KVW_ASSIGN(l.down_exps, ld.experts(p + "ffn_down_exps.weight", fe, d, ne));
    KVW_ASSIGN(l.exp_probs_b, ld.vector(p + "exp_probs_b.bias", ne, !hp.moe.probs_bias));
    if (hp.moe.router_bias) KVW_ASSIGN(l.router_b, ld.vector(p + "ffn_gate_inp.bias", ne));
    if (hp.moe.expert_bias) {
      KVW_ASSIGN(l.gate_exps_b, ld.rows(p + "ffn_gate_exps.bias", fe, ne));
      KVW_ASSIGN(l.up_exps_b, ld.rows(p + "ffn_up_exps.bias", fe, ne));
      KVW_ASSIGN(l.down_exps_b, ld.rows(p + "ffn_down_exps.bias", d, ne));
    }
    if (hp.moe.n_ff_shared > 0) {
      const int64_t fs = hp.moe.n_ff_shared;
      KVW_ASSIGN(l.shexp_gate, ld.matrix(p + "ffn_gate_shexp.weight", d, fs));
      KVW_ASSIGN(l.shexp_up, ld.matrix(p + "ffn_up_shexp.weight", d, fs));
      KVW_ASSIGN(l.shexp_down, ld.matrix(p + "ffn_down_shexp.weight", fs, d));
      if (family.shared_expert_gate) {
        KVW_ASSIGN(l.shexp_gate_inp, ld.vector(p + "ffn_gate_inp_shexp.weight", d));
      }
    }
  }
  for (const auto& t : f.tensors()) w.total_bytes += t.num_bytes;
  return w;
}
namespace {

// Packs `m` (n_slices matrices of slice_bytes each, e.g. stacked experts) if the table packs it;
// returns the bytes packed.
uint64_t pack_matrix(WeightMatrix& m, int64_t n_slices, uint64_t slice_bytes,
                     const kernels::KernelTable& kt) {
  if (m.data == nullptr || !kt.packs(m.type, m.n_rows, m.n_in)) return 0;
  for (int64_t e = 0; e < n_slices; ++e) {
    // The file mapping is writable (copy-on-write) while packing: see pack_matrices.
    void* slice = static_cast<uint8_t*>(const_cast<void*>(m.data)) + e * slice_bytes;
    kt.pack(m.type, slice, slice, m.n_rows, m.n_in);
  }
  m.packed = true;
  return (uint64_t)n_slices * (uint64_t)m.n_rows * m.row_bytes;
}

}  // namespace

Result<uint64_t> pack_matrices(GgufFile& file, ModelWeights& w, const kernels::KernelTable& kt) {
  KVW_RETURN_IF_ERROR(file.set_writable(true));
  uint64_t bytes = 0;
  if (w.output.data != w.token_embd.data) bytes += pack_matrix(w.output, 1, 0, kt);
  for (LayerWeights& l : w.layers) {
    for (WeightMatrix* m :
         {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down, &l.router, &l.shexp_gate,
          &l.shexp_up, &l.shexp_down, &l.wq_a, &l.wq_b, &l.wkv_a}) {
      bytes += pack_matrix(*m, 1, 0, kt);
    }
    for (ExpertMatrices* x : {&l.gate_exps, &l.up_exps, &l.down_exps, &l.v_b}) {
      bytes += pack_matrix(x->first, x->n_expert, x->expert_bytes, kt);
    }
    // A transposed k_b is read row by row (mla_forward.cc), never through the GEMM.
    if (!l.k_b_transposed)
      bytes += pack_matrix(l.k_b.first, l.k_b.n_expert, l.k_b.expert_bytes, kt);
  }
  KVW_RETURN_IF_ERROR(file.set_writable(false));
  return bytes;
}

void matmul(const kernels::KernelTable& kt, const WeightMatrix& w, const void* act,
            int64_t n_tokens, float* y, int ith, int nth, void* scratch) {
  if (w.packed) {
    kt.matmul_packed(w.type, w.data, w.n_rows, w.n_in, act, n_tokens, y, ith, nth, scratch);
  } else {
    kt.matmul(w.type, w.data, w.n_rows, w.n_in, act, n_tokens, y, ith, nth);
  }
}

}  // namespace kvw
