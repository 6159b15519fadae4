// Qwen1.5-MoE / Qwen2-57B-A14B files (GGUF arch qwen2moe): qwen2 attention with every layer
// routed (softmax top-k, weights not renormalised) plus one shared expert scaled by a per-token
// sigmoid gate. Logits are bit-identical alone, batched, chunked and across thread counts, and a
// file without the shared expert's gate is refused naming the tensor. Numerics against the
// independent reference: tests/reference (qwen2moe_f32).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/model.h"
#include "model/model_maker.h"

namespace kvw {
namespace {

std::string write_preset(const std::string& name, uint64_t seed) {
  auto s = make_model_preset("qwen2moe-tiny");
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.message());
  s->seed = seed;
  const std::string path = ::testing::TempDir() + "/" + name + ".gguf";
  Status st = make_model(*s, path);
  EXPECT_TRUE(st.ok()) << st.message();
  return path;
}

std::unique_ptr<Model> load(const std::string& path, int threads) {
  ModelOptions opt;
  opt.n_threads = threads;
  opt.max_batch_tokens = 256;
  auto m = Model::load(path, opt);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.message());
  return m.ok() ? std::move(m.value()) : nullptr;
}

std::vector<float> logits(Model& m, KvArena& kv, const std::vector<std::vector<int32_t>>& seqs,
                          size_t which, uint32_t first_block) {
  const int32_t bs = kv.config().block_size;
  std::vector<std::vector<uint32_t>> tables(seqs.size());
  std::vector<SeqInput> in;
  uint32_t next = first_block;
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (size_t b = 0; b < (seqs[i].size() + bs - 1) / bs; ++b) tables[i].push_back(next++);
    in.push_back({.tokens = seqs[i], .start_pos = 0, .block_table = tables[i], .all_logits = true});
  }
  const int32_t V = m.hparams().n_vocab;
  std::vector<float> all(Model::num_logit_rows(in) * V);
  EXPECT_TRUE(m.forward(in, kv, all.data()).ok());
  size_t off = 0;
  for (size_t i = 0; i < which; ++i) off += seqs[i].size() * V;
  return {all.begin() + off, all.begin() + off + seqs[which].size() * V};
}

std::vector<int32_t> tokens(int n, int32_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = (int32_t)(rng() % n_vocab);
  return t;
}

TEST(Qwen2Moe, ReadsAsRoutedPlusGatedSharedExpertAndIsBatchInvariant) {
  const std::string path = write_preset("qwen2moe", 41);
  auto m = load(path, 2);
  ASSERT_NE(m, nullptr);
  const ModelHParams& hp = m->hparams();
  EXPECT_EQ(hp.arch, "qwen2moe");
  EXPECT_EQ(hp.rope.style, RopeStyle::kNeox);
  EXPECT_TRUE(hp.qkv_bias);
  EXPECT_TRUE(hp.is_moe_layer(0));
  EXPECT_FALSE(hp.moe.norm_weights);
  EXPECT_GT(hp.moe.n_ff_shared, 0);
  EXPECT_FALSE(m->weights().layers[0].shexp_gate_inp.empty());
  KvArena kv(m->kv_config(64, 16, KvDtype::kF16));
  const auto probe = tokens(29, hp.n_vocab, 1);
  const auto alone = logits(*m, kv, {probe}, 0, 0);
  const auto batched =
      logits(*m, kv, {tokens(7, hp.n_vocab, 2), probe, tokens(40, hp.n_vocab, 3)}, 1, 10);
  EXPECT_EQ(0, std::memcmp(alone.data(), batched.data(), alone.size() * 4));
  auto m1 = load(path, 1);
  KvArena kv1(m1->kv_config(8, 16, KvDtype::kF16));
  const auto one_thread = logits(*m1, kv1, {probe}, 0, 0);
  EXPECT_EQ(0, std::memcmp(alone.data(), one_thread.data(), alone.size() * 4));
}

TEST(Qwen2Moe, SharedExpertGateMissingIsRefused) {
  const std::string good = write_preset("qwen2moe_good", 42);
  auto f = GgufFile::open(good);
  ASSERT_TRUE(f.ok());
  GgufWriter w;
  for (const auto& kv : (*f)->metadata()) w.set(kv.key, kv.value);
  for (const auto& t : (*f)->tensors()) {
    if (t.name == "blk.1.ffn_gate_inp_shexp.weight") continue;
    const uint8_t* p = (*f)->tensor_data(t);
    w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(p, p + t.num_bytes));
  }
  const std::string bad = ::testing::TempDir() + "/qwen2moe_nogate.gguf";
  ASSERT_TRUE(w.write(bad).ok());
  auto m = Model::load(bad, {});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("qwen2moe_nogate.gguf"), std::string::npos) << m.message();
  EXPECT_NE(m.message().find("blk.1.ffn_gate_inp_shexp.weight': missing"), std::string::npos)
      << m.message();
}

}  // namespace
}  // namespace kvw
