// Phi-3 / Phi-3.5 / Phi-4-mini files (GGUF arch phi3, llama.cpp's llama_model_phi3): fused
// attn_qkv (q, k, v rows) and ffn_up (gate rows, then up rows), NEOX rope over
// rope.dimension_count dims (Phi-4-mini: 3/4 of the head), LongRoPE's long or short per-pair
// divisors picked by the context the model is set up for, rope.scaling.attn_factor on cos and
// sin, an optional every-layer sliding window, tied or separate output. Logits are bit-identical
// alone, batched, chunked and across thread counts with f16 and int8 KV; each feature changes
// the logits; bad files are refused naming the tensor. Numerics against the independent
// reference: tests/reference (phi3_*); greedy text against llama.cpp: tests/reference/README.md.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "model_test_util.h"

namespace kvw {
namespace {

MakeModelSpec phi3_spec(uint64_t seed, const std::string& type = "f32") {
  return test::preset_spec("phi3-tiny", type, seed);
}

std::unique_ptr<Model> load_for_context(const std::string& path, int64_t max_model_len) {
  ModelOptions opt;
  opt.n_threads = 2;
  opt.max_batch_tokens = 256;
  opt.max_model_len = max_model_len;
  auto m = Model::load(path, opt);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.message());
  return m.ok() ? std::move(m.value()) : nullptr;
}

// All logits of one random 40-token prompt.
std::vector<float> probe_logits(Model& m) {
  KvArena kv(m.kv_config(8, 16, KvDtype::kF32));
  return test::run_batch(m, kv, {test::random_tokens(40, m.hparams().n_vocab, 5)})[0];
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(Phi3, ReadsFusedTensorsLongRopeAndWindow) {
  const std::string path = test::write_model("phi3_read", phi3_spec(70));
  auto m = test::load_model(path, 2);
  ASSERT_NE(m, nullptr);
  const ModelHParams& hp = m->hparams();
  EXPECT_EQ(hp.arch, "phi3");
  EXPECT_EQ(hp.head_dim, 32);
  EXPECT_EQ(hp.rope.n_rot, 32);
  EXPECT_EQ(hp.rope.style, RopeStyle::kNeox);
  EXPECT_EQ(hp.rope.scaling, RopeScaling::kNone);
  EXPECT_EQ(hp.rope.orig_ctx, 256);
  EXPECT_EQ(hp.n_ctx_train, 8192);
  // convert_hf_to_gguf.py: sqrt(1 + ln(8192 / 256) / ln(256)).
  EXPECT_NEAR(hp.rope.attn_factor, std::sqrt(1.0 + std::log(32.0) / std::log(256.0)), 1e-6);
  EXPECT_EQ(hp.sliding_window, 16384);
  EXPECT_TRUE(hp.gate_up_fused);
  EXPECT_FALSE(hp.tied_embeddings);
  const ModelWeights& w = m->weights();
  EXPECT_EQ(w.rope_long.size(), 16u);
  EXPECT_EQ(w.rope_short.size(), 16u);
  const LayerWeights& l = w.layers[1];
  // Q, K and V are consecutive row ranges of one attn_qkv; gate and up the halves of ffn_up.
  EXPECT_EQ(l.wq.n_rows, 128);
  EXPECT_EQ(l.wk.n_rows, 128);
  EXPECT_EQ(l.wv.n_rows, 128);
  const auto* q = static_cast<const uint8_t*>(l.wq.data);
  EXPECT_EQ(static_cast<const uint8_t*>(l.wk.data), q + 128 * l.wq.row_bytes);
  EXPECT_EQ(static_cast<const uint8_t*>(l.wv.data), q + 256 * l.wq.row_bytes);
  EXPECT_EQ(l.gate.n_rows, 256);
  EXPECT_EQ(static_cast<const uint8_t*>(l.up.data),
            static_cast<const uint8_t*>(l.gate.data) + 256 * l.gate.row_bytes);
}

// The same model with attn_qkv stored as attn_q, attn_k, attn_v (llama.cpp's loader takes either):
// bit-identical logits, so the split takes exactly the converter's row blocks.
TEST(Phi3, FusedQkvComputesAsSeparateTensors) {
  const std::string fused = test::write_model("phi3_fused", phi3_spec(71));
  const std::string split = test::rewrite(
      fused, "phi3_split_qkv", test::kNoMeta,
      [](GgufWriter& w, const GgufTensorInfo& t, const uint8_t* p) {
        if (t.name.find("attn_qkv") == std::string::npos) return true;
        const std::string blk = t.name.substr(0, t.name.find("attn_qkv"));
        const int64_t d = t.shape[0], rows = t.shape[1] / 3;  // MHA: q, k, v equally tall
        const uint64_t part = (uint64_t)rows * d * 4;
        const char* names[] = {"attn_q.weight", "attn_k.weight", "attn_v.weight"};
        for (int i = 0; i < 3; ++i)
          w.add_tensor(blk + names[i], t.type, {d, rows},
                       std::vector<uint8_t>(p + i * part, p + (i + 1) * part));
        return false;
      });
  auto a = test::load_model(fused, 1);
  auto b = test::load_model(split, 1);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(test::bit_equal(probe_logits(*a), probe_logits(*b)));
}

// llama.cpp's get_rope_factors: long factors when the context per sequence exceeds
// rope.scaling.original_context_length (256 here), short ones otherwise; 0 means the trained 8192.
TEST(Phi3, LongRopeFactorsPickedByTheContextTheModelIsSetUpFor) {
  const std::string path = test::write_model("phi3_longrope", phi3_spec(72));
  auto at256 = load_for_context(path, 256);
  auto at257 = load_for_context(path, 257);
  auto at0 = load_for_context(path, 0);
  ASSERT_NE(at256, nullptr);
  ASSERT_NE(at257, nullptr);
  ASSERT_NE(at0, nullptr);
  const ModelWeights& w = at0->weights();
  EXPECT_EQ(rope_factors(w, at0->hparams(), 256).data(), w.rope_short.data());
  EXPECT_EQ(rope_factors(w, at0->hparams(), 257).data(), w.rope_long.data());
  EXPECT_EQ(rope_factors(w, at0->hparams(), 0).data(), w.rope_long.data());
  const auto short_logits = probe_logits(*at256);
  const auto long_logits = probe_logits(*at257);
  EXPECT_TRUE(test::bit_equal(long_logits, probe_logits(*at0)));
  EXPECT_GT(max_abs_diff(short_logits, long_logits), 0.05f);
}

// rope.scaling.attn_factor 1 instead of the converter's 1.27: the logits move (cos and sin carry
// it, so attention scores scale by its square).
TEST(Phi3, AttnFactorChangesTheLogits) {
  const std::string good = test::write_model("phi3_attn", phi3_spec(73));
  const std::string unit = test::rewrite(
      good, "phi3_attn_one", [](GgufWriter& w) { w.set_f32("phi3.rope.scaling.attn_factor", 1); },
      test::kKeepAll);
  auto a = test::load_model(good, 1);
  auto b = test::load_model(unit, 1);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_GT(max_abs_diff(probe_logits(*a), probe_logits(*b)), 0.05f);
}

// Gate and up exchanged in ffn_up: silu(up) * gate is another model, so the order matters.
TEST(Phi3, GateUpHalvesAreGateThenUp) {
  const std::string good = test::write_model("phi3_gate_up", phi3_spec(74));
  const std::string swapped =
      test::rewrite(good, "phi3_up_gate", test::kNoMeta,
                    [](GgufWriter& w, const GgufTensorInfo& t, const uint8_t* p) {
                      if (t.name.find("ffn_up") == std::string::npos) return true;
                      const uint64_t half = t.num_bytes / 2;
                      std::vector<uint8_t> b(p + half, p + t.num_bytes);
                      b.insert(b.end(), p, p + half);
                      w.add_tensor(t.name, t.type, t.shape, std::move(b));
                      return false;
                    });
  auto a = test::load_model(good, 1);
  auto b = test::load_model(swapped, 1);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_GT(max_abs_diff(probe_logits(*a), probe_logits(*b)), 0.05f);
}

class Phi3Invariance : public ::testing::TestWithParam<const char*> {};

TEST_P(Phi3Invariance, LogitsBitIdenticalAloneBatchedChunkedAndAcrossThreads) {
  const std::string type = GetParam();
  const std::string path = test::write_model("phi3_inv_" + type, phi3_spec(75, type));
  test::expect_batch_invariant(path, KvDtype::kF16);
  test::expect_batch_invariant(path, KvDtype::kInt8);
  // With a window shorter than the 37-token probe (the every-layer window of llama files).
  MakeModelSpec windowed = phi3_spec(76, type);
  windowed.sliding_window = 16;
  const std::string wpath = test::write_model("phi3_inv_window_" + type, windowed);
  test::expect_batch_invariant(wpath, KvDtype::kF16);
  test::expect_batch_invariant(wpath, KvDtype::kInt8);
}
INSTANTIATE_TEST_SUITE_P(WeightTypes, Phi3Invariance, ::testing::Values("f32", "q8_0"));

TEST(Phi4Mini, ReadsPartialRotaryGqaAndTiedOutputAndIsBatchInvariant) {
  const std::string path =
      test::write_model("phi4_mini", test::preset_spec("phi4-mini-tiny", "f32", 77));
  auto m = test::load_model(path, 2);
  ASSERT_NE(m, nullptr);
  const ModelHParams& hp = m->hparams();
  EXPECT_EQ(hp.head_dim, 32);
  EXPECT_EQ(hp.rope.n_rot, 24);  // Phi-4-mini's partial_rotary_factor 0.75
  EXPECT_EQ(hp.n_head, 6);
  EXPECT_EQ(hp.n_head_kv, 2);
  EXPECT_EQ(hp.kv_dim(), 64);
  EXPECT_EQ(hp.sliding_window, 0);
  EXPECT_TRUE(hp.tied_embeddings);
  EXPECT_EQ(m->weights().rope_long.size(), 12u);
  EXPECT_EQ(m->weights().layers[0].wv.n_rows, 64);
  test::expect_batch_invariant(path, KvDtype::kF16);
  test::expect_batch_invariant(path, KvDtype::kInt8);
}

TEST(Phi3, FusedTensorsOfTheWrongShapeAreRefused) {
  const std::string good = test::write_model("phi3_good", phi3_spec(78));
  const std::string short_up =
      test::rewrite(good, "phi3_short_up", test::kNoMeta,
                    [](GgufWriter& w, const GgufTensorInfo& t, const uint8_t* p) {
                      if (t.name != "blk.1.ffn_up.weight") return true;
                      w.add_tensor(t.name, t.type, {t.shape[0], t.shape[1] / 2},
                                   std::vector<uint8_t>(p, p + t.num_bytes / 2));
                      return false;
                    });
  test::expect_refused(short_up, {"blk.1.ffn_up.weight': shape [128, 256], expected [128, 512]"});
  const std::string no_qkv = test::rewrite(
      good, "phi3_no_qkv", test::kNoMeta, [](GgufWriter&, const GgufTensorInfo& t, const uint8_t*) {
        return t.name != "blk.0.attn_qkv.weight";
      });
  test::expect_refused(no_qkv, {"blk.0.attn_q.weight': missing"});
  const std::string short_factors =
      test::rewrite(good, "phi3_short_factors", test::kNoMeta,
                    [](GgufWriter& w, const GgufTensorInfo& t, const uint8_t*) {
                      if (t.name != "rope_factors_long.weight") return true;
                      w.add_tensor(t.name, t.type, {8}, f32_bytes(std::vector<float>(8, 1.0f)));
                      return false;
                    });
  test::expect_refused(short_factors, {"rope_factors_long.weight': shape [8], expected [16]"});
}

TEST(Phi3MakeModel, FlagsAreChecked) {
  MakeModelSpec llama;
  llama.longrope = true;
  Status st = llama.validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--longrope needs --arch phi3"), std::string::npos) << st.message();
  MakeModelSpec s = test::preset_spec("phi3-tiny");
  s.rope_scaling = RopeScaling::kYarn;
  st = s.validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("LongRoPE"), std::string::npos) << st.message();
  s = test::preset_spec("phi3-tiny");
  s.n_rot = 34;  // > head length 32
  EXPECT_FALSE(s.validate().ok());
  s = test::preset_spec("phi3-tiny");
  s.head_dim = 64;  // attn_output is n_embd x n_embd in llama.cpp's phi3
  EXPECT_FALSE(s.validate().ok());
}

}  // namespace
}  // namespace kvw
