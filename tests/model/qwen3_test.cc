// Qwen3 files (GGUF arch qwen3, and qwen3moe: the same attention with every layer routed,
// softmax top-k renormalised, no shared expert): heads longer than n_embd / n_head (key_length
// = value_length), per-head Q/K RMSNorm before NEOX rope, no biases, tied or separate output.
// Logits are bit-identical alone, batched, chunked and across thread counts with f16 and int8 KV;
// the norms change the logits; bad files are refused naming the key or tensor. Numerics against
// the independent reference: tests/reference (qwen3_*); greedy tokens against llama.cpp: the note
// in tests/reference/README.md.
#include <gtest/gtest.h>

#include <cstring>

#include "model_test_util.h"

namespace kvw {
namespace {

MakeModelSpec qwen3_spec(uint64_t seed, bool tied = true, const std::string& type = "f32") {
  MakeModelSpec s = test::preset_spec("qwen3-tiny", type, seed);
  s.tied = tied;
  return s;
}

TEST(Qwen3, ReadsHeadLengthQkNormsAndNeoxRope) {
  const std::string path = test::write_model("qwen3_read", qwen3_spec(60));
  auto m = test::load_model(path, 2);
  ASSERT_NE(m, nullptr);
  const ModelHParams& hp = m->hparams();
  EXPECT_EQ(hp.arch, "qwen3");
  EXPECT_EQ(hp.n_embd, 128);
  EXPECT_EQ(hp.head_dim, 64);  // key_length, not n_embd / n_head = 32
  EXPECT_EQ(hp.q_dim(), 256);
  EXPECT_EQ(hp.kv_dim(), 128);
  EXPECT_EQ(hp.rope.n_rot, 64);
  EXPECT_EQ(hp.rope.style, RopeStyle::kNeox);
  EXPECT_TRUE(hp.qk_norm);
  EXPECT_FALSE(hp.qkv_bias);
  EXPECT_TRUE(hp.tied_embeddings);
  const LayerWeights& l = m->weights().layers[1];
  EXPECT_EQ(l.q_norm.size(), 64u);
  EXPECT_EQ(l.k_norm.size(), 64u);
  EXPECT_TRUE(l.bq.empty());
  EXPECT_EQ(l.wo.n_in, 256);
}

class Qwen3Invariance : public ::testing::TestWithParam<const char*> {};

TEST_P(Qwen3Invariance, LogitsBitIdenticalAloneBatchedChunkedAndAcrossThreads) {
  const std::string type = GetParam();
  const std::string path = test::write_model("qwen3_inv_" + type, qwen3_spec(61, false, type));
  test::expect_batch_invariant(path, KvDtype::kF16);
  test::expect_batch_invariant(path, KvDtype::kInt8);
}
INSTANTIATE_TEST_SUITE_P(WeightTypes, Qwen3Invariance, ::testing::Values("f32", "q8_0"));

// Unit Q/K norm weights instead of the drawn ones: the logits must move (the forward reads them).
TEST(Qwen3, QkNormWeightsChangeTheLogits) {
  const std::string good = test::write_model("qwen3_norms", qwen3_spec(62, false));
  const std::string ones =
      test::rewrite(good, "qwen3_unit_norms", test::kNoMeta,
                    [](GgufWriter& w, const GgufTensorInfo& t, const uint8_t*) {
                      if (t.name.find(".attn_q_norm") == std::string::npos &&
                          t.name.find(".attn_k_norm") == std::string::npos)
                        return true;
                      std::vector<float> v(t.shape[0], 1.0f);
                      std::vector<uint8_t> bytes(v.size() * 4);
                      std::memcpy(bytes.data(), v.data(), bytes.size());
                      w.add_tensor(t.name, t.type, t.shape, std::move(bytes));
                      return false;
                    });
  auto a = test::load_model(good, 1);
  auto b = test::load_model(ones, 1);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  KvArena kva(a->kv_config(8, 16, KvDtype::kF32)), kvb(b->kv_config(8, 16, KvDtype::kF32));
  const auto probe = test::random_tokens(20, a->hparams().n_vocab, 3);
  const auto la = test::run_batch(*a, kva, {probe})[0];
  const auto lb = test::run_batch(*b, kvb, {probe})[0];
  float max_diff = 0;
  for (size_t i = 0; i < la.size(); ++i) max_diff = std::max(max_diff, std::abs(la[i] - lb[i]));
  EXPECT_GT(max_diff, 0.05f);
}

TEST(Qwen3, MissingKNormIsRefused) {
  const std::string good = test::write_model("qwen3_good", qwen3_spec(63));
  const std::string bad = test::rewrite(good, "qwen3_no_k_norm", test::kNoMeta,
                                        [](GgufWriter&, const GgufTensorInfo& t, const uint8_t*) {
                                          return t.name != "blk.1.attn_k_norm.weight";
                                        });
  test::expect_refused(bad, {"blk.1.attn_k_norm.weight': missing"});
}

TEST(Qwen3, QNormOfTheWrongLengthIsRefused) {
  const std::string good = test::write_model("qwen3_good2", qwen3_spec(64));
  const std::string bad =
      test::rewrite(good, "qwen3_short_q_norm", test::kNoMeta,
                    [](GgufWriter& w, const GgufTensorInfo& t, const uint8_t* p) {
                      if (t.name != "blk.0.attn_q_norm.weight") return true;
                      w.add_tensor(t.name, t.type, {32}, std::vector<uint8_t>(p, p + 32 * 4));
                      return false;
                    });
  test::expect_refused(bad, {"blk.0.attn_q_norm.weight': shape [32], expected [64]"});
}

TEST(Qwen3, ValueLengthOtherThanKeyLengthIsRefused) {
  const std::string good = test::write_model("qwen3_good3", qwen3_spec(65));
  const std::string bad = test::rewrite(
      good, "qwen3_value_length",
      [](GgufWriter& w) { w.set_u32("qwen3.attention.value_length", 32); }, test::kKeepAll);
  test::expect_refused(bad, {"qwen3.attention.value_length': 32, expected key_length 64"});
}

TEST(Qwen3Moe, ReadsAsRenormalisedTopKWithoutSharedExpertAndIsBatchInvariant) {
  const std::string path =
      test::write_model("qwen3moe_read", test::preset_spec("qwen3moe-tiny", "f32", 66));
  auto m = test::load_model(path, 2);
  ASSERT_NE(m, nullptr);
  const ModelHParams& hp = m->hparams();
  EXPECT_EQ(hp.arch, "qwen3moe");
  EXPECT_EQ(hp.head_dim, 64);
  EXPECT_TRUE(hp.qk_norm);
  EXPECT_EQ(hp.rope.style, RopeStyle::kNeox);
  EXPECT_TRUE(hp.is_moe_layer(0));
  EXPECT_EQ(hp.moe.n_expert, 16);
  EXPECT_EQ(hp.moe.n_expert_used, 4);
  EXPECT_EQ(hp.moe.n_ff_exp, 64);
  EXPECT_TRUE(hp.moe.norm_weights);
  EXPECT_EQ(hp.moe.gating, ExpertGating::kSoftmax);
  EXPECT_EQ(hp.moe.n_ff_shared, 0);
  EXPECT_FALSE(hp.tied_embeddings);
  EXPECT_EQ(m->weights().layers[1].k_norm.size(), 64u);
  test::expect_batch_invariant(path, KvDtype::kF16);
  test::expect_batch_invariant(path, KvDtype::kInt8);
}

TEST(Qwen3Moe, WithoutExpertsIsRefusedNamingTheKey) {
  const std::string good =
      test::write_model("qwen3moe_good", test::preset_spec("qwen3moe-tiny", "f32", 67));
  const std::string bad = test::rewrite(
      good, "qwen3moe_no_experts", [](GgufWriter& w) { w.set_u32("qwen3moe.expert_count", 0); },
      test::kKeepAll);
  test::expect_refused(bad, {"qwen3moe.expert_count': qwen3moe needs > 0, found 0"});
}

TEST(Qwen3MakeModel, HeadDimNeedsQwen3AndFlagsAreChecked) {
  MakeModelSpec s;  // llama
  s.head_dim = 64;
  Status st = s.validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--head-dim needs --arch "), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("qwen3"), std::string::npos) << st.message();
  MakeModelSpec moe = test::preset_spec("qwen3moe-tiny");
  EXPECT_TRUE(moe.validate().ok());
  moe.n_ff_shexp = 64;  // qwen3moe has no shared expert
  EXPECT_FALSE(moe.validate().ok());
  moe.n_ff_shexp = 0;
  moe.n_expert = 0;
  EXPECT_FALSE(moe.validate().ok());
  MakeModelSpec q = qwen3_spec(1);
  EXPECT_TRUE(q.validate().ok());
  q.sliding_window = 16;
  EXPECT_FALSE(q.validate().ok());
  q = qwen3_spec(1);
  q.head_dim = 30;  // q_dim 120: not a q8_0 block multiple
  q.weight_type = GgmlType::kQ8_0;
  EXPECT_FALSE(q.validate().ok());
  q.head_dim = 0;  // n_embd / n_head
  q.weight_type = GgmlType::kF32;
  EXPECT_TRUE(q.validate().ok());
}

}  // namespace
}  // namespace kvw
