// Gemma-2 and Gemma-3 text files (GGUF arch gemma2 / gemma3, as llama.cpp's converter writes
// them): hyper-parameters and their llama.cpp defaults, which layers are windowed, the local
// layers' own rope, bit-identical logits alone, batched, chunked and across thread counts with
// f16 and int8 KV (the 37-token probe crosses the preset's 16-token window), and refusals.
// Numerics against the independent reference: tests/reference (gemma2_*, gemma3_*).
#include <gtest/gtest.h>

#include <cmath>

#include "model_test_util.h"

namespace kvw {
namespace {

TEST(Gemma2, ReadsLlamaCppDefaultsAndAlternatingWindows) {
  const std::string path =
      test::write_model("gemma2_read", test::preset_spec("gemma2-tiny", "f32", 80));
  auto m = test::load_model(path, 2);
  ASSERT_NE(m, nullptr);
  const ModelHParams& hp = m->hparams();
  EXPECT_EQ(hp.arch, "gemma2");
  EXPECT_EQ(hp.head_dim, 64);  // key_length, not n_embd / n_head = 32
  EXPECT_EQ(hp.rope.style, RopeStyle::kNeox);
  EXPECT_EQ(hp.rope.freq_base, 10000.0f);  // the converter writes no rope.freq_base
  EXPECT_EQ(hp.sliding_window, 16);
  EXPECT_EQ(hp.swa_period, 2);
  for (int l = 0; l < 4; ++l) EXPECT_EQ(hp.is_swa_layer(l), l % 2 == 0) << l;
  EXPECT_EQ(hp.kv_window(), 0);  // global layers read every block: none may be released
  EXPECT_TRUE(hp.has_rope_swa);
  EXPECT_EQ(hp.rope_swa.freq_base, 10000.0f);
  EXPECT_EQ(hp.gemma.attn_softcap, 50.0f);
  EXPECT_EQ(hp.gemma.final_softcap, 30.0f);
  EXPECT_TRUE(hp.gemma.scale_embd);
  EXPECT_TRUE(hp.gemma.post_norms);
  EXPECT_EQ(hp.ffn_act, FfnAct::kGeluTanh);
  EXPECT_FLOAT_EQ(hp.attn_scale, 1.0f / 8.0f);  // 1 / sqrt(head_dim)
  EXPECT_FALSE(hp.qk_norm);
  EXPECT_TRUE(hp.tied_embeddings);
  const LayerWeights& l = m->weights().layers[3];
  EXPECT_EQ(l.post_attn_norm.size(), 128u);
  EXPECT_EQ(l.post_ffw_norm.size(), 128u);
}

TEST(Gemma2, DefaultsWindowAndCapsWhenTheKeysAreAbsent) {
  const std::string good =
      test::write_model("gemma2_keys", test::preset_spec("gemma2-tiny", "f32", 81));
  auto f = GgufFile::open(good);
  ASSERT_TRUE(f.ok());
  GgufWriter w;
  for (const auto& kv : (*f)->metadata()) {
    if (kv.key == "gemma2.attention.sliding_window" || kv.key.ends_with("logit_softcapping"))
      continue;
    w.set(kv.key, kv.value);
  }
  for (const auto& t : (*f)->tensors()) {
    const uint8_t* p = (*f)->tensor_data(t);
    w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(p, p + t.num_bytes));
  }
  const std::string bare = ::testing::TempDir() + "/gemma2_no_keys.gguf";
  ASSERT_TRUE(w.write(bare).ok());
  auto m = test::load_model(bare, 1);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->hparams().sliding_window, 4096);
  EXPECT_EQ(m->hparams().gemma.attn_softcap, 50.0f);
  EXPECT_EQ(m->hparams().gemma.final_softcap, 30.0f);
}

// llama.cpp takes the 27B models' query_pre_attn_scalar (n_embd / n_head, not head_dim) from
// their layer count: 46 for gemma2, 62 for gemma3.
TEST(Gemma, TwentySevenBShapesScaleScoresByEmbeddingPerHead) {
  for (const char* preset : {"gemma2-tiny", "gemma3-tiny"}) {
    MakeModelSpec s = test::preset_spec(preset, "f32", 82);
    s.n_layer = std::string(preset) == "gemma2-tiny" ? 46 : 62;
    auto m = test::load_model(test::write_model(std::string("gemma_27b_") + preset, s), 1);
    ASSERT_NE(m, nullptr);
    EXPECT_FLOAT_EQ(m->hparams().attn_scale, 1.0f / std::sqrt(32.0f)) << preset;
  }
}

TEST(Gemma3, ReadsFiveLocalLayersPerGlobalWithTheirOwnUnscaledRope) {
  MakeModelSpec s = test::preset_spec("gemma3-tiny", "f32", 83);
  s.rope_scaling = RopeScaling::kLinear;
  s.rope_scale = 8.0f;
  auto m = test::load_model(test::write_model("gemma3_read", s), 2);
  ASSERT_NE(m, nullptr);
  const ModelHParams& hp = m->hparams();
  EXPECT_EQ(hp.arch, "gemma3");
  EXPECT_EQ(hp.swa_period, 6);
  for (int l = 0; l < 6; ++l) EXPECT_EQ(hp.is_swa_layer(l), l != 5) << l;
  EXPECT_EQ(hp.kv_window(), 0);
  EXPECT_EQ(hp.layer_rope(5).freq_base, 1e6f);
  EXPECT_EQ(hp.layer_rope(5).scaling, RopeScaling::kLinear);
  EXPECT_EQ(hp.layer_rope(0).freq_base, 1e4f);
  EXPECT_EQ(hp.layer_rope(0).scaling, RopeScaling::kNone);
  EXPECT_EQ(hp.gemma.attn_softcap, 0.0f);
  EXPECT_EQ(hp.gemma.final_softcap, 0.0f);
  EXPECT_TRUE(hp.qk_norm);
  EXPECT_EQ(m->weights().layers[0].q_norm.size(), 64u);
  EXPECT_EQ(hp.n_head_kv, 1);
}

TEST(Gemma3, WithoutAWindowEveryLayerIsGlobal) {
  MakeModelSpec s = test::preset_spec("gemma3-tiny", "f32", 84);
  s.sliding_window = 0;
  auto m = test::load_model(test::write_model("gemma3_no_window", s), 1);
  ASSERT_NE(m, nullptr);
  EXPECT_FALSE(m->hparams().has_rope_swa);
  for (int l = 0; l < 6; ++l) EXPECT_FALSE(m->hparams().is_swa_layer(l));
}

class GemmaInvariance : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {};

TEST_P(GemmaInvariance, LogitsBitIdenticalAloneBatchedChunkedAndAcrossThreads) {
  const auto [preset, type] = GetParam();
  const std::string path = test::write_model(std::string("gemma_inv_") + preset + "_" + type,
                                             test::preset_spec(preset, type, 85));
  test::expect_batch_invariant(path, KvDtype::kF16);
  test::expect_batch_invariant(path, KvDtype::kInt8);
}
INSTANTIATE_TEST_SUITE_P(PresetsAndWeightTypes, GemmaInvariance,
                         ::testing::Combine(::testing::Values("gemma2-tiny", "gemma3-tiny"),
                                            ::testing::Values("f32", "q8_0")));

// The global layers read every position, so a block behind the window is no hole the model
// may skip (llama-style all-window files may have them).
TEST(Gemma2, ReleasedBlockBehindTheWindowIsRefused) {
  auto m = test::load_model(
      test::write_model("gemma2_hole", test::preset_spec("gemma2-tiny", "f32", 86)), 1);
  ASSERT_NE(m, nullptr);
  KvArena kv(m->kv_config(8, 16, KvDtype::kF32));
  const std::vector<int32_t> tok = {5};
  const std::vector<uint32_t> table = {0xffffffffu, 0xffffffffu, 2};
  SeqInput in{.tokens = tok, .start_pos = 40, .block_table = table};
  std::vector<float> logits(m->hparams().n_vocab);
  const Status st = m->forward({&in, 1}, kv, logits.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("hole inside the attention window"), std::string::npos)
      << st.message();
}

TEST(Gemma2, MissingPostFfwNormIsRefused) {
  const std::string good =
      test::write_model("gemma2_good", test::preset_spec("gemma2-tiny", "f32", 87));
  const std::string bad = test::rewrite(good, "gemma2_no_post_ffw", test::kNoMeta,
                                        [](GgufWriter&, const GgufTensorInfo& t, const uint8_t*) {
                                          return t.name != "blk.2.post_ffw_norm.weight";
                                        });
  test::expect_refused(bad, {"blk.2.post_ffw_norm.weight': missing"});
}

TEST(Gemma3, MissingQNormIsRefused) {
  const std::string good =
      test::write_model("gemma3_good", test::preset_spec("gemma3-tiny", "f32", 88));
  const std::string bad = test::rewrite(good, "gemma3_no_q_norm", test::kNoMeta,
                                        [](GgufWriter&, const GgufTensorInfo& t, const uint8_t*) {
                                          return t.name != "blk.4.attn_q_norm.weight";
                                        });
  test::expect_refused(bad, {"blk.4.attn_q_norm.weight': missing"});
}

}  // namespace
}  // namespace kvw
