// gpt-oss files (GGUF arch gpt-oss, as llama.cpp's converter writes them): hyper-parameters and
// switches, the clamped SwiGLU and the top-k softmax routing on their own, bit-identical logits
// alone, batched, chunked and across thread counts with f16 and int8 KV (the probe crosses the
// preset's 16-token window), and refusals naming the tensor or key with expected vs found.
// Numerics against the independent float64 reference: tests/reference (gptoss_*).
#include <gtest/gtest.h>

#include <cmath>

#include "model/moe_router.h"
#include "model/oai_ops.h"
#include "model_test_util.h"

namespace kvw {
namespace {

TEST(GptOss, ReadsSinksBiasesWindowsRoutingAndYarn) {
  const std::string path =
      test::write_model("gptoss_read", test::preset_spec("gpt-oss-tiny", "f32", 90));
  auto m = test::load_model(path, 2);
  ASSERT_NE(m, nullptr);
  const ModelHParams& hp = m->hparams();
  EXPECT_EQ(hp.arch, "gpt-oss");
  EXPECT_EQ(hp.head_dim, 32);  // key_length: q is 8 x 32 = 256 wide over a 128 embedding
  EXPECT_EQ(hp.q_dim(), 256);
  EXPECT_EQ(hp.rope.style, RopeStyle::kNeox);
  EXPECT_EQ(hp.rope.scaling, RopeScaling::kYarn);
  EXPECT_EQ(hp.rope.scale_factor, 32.0f);
  EXPECT_EQ(hp.rope.orig_ctx, 64);
  EXPECT_EQ(hp.sliding_window, 16);
  for (int l = 0; l < 4; ++l) EXPECT_EQ(hp.is_swa_layer(l), l % 2 == 0) << l;
  EXPECT_EQ(hp.kv_window(), 0);  // global layers keep every block
  EXPECT_FALSE(hp.has_rope_swa);
  EXPECT_TRUE(hp.attn_sinks);
  EXPECT_TRUE(hp.attn_out_bias);
  EXPECT_TRUE(hp.qkv_bias);
  EXPECT_EQ(hp.ffn_act, FfnAct::kSwigluOai);
  EXPECT_EQ(hp.moe.gating, ExpertGating::kSoftmaxWeight);
  EXPECT_FALSE(hp.moe.norm_weights);
  EXPECT_TRUE(hp.moe.router_bias);
  EXPECT_TRUE(hp.moe.expert_bias);
  EXPECT_EQ(hp.moe.n_expert, 16);
  EXPECT_EQ(hp.moe.n_expert_used, 4);
  EXPECT_EQ(hp.moe.n_ff_exp, 64);
  for (int l = 0; l < 4; ++l) EXPECT_TRUE(hp.is_moe_layer(l));
  const LayerWeights& L = m->weights().layers[1];
  EXPECT_EQ(L.attn_sinks.size(), 8u);
  EXPECT_EQ(L.bo.size(), 128u);
  EXPECT_EQ(L.router_b.size(), 16u);
  EXPECT_EQ(L.gate_exps_b.size(), 16u * 64);
  EXPECT_EQ(L.down_exps_b.size(), 16u * 128);
  EXPECT_EQ(L.gate_exps.first.type, GgmlType::kMXFP4);
  EXPECT_EQ(L.down_exps.first.type, GgmlType::kMXFP4);
}

TEST(GptOss, SwigluOaiClampsGateAboveAndUpBothWays) {
  const float gate[] = {-2.0f, 0.5f, 10.0f, 3.0f};
  const float up[] = {0.0f, -9.0f, 1.0f, 12.0f};
  float out[4];
  swiglu_oai(gate, up, 4, out);
  auto expect = [](float g, float u) { return g / (1.0f + std::exp(-1.702f * g)) * (u + 1.0f); };
  EXPECT_FLOAT_EQ(out[0], expect(-2.0f, 0.0f));  // negative gates pass unclamped
  EXPECT_FLOAT_EQ(out[1], expect(0.5f, -7.0f));  // up clamped from below
  EXPECT_FLOAT_EQ(out[2], expect(7.0f, 1.0f));   // gate clamped at 7
  EXPECT_FLOAT_EQ(out[3], expect(3.0f, 7.0f));   // up clamped from above
}

TEST(GptOss, RouterTakesTheTopKLogitsThenASoftmaxOverThemOnly) {
  MoeParams m;
  m.n_expert = 5;
  m.n_expert_used = 2;
  m.gating = ExpertGating::kSoftmaxWeight;
  m.norm_weights = false;
  float logits[] = {0.5f, 3.0f, -1.0f, 2.0f, 2.5f};
  int32_t ids[2];
  float w[2], scratch[10];
  route_token(m, logits, nullptr, ids, w, scratch);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 4);
  // softmax([3, 2.5]): the unchosen experts take no share of the denominator.
  EXPECT_FLOAT_EQ(w[0], 1.0f / (1.0f + std::exp(-0.5f)));
  EXPECT_FLOAT_EQ(w[0] + w[1], 1.0f);
}

class GptOssInvariance : public ::testing::TestWithParam<const char*> {};

TEST_P(GptOssInvariance, LogitsBitIdenticalAloneBatchedChunkedAndAcrossThreads) {
  const std::string path = test::write_model(std::string("gptoss_inv_") + GetParam(),
                                             test::preset_spec("gpt-oss-tiny", GetParam(), 91));
  test::expect_batch_invariant(path, KvDtype::kF16);
  test::expect_batch_invariant(path, KvDtype::kInt8);
}
INSTANTIATE_TEST_SUITE_P(WeightTypes, GptOssInvariance, ::testing::Values("f32", "q8_0"));

std::string good_file(const char* name) {
  return test::write_model(name, test::preset_spec("gpt-oss-tiny", "f32", 92));
}

TEST(GptOss, MissingSinksAreRefusedNamingTheTensor) {
  const std::string bad =
      test::rewrite(good_file("gptoss_good_sinks"), "gptoss_no_sinks", test::kNoMeta,
                    [](GgufWriter&, const GgufTensorInfo& t, const uint8_t*) {
                      return t.name != "blk.2.attn_sinks.weight";
                    });
  test::expect_refused(bad, {"blk.2.attn_sinks.weight': missing"});
}

TEST(GptOss, SinksOfTheWrongShapeAreRefusedWithExpectedAndFound) {
  const std::string bad =
      test::rewrite(good_file("gptoss_good_shape"), "gptoss_sinks_shape", test::kNoMeta,
                    [](GgufWriter& w, const GgufTensorInfo& t, const uint8_t* p) {
                      if (t.name != "blk.1.attn_sinks.weight") return true;
                      // One sink per KV head (2) instead of per query head (8).
                      w.add_tensor(t.name, t.type, {2}, std::vector<uint8_t>(p, p + 8));
                      return false;
                    });
  test::expect_refused(bad, {"blk.1.attn_sinks.weight': shape [2], expected [8]"});
}

TEST(GptOss, MissingExpertBiasesAndWindowAreRefused) {
  const std::string good = good_file("gptoss_good_bias");
  const std::string no_bias =
      test::rewrite(good, "gptoss_no_down_bias", test::kNoMeta,
                    [](GgufWriter&, const GgufTensorInfo& t, const uint8_t*) {
                      return t.name != "blk.3.ffn_down_exps.bias";
                    });
  test::expect_refused(no_bias, {"blk.3.ffn_down_exps.bias': missing"});
  const std::string bad_shape = test::rewrite(
      good, "gptoss_gate_bias_shape", test::kNoMeta,
      [](GgufWriter& w, const GgufTensorInfo& t, const uint8_t* p) {
        if (t.name != "blk.0.ffn_gate_exps.bias") return true;
        w.add_tensor(t.name, t.type, {16, 64}, std::vector<uint8_t>(p, p + t.num_bytes));
        return false;
      });
  test::expect_refused(bad_shape, {"blk.0.ffn_gate_exps.bias': shape [16, 64], expected [64, 16]"});
  auto f = GgufFile::open(good);
  ASSERT_TRUE(f.ok());
  GgufWriter w;
  for (const auto& kv : (*f)->metadata()) {
    if (kv.key != "gpt-oss.attention.sliding_window") w.set(kv.key, kv.value);
  }
  for (const auto& t : (*f)->tensors()) {
    const uint8_t* p = (*f)->tensor_data(t);
    w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(p, p + t.num_bytes));
  }
  const std::string no_window = ::testing::TempDir() + "/gptoss_no_window.gguf";
  ASSERT_TRUE(w.write(no_window).ok());
  test::expect_refused(no_window, {"gpt-oss.attention.sliding_window': missing"});
}

// Sinks change every position's output: the same file with the sinks pushed to -inf (no share
// of any softmax) gives other logits, and with them at +60 the attention output is ~0, so all
// positions see only the biases and the residual.
TEST(GptOss, SinksTakeAShareOfEverySoftmax) {
  const std::string good = good_file("gptoss_good_sink_value");
  auto with_sinks = [&](const char* name, float value) {
    return test::rewrite(good, name, test::kNoMeta,
                         [value](GgufWriter& w, const GgufTensorInfo& t, const uint8_t*) {
                           if (!t.name.ends_with("attn_sinks.weight")) return true;
                           std::vector<float> v(t.shape[0], value);
                           std::vector<uint8_t> bytes(v.size() * 4);
                           std::memcpy(bytes.data(), v.data(), bytes.size());
                           w.add_tensor(t.name, t.type, t.shape, bytes);
                           return false;
                         });
  };
  const std::vector<int32_t> probe = test::random_tokens(20, 250, 5);
  std::vector<std::vector<float>> out;
  for (const std::string& path :
       {good, with_sinks("gptoss_sinks_off", -1e30f), with_sinks("gptoss_sinks_big", 60.0f)}) {
    auto m = test::load_model(path, 2);
    ASSERT_NE(m, nullptr);
    KvArena kv(m->kv_config(8, 16, KvDtype::kF32));
    out.push_back(test::run_batch(*m, kv, {probe})[0]);
  }
  float d_off = 0, d_big = 0;
  for (size_t i = 0; i < out[0].size(); ++i) {
    d_off = std::max(d_off, std::fabs(out[0][i] - out[1][i]));
    d_big = std::max(d_big, std::fabs(out[0][i] - out[2][i]));
  }
  EXPECT_GT(d_off, 0.1f);
  EXPECT_GT(d_big, 0.1f);
}

}  // namespace
}  // namespace kvw
