#include "model/weights.h"

#include <string>

#include "core/check.h"
#include "gguf/gguf_file.h"
#include "model/families/family.h"
#include "model/families/tensor_table.h"

namespace kvw {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Reads tensors by name with the shapes the family declares (model/families/tensor_table.h):
// a missing required tensor or a wrong shape is refused naming the tensor, found vs expected.
class Loader {
 public:
  Loader(const GgufFile& f, TensorTable table) : f_(f), table_(std::move(table)) {}

  Result<WeightMatrix> matrix(const std::string& name) {
    auto t = required(name);
    if (!t) return Error{t.message()};
    const int64_t n_in = (*t)->shape[0], n_rows = (*t)->shape[1];
    return WeightMatrix{(*t)->type, data(*t), n_rows, n_in, *row_bytes((*t)->type, n_in)};
  }

  // n_expert stacked matrices of n_rows x n_in (ggml shape [n_in, n_rows, n_expert]).
  Result<ExpertMatrices> experts(const std::string& name) {
    if (f_.find_tensor(name) == nullptr) {
      // Older llama.cpp converters wrote one 2-D tensor per expert: blk.N.ffn_gate.E.weight.
      const std::string per_expert = name.substr(0, name.size() - 12) + ".0.weight";
      return Error{f_.path() + ": tensor '" + name + "': missing" +
                   (f_.find_tensor(per_expert) != nullptr
                        ? " (the file has one tensor per expert, e.g. '" + per_expert +
                              "', as older converters wrote; re-convert to stacked experts)"
                        : "")};
    }
    auto t = required(name);
    if (!t) return Error{t.message()};
    const int64_t n_in = (*t)->shape[0], n_rows = (*t)->shape[1];
    const uint64_t rb = *row_bytes((*t)->type, n_in);
    return ExpertMatrices{WeightMatrix{(*t)->type, data(*t), n_rows, n_in, rb},
                          (int32_t)(*t)->shape[2], (uint64_t)n_rows * rb};
  }

  const void* data(const GgufTensorInfo* t) const { return f_.tensor_data(*t); }
  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }
  const std::string& path() const { return f_.path(); }

  // The tensor holding `name`, checked against its declaration; nullptr when it is optional and
  // absent. A name the family does not declare is refused (a file of an unexpected layout).
  Result<const GgufTensorInfo*> tensor(const std::string& name) {
    const TensorDecl* decl = table_.find(name);
    if (decl == nullptr) {
      return Error{f_.path() + ": tensor '" + name + "': not among the tensors a " +
                   "model of this architecture and shape has (model/families)"};
    }
    const GgufTensorInfo* t = f_.find_tensor(name);
    if (t == nullptr) {
      if (decl->optional) return nullptr;
      return Error{f_.path() + ": tensor '" + name + "': missing"};
    }
    if (t->shape != decl->shape) {
      return Error{f_.path() + ": tensor '" + name + "': shape " + shape_str(t->shape) +
                   ", expected " + shape_str(decl->shape)};
    }
    if (!row_bytes(t->type, decl->shape[0])) {
      return Error{f_.path() + ": tensor '" + name + "': row length not a block multiple"};
    }
    return t;
  }
  // As tensor(), absent being an error even where the declaration calls it optional.
  Result<const GgufTensorInfo*> required(const std::string& name) {
    auto t = tensor(name);
    if (t && *t == nullptr) return Error{f_.path() + ": tensor '" + name + "': missing"};
    return t;
  }

  // A declared vector, or rows of a 2-D tensor ([n_rows][n]: per-expert biases), converted to
  // f32; an optional one absent gives an empty vector.
  Result<std::vector<float>> vector(const std::string& name) {
    auto t = tensor(name);
    if (!t) return Error{t.message()};
    if (*t == nullptr) return std::vector<float>{};
    std::vector<float> out((*t)->num_elements);
    dequantize_row((*t)->type, data(*t), out.data(), (int64_t)out.size());
    return out;
  }

 private:
  const GgufFile& f_;
  TensorTable table_;
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

// Multi-head attention tensors of layer `p` (every family but deepseek2's MLA). Q, K and V
// come as attn_q/k/v or, when the file's first layer has it (hp.qkv_fused), as one attn_qkv of
// q + 2 kv rows (phi3's converter; llama.cpp takes either).
Status load_attention(Loader& ld, const std::string& p, const ModelHParams& hp, LayerWeights& l) {
  const int64_t q = hp.q_dim(), kv = hp.kv_dim();
  if (hp.qkv_fused) {
    if (ld.has(p + "attn_qkv.bias")) {
      return Error{ld.path() + ": tensor '" + p +
                   "attn_qkv.bias': fused QKV biases are not supported"};
    }
    WeightMatrix qkv;
    KVW_ASSIGN(qkv, ld.matrix(p + "attn_qkv.weight"));
    l.wq = row_range(qkv, 0, q);
    l.wk = row_range(qkv, q, kv);
    l.wv = row_range(qkv, q + kv, kv);
  } else {
    KVW_ASSIGN(l.wq, ld.matrix(p + "attn_q.weight"));
    KVW_ASSIGN(l.wk, ld.matrix(p + "attn_k.weight"));
    KVW_ASSIGN(l.wv, ld.matrix(p + "attn_v.weight"));
  }
  KVW_ASSIGN(l.wo, ld.matrix(p + "attn_output.weight"));
  KVW_ASSIGN(l.bq, ld.vector(p + "attn_q.bias"));
  KVW_ASSIGN(l.bk, ld.vector(p + "attn_k.bias"));
  KVW_ASSIGN(l.bv, ld.vector(p + "attn_v.bias"));
  if (hp.qk_norm) {
    KVW_ASSIGN(l.q_norm, ld.vector(p + "attn_q_norm.weight"));
    KVW_ASSIGN(l.k_norm, ld.vector(p + "attn_k_norm.weight"));
  }
  if (hp.attn_sinks) KVW_ASSIGN(l.attn_sinks, ld.vector(p + "attn_sinks.weight"));
  if (hp.attn_out_bias) KVW_ASSIGN(l.bo, ld.vector(p + "attn_output.bias"));
  return {};
}

// MLA attention tensors of layer `p` (llama.cpp's deepseek2 names and shapes).
Status load_mla(Loader& ld, const std::string& p, const ModelHParams& hp, LayerWeights& l) {
  const MlaParams& m = hp.mla;
  const int64_t nh = hp.n_head, nope = m.qk_nope_dim, v = m.v_head_dim;
  const int64_t r = m.kv_lora_rank;
  if (m.q_lora_rank > 0) {
    KVW_ASSIGN(l.wq_a, ld.matrix(p + "attn_q_a.weight"));
    KVW_ASSIGN(l.q_a_norm, ld.vector(p + "attn_q_a_norm.weight"));
    KVW_ASSIGN(l.wq_b, ld.matrix(p + "attn_q_b.weight"));
  } else {
    KVW_ASSIGN(l.wq, ld.matrix(p + "attn_q.weight"));
  }
  KVW_ASSIGN(l.wkv_a, ld.matrix(p + "attn_kv_a_mqa.weight"));
  KVW_ASSIGN(l.kv_a_norm, ld.vector(p + "attn_kv_a_norm.weight"));
  KVW_ASSIGN(l.wo, ld.matrix(p + "attn_output.weight"));
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
    KVW_ASSIGN(kb, ld.required(p + "attn_k_b.weight"));
    KVW_ASSIGN(vb, ld.required(p + "attn_v_b.weight"));
    l.k_b = heads(kb, nope, r, 0, r);
    l.v_b = heads(vb, r, v, 0, v);
    return {};
  }
  const GgufTensorInfo* kvb = nullptr;
  KVW_ASSIGN(kvb, ld.required(p + "attn_kv_b.weight"));
  l.k_b = heads(kvb, r, nope, 0, nope + v);
  l.k_b_transposed = true;
  l.v_b = heads(kvb, r, v, nope, nope + v);
  return {};
}

}  // namespace

Result<ModelWeights> weights_from_gguf(const GgufFile& f, const ModelHParams& hp) {
  Loader ld(f, declared_tensors(hp));
  ModelWeights w;
  const ModelFamily* found = find_family(hp.arch);
  CHECK(found != nullptr) << "weights_from_gguf: '" << hp.arch
                          << "' is not a family (hparams_from_gguf refuses it)";
  const ModelFamily& family = *found;
  const int64_t ff = hp.n_ff;
  KVW_ASSIGN(w.token_embd, ld.matrix("token_embd.weight"));
  KVW_ASSIGN(w.output_norm, ld.vector("output_norm.weight"));
  if (hp.tied_embeddings) {
    w.output = w.token_embd;
  } else {
    KVW_ASSIGN(w.output, ld.matrix("output.weight"));
  }
  KVW_ASSIGN(w.rope_freqs, ld.vector("rope_freqs.weight"));
  KVW_ASSIGN(w.rope_long, ld.vector("rope_factors_long.weight"));
  KVW_ASSIGN(w.rope_short, ld.vector("rope_factors_short.weight"));
  w.layers.resize(hp.n_layer);
  for (int32_t i = 0; i < hp.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerWeights& l = w.layers[i];
    KVW_ASSIGN(l.attn_norm, ld.vector(p + "attn_norm.weight"));
    KVW_ASSIGN(l.ffn_norm, ld.vector(p + std::string(family.ffn_norm) + ".weight"));
    if (hp.gemma.post_norms) {
      KVW_ASSIGN(l.post_attn_norm, ld.vector(p + "post_attention_norm.weight"));
      KVW_ASSIGN(l.post_ffw_norm, ld.vector(p + "post_ffw_norm.weight"));
    }
    if (hp.mla.is_mla()) {
      KVW_RETURN_IF_ERROR(load_mla(ld, p, hp, l));
    } else {
      KVW_RETURN_IF_ERROR(load_attention(ld, p, hp, l));
    }
    if (hp.gate_up_fused) {
      WeightMatrix gate_up;
      KVW_ASSIGN(gate_up, ld.matrix(p + "ffn_up.weight"));
      l.gate = row_range(gate_up, 0, ff);
      l.up = row_range(gate_up, ff, ff);
      KVW_ASSIGN(l.down, ld.matrix(p + "ffn_down.weight"));
      continue;
    }
    if (!hp.is_moe_layer(i)) {
      KVW_ASSIGN(l.gate, ld.matrix(p + "ffn_gate.weight"));
      KVW_ASSIGN(l.up, ld.matrix(p + "ffn_up.weight"));
      KVW_ASSIGN(l.down, ld.matrix(p + "ffn_down.weight"));
      continue;
    }
    KVW_ASSIGN(l.router, ld.matrix(p + "ffn_gate_inp.weight"));
    KVW_ASSIGN(l.gate_exps, ld.experts(p + "ffn_gate_exps.weight"));
    KVW_ASSIGN(l.up_exps, ld.experts(p + "ffn_up_exps.weight"));
    KVW_ASSIGN(l.down_exps, ld.experts(p + "ffn_down_exps.weight"));
    KVW_ASSIGN(l.exp_probs_b, ld.vector(p + "exp_probs_b.bias"));
    if (hp.moe.router_bias) KVW_ASSIGN(l.router_b, ld.vector(p + "ffn_gate_inp.bias"));
    if (hp.moe.expert_bias) {
      KVW_ASSIGN(l.gate_exps_b, ld.vector(p + "ffn_gate_exps.bias"));
      KVW_ASSIGN(l.up_exps_b, ld.vector(p + "ffn_up_exps.bias"));
      KVW_ASSIGN(l.down_exps_b, ld.vector(p + "ffn_down_exps.bias"));
    }
    if (hp.moe.n_ff_shared > 0) {
      KVW_ASSIGN(l.shexp_gate, ld.matrix(p + "ffn_gate_shexp.weight"));
      KVW_ASSIGN(l.shexp_up, ld.matrix(p + "ffn_up_shexp.weight"));
      KVW_ASSIGN(l.shexp_down, ld.matrix(p + "ffn_down_shexp.weight"));
      if (family.shared_expert_gate) {
        KVW_ASSIGN(l.shexp_gate_inp, ld.vector(p + "ffn_gate_inp_shexp.weight"));
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
