// Qwen1.5-MoE / Qwen2-57B-A14B files (GGUF arch qwen2moe): qwen2 attention with every layer
// routed (softmax top-k, weights not renormalised) plus one shared expert scaled by a per-token
// sigmoid gate. Logits are bit-identical alone, batched and across thread counts, and a file
// without the shared expert's gate is refused naming the tensor. Numerics against the
// independent reference: tests/reference (qwen2moe_f32).
#include <gtest/gtest.h>

#include "model_test_util.h"

namespace kvw {
namespace {

std::string write_preset(const std::string& name, uint64_t seed) {
  return test::write_model(name, test::preset_spec("qwen2moe-tiny", "f32", seed));
}

TEST(Qwen2Moe, ReadsAsRoutedPlusGatedSharedExpertAndIsBatchInvariant) {
  const std::string path = write_preset("qwen2moe", 41);
  auto m = test::load_model(path, 2);
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
  const auto probe = test::random_tokens(29, hp.n_vocab, 1);
  const auto alone = test::run_batch(*m, kv, {probe})[0];
  const std::vector<std::vector<int32_t>> batch = {test::random_tokens(7, hp.n_vocab, 2), probe,
                                                   test::random_tokens(40, hp.n_vocab, 3)};
  EXPECT_TRUE(test::bit_equal(alone, test::run_batch(*m, kv, batch, 10)[1]));
  auto m1 = test::load_model(path, 1);
  KvArena kv1(m1->kv_config(8, 16, KvDtype::kF16));
  EXPECT_TRUE(test::bit_equal(alone, test::run_batch(*m1, kv1, {probe})[0]));
}

TEST(Qwen2Moe, SharedExpertGateMissingIsRefused) {
  const std::string good = write_preset("qwen2moe_good", 42);
  const std::string bad = test::rewrite(good, "qwen2moe_nogate", test::kNoMeta,
                                        [](GgufWriter&, const GgufTensorInfo& t, const uint8_t*) {
                                          return t.name != "blk.1.ffn_gate_inp_shexp.weight";
                                        });
  test::expect_refused(bad, {"blk.1.ffn_gate_inp_shexp.weight': missing"});
}

}  // namespace
}  // namespace kvw
