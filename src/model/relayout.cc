// model/relayout.cc: llama -> phi3 / qwen2 / llama with a window (relayout.h).
#include "model/relayout.h"

#include <cstring>
#include <memory>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/hparams.h"

namespace kvw {
namespace {

struct Rows {
  GgmlType type;
  int64_t n_in = 0;  // row length (ggml shape[0])
  int64_t n_rows = 0;
  std::vector<uint8_t> data;
};

Result<Rows> read_matrix(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* t = f.find_tensor(name);
  if (t == nullptr) return Error{f.path() + ": tensor '" + name + "' missing"};
  if (t->shape.size() != 2) return Error{f.path() + ": tensor '" + name + "' is not a matrix"};
  const uint8_t* p = f.tensor_data(*t);
  return Rows{t->type, t->shape[0], t->shape[1], std::vector<uint8_t>(p, p + t->num_bytes)};
}

// Llama's converter stores each head's rows interleaved for the normal (pairwise) rope: its row
// 2j + t is the NEOX layout's row t * head_len / 2 + j. Both rotate the same pairs by the same
// angles, so un-permuting the rows and rotating NEOX-style gives the same scores.
Rows unpermute_heads(const Rows& m, int32_t head_len) {
  Rows out = m;
  const size_t row = m.data.size() / m.n_rows;
  const int64_t half = head_len / 2;
  for (int64_t r = 0; r < m.n_rows; ++r) {
    const int64_t head = r / head_len, j = r % head_len % half, t = r % head_len / half;
    std::memcpy(&out.data[r * row], &m.data[(head * head_len + 2 * j + t) * row], row);
  }
  return out;
}

Result<Rows> concat_rows(const std::vector<Rows>& parts, const std::string& what) {
  Rows out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i].type != out.type || parts[i].n_in != out.n_in)
      return Error{what + ": its parts differ in type or width, so they cannot be fused"};
    out.n_rows += parts[i].n_rows;
    out.data.insert(out.data.end(), parts[i].data.begin(), parts[i].data.end());
  }
  return out;
}

void add_rows(GgufWriter& w, const std::string& name, Rows m) {
  w.add_tensor(name, m.type, {m.n_in, m.n_rows}, std::move(m.data));
}

void add_zero_bias(GgufWriter& w, const std::string& name, int64_t n) {
  w.add_tensor(name, GgmlType::kF32, {n}, std::vector<uint8_t>(n * sizeof(float), 0));
}

// What a relayout needs of the llama file; errors say what it has instead.
Status check_source(const GgufFile& f, const ModelHParams& hp, const RelayoutSpec& spec) {
  const auto refuse = [&](const std::string& why) {
    return Error{f.path() + ": cannot rewrite as " + spec.arch + ": " + why};
  };
  if (hp.arch != "llama") return refuse("--from needs a llama file, found '" + hp.arch + "'");
  if (spec.sliding_window < 0) return Error{"--sliding-window must be >= 0"};
  if (spec.arch == "llama") return {};
  if (spec.arch != "phi3" && spec.arch != "qwen2")
    return Error{"--from rewrites a llama file as --arch phi3, qwen2 or llama, not '" + spec.arch +
                 "'"};
  if (hp.moe.is_moe()) return refuse("it has experts (phi3 and qwen2 files are dense here)");
  if (hp.qkv_bias || hp.qkv_fused) return refuse("it already has Q/K/V biases or a fused attn_qkv");
  if (hp.rope.n_rot != hp.head_dim)
    return refuse("rope.dimension_count " + std::to_string(hp.rope.n_rot) +
                  " is not the head length " + std::to_string(hp.head_dim) +
                  " (the NEOX rows are only the same rotation over whole heads)");
  if (spec.arch == "phi3" && hp.q_dim() != hp.n_embd)
    return refuse("phi3's heads are embedding_length / head_count long");
  return {};
}

// The tensors of the new layout, in the llama file's order with fused ones at their first part.
Status write_tensors(const GgufFile& f, const ModelHParams& hp, const std::string& arch,
                     GgufWriter& w) {
  const bool neox = arch != "llama", phi3 = arch == "phi3";
  for (const GgufTensorInfo& t : f.tensors()) {
    const std::string& name = t.name;
    const bool in_block = neox && name.rfind("blk.", 0) == 0;
    const std::string base = in_block ? name.substr(0, name.find('.', 4) + 1) : "";  // "blk.3."
    const auto is = [&](const char* suffix) { return in_block && name == base + suffix; };
    if (is("attn_q.weight") || is("attn_k.weight") || is("attn_v.weight")) {
      if (phi3 && !is("attn_q.weight")) continue;  // written in attn_qkv
      std::vector<Rows> parts;
      for (const char* part : {"attn_q.weight", "attn_k.weight", "attn_v.weight"}) {
        if (!phi3 && !is(part)) continue;
        auto m = read_matrix(f, base + part);
        if (!m) return m.error();
        const bool rotated = std::string(part) != "attn_v.weight";
        parts.push_back(rotated ? unpermute_heads(*m, hp.head_dim) : std::move(*m));
      }
      if (!phi3) {
        const int64_t n_bias = parts[0].n_rows;
        add_rows(w, name, std::move(parts[0]));
        add_zero_bias(w, name.substr(0, name.size() - 6) + "bias", n_bias);
        continue;
      }
      auto qkv = concat_rows(parts, f.path() + ": " + base + "attn_q/k/v");
      if (!qkv) return qkv.error();
      add_rows(w, base + "attn_qkv.weight", std::move(*qkv));
    } else if (phi3 && (is("ffn_gate.weight") || is("ffn_up.weight"))) {
      if (is("ffn_up.weight")) continue;  // written with the gate rows
      auto gate = read_matrix(f, base + "ffn_gate.weight");
      if (!gate) return gate.error();
      auto up = read_matrix(f, base + "ffn_up.weight");
      if (!up) return up.error();
      auto fused = concat_rows({*gate, *up}, f.path() + ": " + base + "ffn_gate/up");
      if (!fused) return fused.error();
      add_rows(w, base + "ffn_up.weight", std::move(*fused));
    } else {
      const uint8_t* p = f.tensor_data(t);
      w.add_tensor(name, t.type, t.shape, std::vector<uint8_t>(p, p + t.num_bytes));
    }
  }
  return {};
}

}  // namespace

Status relayout_llama(const std::string& from, const RelayoutSpec& spec, const std::string& out) {
  auto file = GgufFile::open(from);
  if (!file) return file.error();
  const GgufFile& f = **file;
  auto hp = hparams_from_gguf(f);
  if (!hp) return hp.error();
  KVW_RETURN_IF_ERROR(check_source(f, *hp, spec));
  GgufWriter w(f.version(), f.alignment());
  const std::string prefix = spec.arch + ".";
  for (const GgufKv& kv : f.metadata()) {
    if (kv.key == "general.architecture") {
      w.set_string(kv.key, spec.arch);
    } else if (kv.key.rfind("llama.", 0) == 0) {
      w.set(prefix + kv.key.substr(6), kv.value);
    } else {
      w.set(kv.key, kv.value);
    }
  }
  if (spec.sliding_window > 0 || spec.arch == "phi3")
    w.set_u32(prefix + "attention.sliding_window", spec.sliding_window);
  KVW_RETURN_IF_ERROR(write_tensors(f, *hp, spec.arch, w));
  return w.write(out);
}

}  // namespace kvw
