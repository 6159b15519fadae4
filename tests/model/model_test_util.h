// tests/model/model_test_util.h: what the model tests share: writing a make-model file, loading
// it, running prompts through forward() in one batch, comparing logits bit for bit, and copying
// a GGUF file with edits to check that bad files are refused.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/model.h"
#include "model/model_maker.h"

namespace kvw::test {

// A named preset with its matrices in `type`.
inline MakeModelSpec preset_spec(const std::string& name, const std::string& type = "f32",
                                 uint64_t seed = 1) {
  auto s = make_model_preset(name);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.message());
  if (!s.ok()) return {};
  s->weight_type = *ggml_type_from_name(type);
  s->seed = seed;
  return *s;
}

inline std::string write_model(const std::string& name, const MakeModelSpec& spec) {
  const std::string path = ::testing::TempDir() + "/" + name + ".gguf";
  Status st = make_model(spec, path);
  EXPECT_TRUE(st.ok()) << st.message();
  return path;
}

inline std::unique_ptr<Model> load_model(const std::string& path, int threads,
                                         int32_t max_batch_tokens = 256) {
  ModelOptions opt;
  opt.n_threads = threads;
  opt.max_batch_tokens = max_batch_tokens;
  auto m = Model::load(path, opt);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.message());
  return m.ok() ? std::move(m.value()) : nullptr;
}

inline std::vector<int32_t> random_tokens(int n, int32_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = (int32_t)(rng() % n_vocab);
  return t;
}

// Every sequence's prompt with all logits, in one forward call, blocks from `first_block` on
// (each table reversed when `reverse_blocks`).
inline std::vector<std::vector<float>> run_batch(Model& m, KvArena& kv,
                                                 const std::vector<std::vector<int32_t>>& seqs,
                                                 uint32_t first_block = 0,
                                                 bool reverse_blocks = false) {
  const int32_t bs = kv.config().block_size;
  std::vector<std::vector<uint32_t>> tables(seqs.size());
  std::vector<SeqInput> in;
  uint32_t next = first_block;
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (size_t b = 0; b < (seqs[i].size() + bs - 1) / bs; ++b) tables[i].push_back(next++);
    if (reverse_blocks) std::reverse(tables[i].begin(), tables[i].end());
    in.push_back({.tokens = seqs[i], .start_pos = 0, .block_table = tables[i], .all_logits = true});
  }
  const int32_t V = m.hparams().n_vocab;
  std::vector<float> all(Model::num_logit_rows(in) * V);
  Status st = m.forward(in, kv, all.data());
  EXPECT_TRUE(st.ok()) << st.message();
  std::vector<std::vector<float>> out;
  size_t off = 0;
  for (const auto& s : seqs) {
    out.emplace_back(all.begin() + off, all.begin() + off + s.size() * V);
    off += s.size() * V;
  }
  return out;
}

inline bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// A 37-token prompt's logits from the file at `path` are bit-identical alone, inside batches of
// 2 and 7 sequences, in chunks of 16, 16, 4 and then single decode tokens, and with 1 and 3
// threads instead of 2: the engine's batch invariance for one architecture and KV dtype.
inline void expect_batch_invariant(const std::string& path, KvDtype dtype) {
  auto m = load_model(path, 2);
  ASSERT_NE(m, nullptr);
  KvArena kv(m->kv_config(128, 16, dtype));
  const int32_t V = m->hparams().n_vocab;
  const auto probe = random_tokens(37, V, 1);
  const auto alone = run_batch(*m, kv, {probe})[0];
  for (float x : alone) ASSERT_TRUE(std::isfinite(x));
  for (int n : {2, 7}) {
    std::vector<std::vector<int32_t>> seqs;
    for (int i = 0; i < n; ++i) seqs.push_back(random_tokens(1 + 5 * i, V, 100 + i));
    seqs[n / 2] = probe;
    EXPECT_TRUE(bit_equal(run_batch(*m, kv, seqs, 40)[n / 2], alone)) << "batch of " << n;
  }
  std::vector<uint32_t> table = {90, 91, 92};
  std::vector<float> chunked;
  for (size_t pos = 0; pos < probe.size();) {
    const size_t n = pos < 32 ? 16 : (pos < 36 ? 4 : 1);
    SeqInput in{.tokens = std::span(probe).subspan(pos, n),
                .start_pos = (int64_t)pos,
                .block_table = table,
                .all_logits = true};
    std::vector<float> l(n * V);
    ASSERT_TRUE(m->forward({&in, 1}, kv, l.data()).ok());
    chunked.insert(chunked.end(), l.begin(), l.end());
    pos += n;
  }
  EXPECT_TRUE(bit_equal(chunked, alone));
  for (int threads : {1, 3}) {
    auto mt = load_model(path, threads);
    KvArena kvt(mt->kv_config(8, 16, dtype));
    EXPECT_TRUE(bit_equal(run_batch(*mt, kvt, {probe})[0], alone)) << threads << " threads";
  }
}

// Copies `src` to a new file, letting `meta` change metadata and `tensors` add, drop or replace
// tensors (return false to drop).
using TensorEdit = std::function<bool(GgufWriter&, const GgufTensorInfo&, const uint8_t*)>;
inline std::string rewrite(const std::string& src, const std::string& name,
                           const std::function<void(GgufWriter&)>& meta,
                           const TensorEdit& tensors) {
  auto f = GgufFile::open(src);
  EXPECT_TRUE(f.ok());
  GgufWriter w;
  for (const auto& kv : (*f)->metadata()) w.set(kv.key, kv.value);
  meta(w);
  for (const auto& t : (*f)->tensors()) {
    const uint8_t* p = (*f)->tensor_data(t);
    if (tensors(w, t, p)) {
      w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(p, p + t.num_bytes));
    }
  }
  const std::string path = ::testing::TempDir() + "/" + name + ".gguf";
  EXPECT_TRUE(w.write(path).ok());
  return path;
}

inline const TensorEdit kKeepAll = [](GgufWriter&, const GgufTensorInfo&, const uint8_t*) {
  return true;
};
inline const auto kNoMeta = [](GgufWriter&) {};

// Model::load refuses `path` with one message naming the file and every one of `parts`.
inline void expect_refused(const std::string& path, const std::vector<std::string>& parts) {
  auto m = Model::load(path, {});
  ASSERT_FALSE(m.ok());
  const std::string file = path.substr(path.find_last_of('/') + 1);
  EXPECT_NE(m.message().find(file), std::string::npos) << m.message();
  for (const auto& p : parts) EXPECT_NE(m.message().find(p), std::string::npos) << m.message();
}

}  // namespace kvw::test
