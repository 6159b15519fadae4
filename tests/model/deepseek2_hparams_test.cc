// deepseek2 GGUF metadata under llama.cpp's key names, in both layouts that exist (per-head
// lengths in key_length / value_length with attn_kv_b; or key_length = kv_lora_rank + rope with
// key_length_mla / value_length_mla beside attn_k_b / attn_v_b) and DeepSeek's routing knobs
// (the planner's view: tests/planner/source_test.cc; the engine's: mla_test.cc).
#include <gtest/gtest.h>

#include <functional>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/hparams.h"
#include "model/model.h"

namespace kvw {
namespace {

// DeepSeek-V2-Lite's metadata at a small width: 64 experts (6 used, 2 shared), one leading dense
// layer, softmax routing, no Q compression, kv_lora_rank 512 with 64 rope dims, YaRN. `skip`
// leaves one key out.
void v2_lite_keys_but(GgufWriter& w, const std::string& skip) {
  const std::string a = "deepseek2.";
  auto u32 = [&](const std::string& k, uint32_t v) {
    if (a + k != skip) w.set_u32(a + k, v);
  };
  auto f32 = [&](const std::string& k, float v) {
    if (a + k != skip) w.set_f32(a + k, v);
  };
  w.set_string("general.architecture", "deepseek2");
  u32("context_length", 163840);
  u32("embedding_length", 256);
  u32("block_count", 3);
  u32("feed_forward_length", 1024);
  u32("attention.head_count", 16);
  u32("attention.head_count_kv", 16);
  f32("attention.layer_norm_rms_epsilon", 1e-6f);
  f32("rope.freq_base", 10000.0f);
  u32("rope.dimension_count", 64);
  w.set_string(a + "rope.scaling.type", "yarn");
  f32("rope.scaling.factor", 40.0f);
  u32("rope.scaling.original_context_length", 4096);
  f32("rope.scaling.yarn_log_multiplier", 0.0707f);
  u32("attention.kv_lora_rank", 512);
  u32("attention.key_length", 192);
  u32("attention.value_length", 128);
  u32("leading_dense_block_count", 1);
  u32("expert_count", 64);
  u32("expert_used_count", 6);
  u32("expert_shared_count", 2);
  u32("expert_feed_forward_length", 128);
  f32("expert_weights_scale", 1.0f);
}

void v2_lite_keys(GgufWriter& w) {
  v2_lite_keys_but(w, "");
}

// V3-style routing on top: sigmoid scores, renormalised, scaled, 8 groups of which 4 are used.
void v3_routing_keys(GgufWriter& w) {
  const std::string a = "deepseek2.";
  w.set_u32(a + "attention.q_lora_rank", 384);
  w.set_u32(a + "expert_gating_func", 2);
  w.set_bool(a + "expert_weights_norm", true);
  w.set_f32(a + "expert_weights_scale", 2.5f);
  w.set_u32(a + "expert_group_count", 8);
  w.set_u32(a + "expert_group_used_count", 4);
}

std::string write(const std::string& name, const std::function<void(GgufWriter&)>& keys) {
  GgufWriter w;
  keys(w);
  const int64_t n_embd = 256, n_vocab = 64;
  w.add_tensor("token_embd.weight", GgmlType::kF32, {n_embd, n_vocab},
               std::vector<uint8_t>(n_embd * n_vocab * 4, 0));
  const std::string path = ::testing::TempDir() + "/" + name + ".gguf";
  EXPECT_TRUE(w.write(path).ok());
  return path;
}

Result<ModelHParams> read(const std::string& path) {
  auto f = GgufFile::open(path);
  if (!f) return Error{f.message()};
  return hparams_from_gguf(**f);
}

TEST(Deepseek2HParams, V2LiteLayoutWithPerHeadLengths) {
  auto hp = read(write("ds_v2lite", v2_lite_keys));
  ASSERT_TRUE(hp.ok()) << hp.message();
  EXPECT_EQ(hp->arch, "deepseek2");
  EXPECT_EQ(hp->mla.q_lora_rank, 0);
  EXPECT_EQ(hp->mla.kv_lora_rank, 512);
  EXPECT_EQ(hp->mla.qk_rope_dim, 64);
  EXPECT_EQ(hp->mla.qk_nope_dim, 128);
  EXPECT_EQ(hp->mla.v_head_dim, 128);
  EXPECT_EQ(hp->head_dim, 192);
  EXPECT_FALSE(hp->mla.split_kv_b);
  EXPECT_FLOAT_EQ(hp->mla.yarn_log_mul, 0.0707f);
  EXPECT_EQ(hp->rope.scaling, RopeScaling::kYarn);
  EXPECT_FLOAT_EQ(hp->rope.scale_factor, 40.0f);
  EXPECT_EQ(hp->rope.orig_ctx, 4096);
  EXPECT_EQ(hp->moe.n_expert, 64);
  EXPECT_EQ(hp->moe.n_expert_used, 6);
  EXPECT_EQ(hp->moe.n_expert_shared, 2);
  EXPECT_EQ(hp->moe.n_ff_exp, 128);
  EXPECT_EQ(hp->n_ff, 1024);  // the leading dense layer's width
  EXPECT_EQ(hp->moe.n_layer_dense_lead, 1);
  EXPECT_FALSE(hp->is_moe_layer(0));
  EXPECT_TRUE(hp->is_moe_layer(1));
  EXPECT_EQ(hp->moe.gating, ExpertGating::kSoftmax);  // no expert_gating_func: V2's softmax
  EXPECT_FALSE(hp->moe.norm_weights);
  EXPECT_FLOAT_EQ(hp->moe.weights_scale, 1.0f);
}

TEST(Deepseek2HParams, V3RoutingAndTheSplitLayout) {
  auto hp = read(write("ds_v3", [](GgufWriter& w) {
    v2_lite_keys(w);
    v3_routing_keys(w);
    w.set_u32("deepseek2.attention.head_count_kv", 1);
    w.set_u32("deepseek2.attention.key_length", 512 + 64);
    w.set_u32("deepseek2.attention.value_length", 512);
    w.set_u32("deepseek2.attention.key_length_mla", 192);
    w.set_u32("deepseek2.attention.value_length_mla", 128);
  }));
  ASSERT_TRUE(hp.ok()) << hp.message();
  EXPECT_EQ(hp->mla.q_lora_rank, 384);
  EXPECT_EQ(hp->mla.qk_nope_dim, 128);
  EXPECT_EQ(hp->mla.v_head_dim, 128);
  EXPECT_EQ(hp->n_head_kv, 1);
  EXPECT_EQ(hp->moe.gating, ExpertGating::kSigmoid);
  EXPECT_TRUE(hp->moe.norm_weights);
  EXPECT_FLOAT_EQ(hp->moe.weights_scale, 2.5f);
  EXPECT_EQ(hp->moe.n_group, 8);
  EXPECT_EQ(hp->moe.n_group_used, 4);
}

void expect_error(const std::string& path, const std::vector<std::string>& parts) {
  auto hp = read(path);
  ASSERT_FALSE(hp.ok());
  EXPECT_NE(hp.message().find(path.substr(path.find_last_of('/') + 1)), std::string::npos)
      << hp.message();
  for (const auto& p : parts) EXPECT_NE(hp.message().find(p), std::string::npos) << hp.message();
}

TEST(Deepseek2HParams, BadRoutingAndShapesAreRefusedWithKeyAndValues) {
  expect_error(write("ds_gating3",
                     [](GgufWriter& w) {
                       v2_lite_keys(w);
                       w.set_u32("deepseek2.expert_gating_func", 3);
                     }),
               {"deepseek2.expert_gating_func", "expected 1 (softmax) or 2 (sigmoid), found 3"});
  expect_error(write("ds_used",
                     [](GgufWriter& w) {
                       v2_lite_keys(w);
                       w.set_u32("deepseek2.expert_used_count", 65);
                     }),
               {"deepseek2.expert_used_count", "expected 1..64", "found 65"});
  expect_error(write("ds_groups",
                     [](GgufWriter& w) {
                       v2_lite_keys(w);
                       v3_routing_keys(w);
                       w.set_u32("deepseek2.expert_group_count", 7);
                     }),
               {"deepseek2.expert_group_count", "divisor of expert_count 64", "found 7"});
  expect_error(write("ds_group_reach",
                     [](GgufWriter& w) {
                       v2_lite_keys(w);
                       v3_routing_keys(w);
                       w.set_u32("deepseek2.expert_group_used_count", 0);
                     }),
               {"deepseek2.expert_group_used_count", "expected 1..8", "found 0"});
  expect_error(write("ds_keylen",
                     [](GgufWriter& w) {
                       v2_lite_keys(w);
                       w.set_u32("deepseek2.attention.key_length_mla", 192);
                       w.set_u32("deepseek2.attention.value_length_mla", 128);
                     }),
               {"deepseek2.attention.key_length",
                "expected kv_lora_rank + rope.dimension_count "
                "= 576",
                "found 192"});
  expect_error(write("ds_norank",
                     [](GgufWriter& w) {
                       v2_lite_keys(w);
                       w.set_u32("deepseek2.attention.kv_lora_rank", 0);
                     }),
               {"deepseek2.attention.kv_lora_rank", "expected > 0"});
  expect_error(write("ds_noscale",
                     [](GgufWriter& w) { v2_lite_keys_but(w, "deepseek2.expert_weights_scale"); }),
               {"deepseek2.expert_weights_scale", "missing"});
  expect_error(write("ds_dense_lead",
                     [](GgufWriter& w) {
                       v2_lite_keys(w);
                       w.set_u32("deepseek2.leading_dense_block_count", 4);
                     }),
               {"deepseek2.leading_dense_block_count", "at most block_count 3", "found 4"});
}

// Metadata alone is not a model: the engine names the first tensor it is missing (the MLA
// tensors' own checks: mla_test.cc).
TEST(Deepseek2HParams, MetadataWithoutTensorsIsRefusedNamingTheTensor) {
  const std::string path = write("ds_engine", v2_lite_keys);
  auto m = Model::load(path, {});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("ds_engine.gguf"), std::string::npos) << m.message();
  EXPECT_NE(m.message().find("output_norm.weight': missing"), std::string::npos) << m.message();
}

}  // namespace
}  // namespace kvw
