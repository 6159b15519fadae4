// DeepSeek-V2/V3 files (GGUF arch deepseek2: multi-head latent attention, shared experts) in the
// model: the cache holds one latent row per token, logits are bit-identical alone, batched,
// chunked and with any thread count (both tensor layouts, every KV dtype), the two layouts of
// the same weights agree, and inconsistent MLA tensors are refused at load naming the tensor.
// Numerics against the independent reference: tests/reference (deepseek2_* cases).
#include <gtest/gtest.h>

#include <cmath>

#include "model_test_util.h"

namespace kvw {
namespace {

using test::bit_equal;
using test::expect_refused;
using test::kKeepAll;
using test::random_tokens;
using test::rewrite;
using test::run_batch;
using test::write_model;

MakeModelSpec preset(const std::string& name, const std::string& type = "f32") {
  return test::preset_spec(name, type, 31);
}

std::unique_ptr<Model> load(const std::string& path, int threads) {
  return test::load_model(path, threads);
}

struct MlaCase {
  std::string preset, weights, kv;
};

class MlaForwardTest : public ::testing::TestWithParam<MlaCase> {};

TEST_P(MlaForwardTest, LogitsAreBitIdenticalAloneBatchedChunkedAndAcrossThreads) {
  const MlaCase& c = GetParam();
  const std::string path =
      write_model("mla_" + c.preset + "_" + c.weights, preset(c.preset, c.weights));
  auto m = load(path, 1);
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->hparams().mla.is_mla());
  test::expect_batch_invariant(path, *parse_kv_dtype(c.kv));
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
