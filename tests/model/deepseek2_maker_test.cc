// make-model's deepseek2 files: each preset reads back through GgufFile and hparams_from_gguf
// with the ranks, head lengths and routing knobs it was asked for, in both tensor layouts; the
// two layouts of one seed hold the same model; bad flag values are refused naming the flag.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "gguf/gguf_file.h"
#include "model/hparams.h"
#include "model/model_maker.h"

namespace kvw {
namespace {

MakeModelSpec preset(const std::string& name) {
  auto s = make_model_preset(name);
  EXPECT_TRUE(s.ok()) << s.message();
  return *s;
}

std::unique_ptr<GgufFile> write_and_open(const std::string& name, const MakeModelSpec& spec) {
  const std::string path = ::testing::TempDir() + "/" + name + ".gguf";
  Status st = make_model(spec, path);
  EXPECT_TRUE(st.ok()) << st.message();
  auto f = GgufFile::open(path);
  if (!f.ok()) {
    ADD_FAILURE() << f.message();
    return nullptr;
  }
  return std::move(*f);
}

std::vector<int64_t> shape_of(const GgufFile& f, const std::string& name) {
  const auto* t = f.find_tensor(name);
  return t ? t->shape : std::vector<int64_t>{};
}

int64_t int_key(const GgufFile& f, const std::string& key) {
  auto v = f.get_int(key);
  EXPECT_TRUE(v.ok()) << v.message();
  return v.ok() ? *v : -1;
}

std::vector<float> floats(const GgufFile& f, const std::string& name) {
  const auto* t = f.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr || t->type != GgmlType::kF32) return {};
  std::vector<float> v(t->num_elements);
  std::memcpy(v.data(), f.tensor_data(*t), t->num_bytes);
  return v;
}

TEST(Deepseek2Maker, V2LiteTinyReadsBackWithAttnKvB) {
  auto f = write_and_open("ds_v2_lite_tiny", preset("deepseek-v2-lite-tiny"));
  ASSERT_NE(f, nullptr);
  auto hp = hparams_from_gguf(*f);
  ASSERT_TRUE(hp.ok()) << hp.message();
  EXPECT_EQ(hp->arch, "deepseek2");
  EXPECT_EQ(hp->n_embd, 128);
  EXPECT_EQ(hp->n_layer, 3);
  EXPECT_EQ(hp->n_head, 4);
  EXPECT_EQ(hp->n_head_kv, 4);
  EXPECT_EQ(hp->n_ff, 256);
  EXPECT_EQ(hp->head_dim, 48);
  EXPECT_EQ(hp->mla.q_lora_rank, 0);
  EXPECT_EQ(f->find("deepseek2.attention.q_lora_rank"), nullptr);  // as V2-Lite's converter
  EXPECT_EQ(hp->mla.kv_lora_rank, 64);
  EXPECT_EQ(hp->mla.qk_rope_dim, 16);
  EXPECT_EQ(hp->mla.qk_nope_dim, 32);
  EXPECT_EQ(hp->mla.v_head_dim, 32);
  EXPECT_FALSE(hp->mla.split_kv_b);
  EXPECT_EQ(hp->rope.scaling, RopeScaling::kNone);
  EXPECT_EQ(hp->moe.n_expert, 8);
  EXPECT_EQ(hp->moe.n_expert_used, 2);
  EXPECT_EQ(hp->moe.n_expert_shared, 2);
  EXPECT_EQ(hp->moe.n_ff_exp, 64);
  EXPECT_EQ(hp->moe.n_layer_dense_lead, 1);
  EXPECT_EQ(hp->moe.gating, ExpertGating::kSoftmax);
  EXPECT_FALSE(hp->moe.norm_weights);
  EXPECT_FLOAT_EQ(hp->moe.weights_scale, 1.0f);
  EXPECT_EQ(hp->moe.n_group, 0);
  EXPECT_FALSE(hp->moe.probs_bias);
  EXPECT_FALSE(hp->is_moe_layer(0));
  EXPECT_TRUE(hp->is_moe_layer(1));

  EXPECT_EQ(shape_of(*f, "blk.0.attn_q.weight"), (std::vector<int64_t>{128, 4 * 48}));
  EXPECT_EQ(shape_of(*f, "blk.0.attn_kv_a_mqa.weight"), (std::vector<int64_t>{128, 64 + 16}));
  EXPECT_EQ(shape_of(*f, "blk.0.attn_kv_a_norm.weight"), (std::vector<int64_t>{64}));
  EXPECT_EQ(shape_of(*f, "blk.0.attn_kv_b.weight"), (std::vector<int64_t>{64, 4 * (32 + 32)}));
  EXPECT_EQ(shape_of(*f, "blk.0.attn_output.weight"), (std::vector<int64_t>{4 * 32, 128}));
  EXPECT_EQ(f->find_tensor("blk.0.attn_q_a.weight"), nullptr);
  EXPECT_EQ(f->find_tensor("blk.0.attn_k_b.weight"), nullptr);
  EXPECT_EQ(shape_of(*f, "blk.0.ffn_gate.weight"), (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(f->find_tensor("blk.0.ffn_gate_inp.weight"), nullptr);
  EXPECT_EQ(shape_of(*f, "blk.1.ffn_gate_inp.weight"), (std::vector<int64_t>{128, 8}));
  EXPECT_EQ(shape_of(*f, "blk.1.ffn_up_exps.weight"), (std::vector<int64_t>{128, 64, 8}));
  EXPECT_EQ(shape_of(*f, "blk.1.ffn_down_exps.weight"), (std::vector<int64_t>{64, 128, 8}));
  EXPECT_EQ(shape_of(*f, "blk.2.ffn_gate_shexp.weight"), (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(shape_of(*f, "blk.2.ffn_down_shexp.weight"), (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(f->find_tensor("blk.1.exp_probs_b.bias"), nullptr);
  EXPECT_EQ(f->find_tensor("blk.1.ffn_gate.weight"), nullptr);
}

TEST(Deepseek2Maker, V3TinyReadsBackWithSplitLayoutGroupsBiasAndYarn) {
  auto f = write_and_open("ds_v3_tiny", preset("deepseek-v3-tiny"));
  ASSERT_NE(f, nullptr);
  auto hp = hparams_from_gguf(*f);
  ASSERT_TRUE(hp.ok()) << hp.message();
  EXPECT_EQ(hp->mla.q_lora_rank, 48);
  EXPECT_EQ(hp->mla.kv_lora_rank, 64);
  EXPECT_EQ(hp->mla.qk_nope_dim, 32);
  EXPECT_EQ(hp->mla.v_head_dim, 32);
  EXPECT_EQ(hp->head_dim, 48);
  EXPECT_TRUE(hp->mla.split_kv_b);
  EXPECT_EQ(hp->n_head_kv, 1);  // newer converters declare MLA as MQA over the latent
  EXPECT_EQ(int_key(*f, "deepseek2.attention.key_length"), 64 + 16);
  EXPECT_EQ(int_key(*f, "deepseek2.attention.value_length"), 64);
  EXPECT_EQ(int_key(*f, "deepseek2.attention.key_length_mla"), 48);
  EXPECT_EQ(int_key(*f, "deepseek2.attention.value_length_mla"), 32);
  EXPECT_EQ(hp->moe.gating, ExpertGating::kSigmoid);
  EXPECT_TRUE(hp->moe.norm_weights);
  EXPECT_FLOAT_EQ(hp->moe.weights_scale, 2.5f);
  EXPECT_EQ(hp->moe.n_group, 4);
  EXPECT_EQ(hp->moe.n_group_used, 2);
  EXPECT_EQ(hp->moe.n_expert_shared, 1);
  EXPECT_TRUE(hp->moe.probs_bias);
  EXPECT_EQ(hp->rope.scaling, RopeScaling::kYarn);
  EXPECT_FLOAT_EQ(hp->rope.scale_factor, 4.0f);
  EXPECT_EQ(hp->rope.orig_ctx, 128);
  EXPECT_EQ(hp->n_ctx_train, 512);
  EXPECT_FLOAT_EQ(hp->mla.yarn_log_mul, 0.1f);

  EXPECT_EQ(shape_of(*f, "blk.0.attn_q_a.weight"), (std::vector<int64_t>{128, 48}));
  EXPECT_EQ(shape_of(*f, "blk.0.attn_q_a_norm.weight"), (std::vector<int64_t>{48}));
  EXPECT_EQ(shape_of(*f, "blk.0.attn_q_b.weight"), (std::vector<int64_t>{48, 4 * 48}));
  EXPECT_EQ(f->find_tensor("blk.0.attn_q.weight"), nullptr);
  EXPECT_EQ(shape_of(*f, "blk.0.attn_k_b.weight"), (std::vector<int64_t>{32, 64, 4}));
  EXPECT_EQ(shape_of(*f, "blk.0.attn_v_b.weight"), (std::vector<int64_t>{64, 32, 4}));
  EXPECT_EQ(f->find_tensor("blk.0.attn_kv_b.weight"), nullptr);
  EXPECT_EQ(shape_of(*f, "blk.1.exp_probs_b.bias"), (std::vector<int64_t>{8}));
  EXPECT_EQ(f->find_tensor("blk.0.exp_probs_b.bias"), nullptr);  // dense lead layer
  EXPECT_EQ(shape_of(*f, "blk.1.ffn_gate_shexp.weight"), (std::vector<int64_t>{128, 64}));
}

// One seed, two layouts: attn_k_b[h] is W_kb[h] transposed and attn_v_b[h] is W_vb[h] of the
// kv_b file's attn_kv_b, and every other tensor is byte for byte the same.
TEST(Deepseek2Maker, BothLayoutsOfOneSeedHoldTheSameModel) {
  MakeModelSpec s = preset("deepseek-v2-lite-tiny");
  s.seed = 7;
  auto kv_b = write_and_open("ds_layout_kv_b", s);
  s.mla_layout = MlaLayout::kSplit;
  auto split = write_and_open("ds_layout_split", s);
  ASSERT_NE(kv_b, nullptr);
  ASSERT_NE(split, nullptr);
  const int64_t nh = 4, nope = 32, vd = 32, r = 64;
  for (int l = 0; l < 3; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const auto whole = floats(*kv_b, p + "attn_kv_b.weight");
    const auto k_b = floats(*split, p + "attn_k_b.weight");
    const auto v_b = floats(*split, p + "attn_v_b.weight");
    ASSERT_EQ(whole.size(), (size_t)(nh * (nope + vd) * r));
    ASSERT_EQ(k_b.size(), (size_t)(nh * nope * r));
    ASSERT_EQ(v_b.size(), (size_t)(nh * vd * r));
    for (int64_t h = 0; h < nh; ++h) {
      for (int64_t j = 0; j < r; ++j) {
        for (int64_t i = 0; i < nope; ++i) {
          ASSERT_EQ(k_b[(h * r + j) * nope + i], whole[(h * (nope + vd) + i) * r + j]);
        }
        for (int64_t i = 0; i < vd; ++i) {
          ASSERT_EQ(v_b[(h * vd + i) * r + j], whole[(h * (nope + vd) + nope + i) * r + j]);
        }
      }
    }
  }
  size_t compared = 0;
  for (const auto& t : kv_b->tensors()) {
    if (t.name.find("attn_kv_b") != std::string::npos) continue;
    const auto* u = split->find_tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    ASSERT_EQ(u->num_bytes, t.num_bytes) << t.name;
    EXPECT_EQ(std::memcmp(kv_b->tensor_data(t), split->tensor_data(*u), t.num_bytes), 0) << t.name;
    ++compared;
  }
  EXPECT_EQ(split->tensors().size(), compared + 2 * 3);
}

TEST(Deepseek2Maker, QuantisedAndDenseVariantsWrite) {
  MakeModelSpec q = preset("deepseek-v2-lite-tiny");
  q.weight_type = GgmlType::kQ8_0;
  auto f = write_and_open("ds_q8_0", q);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->find_tensor("blk.0.attn_kv_b.weight")->type, GgmlType::kQ8_0);
  EXPECT_EQ(f->find_tensor("blk.1.ffn_gate_inp.weight")->type, GgmlType::kF32);  // router f32
  EXPECT_EQ(f->find_tensor("blk.0.attn_kv_a_norm.weight")->type, GgmlType::kF32);
  EXPECT_TRUE(hparams_from_gguf(*f).ok());

  MakeModelSpec dense = preset("deepseek-v2-lite-tiny");  // MLA alone: every layer dense
  dense.n_expert = dense.n_expert_used = dense.n_expert_shared = 0;
  dense.n_ff_exp = dense.n_layer_dense_lead = 0;
  auto d = write_and_open("ds_dense", dense);
  ASSERT_NE(d, nullptr);
  auto hp = hparams_from_gguf(*d);
  ASSERT_TRUE(hp.ok()) << hp.message();
  EXPECT_FALSE(hp->moe.is_moe());
  EXPECT_TRUE(hp->mla.is_mla());
  EXPECT_NE(d->find_tensor("blk.2.ffn_gate.weight"), nullptr);
  EXPECT_EQ(d->find_tensor("blk.2.ffn_gate_inp.weight"), nullptr);

  // The full DeepSeek-V2-Lite shape is valid (about 9 GB at q4_0, so not written here).
  MakeModelSpec full = preset("deepseek-v2-lite");
  full.weight_type = GgmlType::kQ4_0;
  EXPECT_TRUE(full.validate().ok()) << full.validate().message();
  EXPECT_EQ(full.n_layer, 27);
  EXPECT_EQ(full.n_expert, 64);
}

void expect_refused(const std::string& base, const std::function<void(MakeModelSpec&)>& edit,
                    const std::string& flag) {
  MakeModelSpec s = preset(base);
  edit(s);
  Status st = s.validate();
  ASSERT_FALSE(st.ok()) << "accepted; expected an error naming " << flag;
  EXPECT_NE(st.message().find(flag), std::string::npos) << st.message();
  // make_model refuses the same spec before writing anything.
  const std::string path = ::testing::TempDir() + "/ds_refused.gguf";
  EXPECT_FALSE(make_model(s, path).ok());
}

TEST(Deepseek2Maker, BadValuesAreRefusedNamingTheFlag) {
  const std::string v2 = "deepseek-v2-lite-tiny", v3 = "deepseek-v3-tiny";
  expect_refused(
      v2, [](auto& s) { s.kv_lora_rank = 0; }, "--kv-lora-rank");
  expect_refused(
      v2, [](auto& s) { s.q_lora_rank = -1; }, "--q-lora-rank");
  expect_refused(
      v2, [](auto& s) { s.qk_rope_dim = 15; }, "--qk-rope-dim");
  expect_refused(
      v2, [](auto& s) { s.qk_nope_dim = 0; }, "--qk-nope-dim");
  expect_refused(
      v2, [](auto& s) { s.v_head_dim = 0; }, "--v-head-dim");
  expect_refused(
      v2, [](auto& s) { s.sliding_window = 64; }, "--sliding-window");
  expect_refused(
      v2, [](auto& s) { s.rope_scaling = RopeScaling::kLinear; }, "--rope-scaling");
  expect_refused(
      v3, [](auto& s) { s.yarn_log_multiplier = 0; }, "--yarn-log-multiplier");
  expect_refused(
      v3, [](auto& s) { s.rope_scaling = RopeScaling::kNone; }, "--yarn-log-multiplier");
  expect_refused(
      v2, [](auto& s) { s.n_expert_used = 9; }, "--experts-used");
  expect_refused(
      v2, [](auto& s) { s.n_ff_exp = 0; }, "--expert-ffn");
  expect_refused(
      v2, [](auto& s) { s.n_expert_shared = -1; }, "--experts-shared");
  expect_refused(
      v2, [](auto& s) { s.n_layer_dense_lead = 4; }, "--dense-lead");
  expect_refused(
      v2, [](auto& s) { s.expert_weights_scale = 0; }, "--expert-weights-scale");
  expect_refused(
      v2, [](auto& s) { s.n_group_used = 2; }, "--expert-groups-used");
  expect_refused(
      v3, [](auto& s) { s.n_group = 3; }, "--expert-groups");
  expect_refused(
      v3, [](auto& s) { s.n_group = 8; }, "--expert-groups");  // groups of one
  expect_refused(
      v3, [](auto& s) { s.n_group_used = 5; }, "--expert-groups-used");
  expect_refused(
      v3,
      [](auto& s) {
        s.n_group_used = 1;
        s.n_expert_used = 3;  // only 2 experts live in one kept group
      },
      "--experts-used");
  expect_refused(
      v2,
      [](auto& s) {
        s.n_expert = 0;
        s.n_expert_used = 0;
      },
      "--experts-shared");
  expect_refused(
      v3, [](auto& s) { s.weight_type = GgmlType::kQ8_0; }, "--q-lora-rank");
  expect_refused(
      v3,
      [](auto& s) {
        s.q_lora_rank = 64;
        s.qk_nope_dim = 16;
        s.weight_type = GgmlType::kQ8_0;
      },
      "--qk-nope-dim");
  // deepseek2-only settings on another architecture.
  expect_refused(
      "tiny", [](auto& s) { s.kv_lora_rank = 64; }, "--kv-lora-rank needs --arch");
  expect_refused(
      "mixtral-tiny", [](auto& s) { s.gating = ExpertGating::kSigmoid; }, "--gating");
  expect_refused(
      "mixtral-tiny", [](auto& s) { s.probs_bias = true; }, "--probs-bias");
  expect_refused(
      "tiny", [](auto& s) { s.mla_layout = MlaLayout::kSplit; }, "--mla-layout");

  EXPECT_NE(parse_mla_layout("kvb").message().find("--mla-layout"), std::string::npos);
  EXPECT_NE(parse_expert_gating("relu").message().find("--gating"), std::string::npos);
  EXPECT_EQ(*parse_mla_layout("split"), MlaLayout::kSplit);
  EXPECT_EQ(*parse_expert_gating("sigmoid"), ExpertGating::kSigmoid);
  EXPECT_FALSE(make_model_preset("deepseek-v4").ok());
}

}  // namespace
}  // namespace kvw
