// DeepSeek-V2/V3 files (GGUF arch deepseek2: multi-head latent attention, shared experts) in the
// model: the cache holds one latent row per token, logits are bit-identical alone, batched,
// chunked and with any thread count (both tensor layouts, every KV dtype), the two layouts of
// the same weights agree, and inconsistent MLA tensors are refused at load naming the tensor.
// Numerics against the independent reference: tests/reference (deepseek2_* cases).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/model.h"
#include "model/model_maker.h"

namespace kvw {
namespace {

MakeModelSpec preset(const std::string& name, const std::string& type = "f32") {
  auto s = make_model_preset(name);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.message());
  s->weight_type = *ggml_type_from_name(type);
  s->seed = 31;
  return *s;
}

std::string write_model(const std::string& name, const MakeModelSpec& spec) {
  const std::string path = ::testing::TempDir() + "/" + name + ".gguf";
  Status st = make_model(spec, path);
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

std::vector<int32_t> random_tokens(int n, int32_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = (int32_t)(rng() % n_vocab);
  return t;
}

// Every sequence's prompt with all logits, in one forward call, blocks from `first_block` on.
std::vector<std::vector<float>> run_batch(Model& m, KvArena& kv,
                                          const std::vector<std::vector<int32_t>>& seqs,
                                          uint32_t first_block = 0) {
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

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

struct MlaCase {
  std::string preset, weights, kv;
};

class MlaForwardTest : public ::testing::TestWithParam<MlaCase> {};

TEST_P(MlaForwardTest, LogitsAreBitIdenticalAloneBatchedChunkedAndAcrossThreads) {
  const MlaCase& c = GetParam();
  const std::string path =
      write_model("mla_" + c.preset + "_" + c.weights, preset(c.preset, c.weights));
  auto m = load(path, 2);
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->hparams().mla.is_mla());
  const KvDtype dtype = *parse_kv_dtype(c.kv);
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
  // Chunks of 16, 16, 4, then one decode token, in other blocks.
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
    auto mt = load(path, threads);
    KvArena kvt(mt->kv_config(8, 16, dtype));
    EXPECT_TRUE(bit_equal(run_batch(*mt, kvt, {probe})[0], alone)) << threads << " threads";
  }
}

INSTANTIATE_TEST_SUITE_P(PresetsAndTypes, MlaForwardTest,
                         ::testing::Values(MlaCase{"deepseek-v2-lite-tiny", "f32", "f16"},
                                           MlaCase{"deepseek-v2-lite-tiny", "q8_0", "int8"},
                                           MlaCase{"deepseek-v3-tiny", "f32", "f32"},
                                           MlaCase{"deepseek-v3-tiny", "f16", "bf16"}),
                         [](const auto& info) {
                           std::string n =
                               info.param.preset + "_" + info.param.weights + "_" + info.param.kv;
                           for (char& ch : n) ch = std::isalnum((unsigned char)ch) ? ch : '_';
                           return n;
                         });

// One row of kv_lora_rank + rope dims per token and layer, for K and V together.
TEST(MlaCache, OneLatentRowPerTokenAndLayer) {
  auto m = load(write_model("mla_cache", preset("deepseek-v2-lite-tiny")), 1);
  ASSERT_NE(m, nullptr);
  const MlaParams& p = m->hparams().mla;
  const uint64_t row = (uint64_t)(p.kv_lora_rank + p.qk_rope_dim);
  const KvArenaConfig f16 = m->kv_config(4, 16, KvDtype::kF16);
  EXPECT_EQ(f16.n_kv_heads, 1);
  EXPECT_TRUE(f16.shared_kv);
  EXPECT_EQ(KvArena::block_bytes(f16), (uint64_t)m->hparams().n_layer * 16 * row * 2);
  const KvArenaConfig int8 = m->kv_config(4, 16, KvDtype::kInt8);
  EXPECT_EQ(KvArena::block_bytes(int8), (uint64_t)m->hparams().n_layer * 16 * (row + 4));
}

// kv_b (older converters) and split attn_k_b / attn_v_b files of one seed hold the same weights:
// the transposed-row absorption and the per-head GEMM give the same logits up to rounding.
TEST(MlaLayouts, FusedAndSplitFilesAgree) {
  MakeModelSpec s = preset("deepseek-v2-lite-tiny");
  s.mla_layout = MlaLayout::kKvB;
  auto a = load(write_model("mla_kvb", s), 2);
  s.mla_layout = MlaLayout::kSplit;
  auto b = load(write_model("mla_split", s), 2);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_FALSE(a->hparams().mla.split_kv_b);
  EXPECT_TRUE(b->hparams().mla.split_kv_b);
  KvArena kva(a->kv_config(8, 16, KvDtype::kF32)), kvb(b->kv_config(8, 16, KvDtype::kF32));
  const auto tokens = random_tokens(40, a->hparams().n_vocab, 5);
  const auto la = run_batch(*a, kva, {tokens})[0], lb = run_batch(*b, kvb, {tokens})[0];
  ASSERT_EQ(la.size(), lb.size());
  float max_diff = 0.0f, max_abs = 0.0f;
  for (size_t i = 0; i < la.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(la[i] - lb[i]));
    max_abs = std::max(max_abs, std::fabs(la[i]));
  }
  EXPECT_LT(max_diff, 1e-4f);
  EXPECT_GT(max_abs, 0.1f);  // logits are not all ~0
}

// Copies `src` to a new file, letting `meta` change metadata and `tensors` add, drop or replace
// tensors (return false to drop).
using TensorEdit = std::function<bool(GgufWriter&, const GgufTensorInfo&, const uint8_t*)>;
std::string rewrite(const std::string& src, const std::string& name,
                    const std::function<void(GgufWriter&)>& meta, const TensorEdit& tensors) {
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

const auto kKeepAll = [](GgufWriter&, const GgufTensorInfo&, const uint8_t*) { return true; };

void expect_refused(const std::string& path, const std::vector<std::string>& parts) {
  auto m = Model::load(path, {});
  ASSERT_FALSE(m.ok());
  const std::string file = path.substr(path.find_last_of('/') + 1);
  EXPECT_NE(m.message().find(file), std::string::npos) << m.message();
  for (const auto& p : parts) EXPECT_NE(m.message().find(p), std::string::npos) << m.message();
}

class MlaBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    kvb_ = write_model("mla_good_kvb", preset("deepseek-v2-lite-tiny"));
    split_ = write_model("mla_good_split", preset("deepseek-v3-tiny"));
  }
  std::string kvb_, split_;
};

TEST_F(MlaBadInput, RankThatDoesNotMatchTheLatentProjection) {
  // kv_lora_rank 64 in the tensors, 96 in the metadata.
  const std::string bad = rewrite(
      kvb_, "mla_rank96", [](GgufWriter& w) { w.set_u32("deepseek2.attention.kv_lora_rank", 96); },
      kKeepAll);
  expect_refused(bad, {"blk.0.attn_kv_a_mqa.weight", "expected [128, 112]"});
}

TEST_F(MlaBadInput, FusedKvBWithTheWrongShape) {
  const std::string bad = rewrite(
      kvb_, "mla_kvb_short", [](GgufWriter&) {},
      [](GgufWriter& w, const GgufTensorInfo& t, const uint8_t* p) {
        if (t.name != "blk.1.attn_kv_b.weight") return true;
        w.add_tensor(t.name, t.type, {t.shape[0], t.shape[1] - 4},
                     std::vector<uint8_t>(p, p + t.num_bytes / t.shape[1] * (t.shape[1] - 4)));
        return false;
      });
  expect_refused(bad, {"blk.1.attn_kv_b.weight", "shape [64, 252]", "expected [64, 256]"});
}

TEST_F(MlaBadInput, SplitValueProjectionMissing) {
  const std::string bad = rewrite(
      split_, "mla_no_vb", [](GgufWriter&) {},
      [](GgufWriter&, const GgufTensorInfo& t, const uint8_t*) {
        return t.name != "blk.2.attn_v_b.weight";
      });
  expect_refused(bad, {"blk.2.attn_v_b.weight", "missing"});
}

TEST_F(MlaBadInput, SharedExpertsMissing) {
  const std::string bad = rewrite(
      kvb_, "mla_no_shexp", [](GgufWriter&) {},
      [](GgufWriter&, const GgufTensorInfo& t, const uint8_t*) {
        return t.name != "blk.1.ffn_down_shexp.weight";
      });
  expect_refused(bad, {"blk.1.ffn_down_shexp.weight", "missing"});
}

TEST_F(MlaBadInput, UnknownGatingFunction) {
  const std::string bad = rewrite(
      split_, "mla_gating3", [](GgufWriter& w) { w.set_u32("deepseek2.expert_gating_func", 3); },
      kKeepAll);
  expect_refused(bad, {"deepseek2.expert_gating_func", "found 3"});
}

TEST_F(MlaBadInput, MoreExpertsUsedThanTheGroupsHold) {
  // 8 experts in 4 groups of 2, 2 groups used: at most 4 experts are reachable.
  const std::string bad = rewrite(
      split_, "mla_used5", [](GgufWriter& w) { w.set_u32("deepseek2.expert_used_count", 5); },
      kKeepAll);
  expect_refused(bad, {"deepseek2.expert_used_count", "expected at most 4", "found 5"});
}

}  // namespace
}  // namespace kvw
