// make-model's qwen2moe files (Qwen1.5-MoE / Qwen2-57B-A14B): the preset writes the keys and
// tensors llama.cpp's LLM_ARCH_QWEN2MOE loader reads, with its shapes (every layer MoE: a router,
// routed experts of expert_feed_forward_length, the shared expert's 1-D gate and its FFN of
// expert_shared_feed_forward_length); the router and the shared gate stay f32 in a quantised
// file; bad flag values are refused naming the flag. Read back through GgufFile only (the
// engine's hparams for qwen2moe are not this test's subject).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "gguf/gguf_file.h"
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
  EXPECT_TRUE(v.ok()) << key << ": " << v.message();
  return v.ok() ? *v : -1;
}

using Shape = std::vector<int64_t>;

TEST(Qwen2MoeMaker, TinyPresetHasLlamaCppKeysAndTensorShapes) {
  auto f = write_and_open("qwen2moe_tiny", preset("qwen2moe-tiny"));
  ASSERT_NE(f, nullptr);
  auto arch = f->get_string("general.architecture");
  ASSERT_TRUE(arch.ok());
  EXPECT_EQ(*arch, "qwen2moe");
  const std::string a = "qwen2moe.";
  EXPECT_EQ(int_key(*f, a + "context_length"), 512);
  EXPECT_EQ(int_key(*f, a + "embedding_length"), 128);
  EXPECT_EQ(int_key(*f, a + "block_count"), 2);
  EXPECT_EQ(int_key(*f, a + "feed_forward_length"), 256);
  EXPECT_EQ(int_key(*f, a + "attention.head_count"), 4);
  EXPECT_EQ(int_key(*f, a + "attention.head_count_kv"), 2);
  EXPECT_EQ(int_key(*f, a + "expert_count"), 8);
  EXPECT_EQ(int_key(*f, a + "expert_used_count"), 2);
  EXPECT_EQ(int_key(*f, a + "expert_feed_forward_length"), 64);
  EXPECT_EQ(int_key(*f, a + "expert_shared_feed_forward_length"), 256);
  auto eps = f->get_float(a + "attention.layer_norm_rms_epsilon");
  ASSERT_TRUE(eps.ok());
  EXPECT_FLOAT_EQ((float)*eps, 1e-6f);
  auto theta = f->get_float(a + "rope.freq_base");
  ASSERT_TRUE(theta.ok());
  EXPECT_FLOAT_EQ((float)*theta, 1e6f);
  // DeepSeek's routing keys are not qwen2moe's: llama.cpp hard-codes softmax, no renormalising.
  EXPECT_EQ(f->find(a + "expert_weights_norm"), nullptr);
  EXPECT_EQ(f->find(a + "expert_shared_count"), nullptr);
  // Qwen2's byte-level BPE tokenizer.
  auto model = f->get_string("tokenizer.ggml.model");
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(*model, "gpt2");
  auto pre = f->get_string("tokenizer.ggml.pre");
  ASSERT_TRUE(pre.ok());
  EXPECT_EQ(*pre, "qwen2");

  auto vocab = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(vocab.ok());
  const int64_t n_vocab = (int64_t)vocab->size();
  const int64_t d = 128, kv = 2 * 32, e = 8, ff_exp = 64, ff_sh = 256;
  EXPECT_EQ(shape_of(*f, "token_embd.weight"), (Shape{d, n_vocab}));
  EXPECT_EQ(shape_of(*f, "output_norm.weight"), (Shape{d}));
  EXPECT_EQ(shape_of(*f, "output.weight"), (Shape{d, n_vocab}));
  for (int l = 0; l < 2; ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const std::string p = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(shape_of(*f, p + "attn_norm.weight"), (Shape{d}));
    EXPECT_EQ(shape_of(*f, p + "attn_q.weight"), (Shape{d, d}));
    EXPECT_EQ(shape_of(*f, p + "attn_q.bias"), (Shape{d}));
    EXPECT_EQ(shape_of(*f, p + "attn_k.weight"), (Shape{d, kv}));
    EXPECT_EQ(shape_of(*f, p + "attn_k.bias"), (Shape{kv}));
    EXPECT_EQ(shape_of(*f, p + "attn_v.weight"), (Shape{d, kv}));
    EXPECT_EQ(shape_of(*f, p + "attn_v.bias"), (Shape{kv}));
    EXPECT_EQ(shape_of(*f, p + "attn_output.weight"), (Shape{d, d}));
    EXPECT_EQ(shape_of(*f, p + "ffn_norm.weight"), (Shape{d}));
    EXPECT_EQ(shape_of(*f, p + "ffn_gate_inp.weight"), (Shape{d, e}));
    EXPECT_EQ(shape_of(*f, p + "ffn_gate_exps.weight"), (Shape{d, ff_exp, e}));
    EXPECT_EQ(shape_of(*f, p + "ffn_up_exps.weight"), (Shape{d, ff_exp, e}));
    EXPECT_EQ(shape_of(*f, p + "ffn_down_exps.weight"), (Shape{ff_exp, d, e}));
    EXPECT_EQ(shape_of(*f, p + "ffn_gate_inp_shexp.weight"), (Shape{d}));
    EXPECT_EQ(shape_of(*f, p + "ffn_gate_shexp.weight"), (Shape{d, ff_sh}));
    EXPECT_EQ(shape_of(*f, p + "ffn_up_shexp.weight"), (Shape{d, ff_sh}));
    EXPECT_EQ(shape_of(*f, p + "ffn_down_shexp.weight"), (Shape{ff_sh, d}));
    EXPECT_EQ(f->find_tensor(p + "ffn_gate.weight"), nullptr);  // no dense layers
    EXPECT_EQ(f->find_tensor(p + "ffn_up.weight"), nullptr);
  }
  // Exactly those tensors: 3 global, 17 per layer.
  EXPECT_EQ(f->tensors().size(), 3u + 2u * 17u);

  // The shared expert's gate: finite, not all equal (its sigmoid must vary across tokens).
  const auto* g = f->find_tensor("blk.0.ffn_gate_inp_shexp.weight");
  ASSERT_NE(g, nullptr);
  ASSERT_EQ(g->type, GgmlType::kF32);
  std::vector<float> gate(g->num_elements);
  std::memcpy(gate.data(), f->tensor_data(*g), g->num_bytes);
  double sum_sq = 0;
  for (float v : gate) {
    ASSERT_TRUE(std::isfinite(v));
    sum_sq += (double)v * v;
  }
  EXPECT_GT(sum_sq, 0.1);  // std 1/sqrt(d): sum of squares about 1
}

TEST(Qwen2MoeMaker, FlagsOverrideThePresetAndQuantisedFilesKeepRouterAndGateF32) {
  MakeModelSpec s = preset("qwen2moe-tiny");
  s.weight_type = GgmlType::kQ8_0;
  s.n_expert = 4;
  s.n_expert_used = 4;
  s.n_ff_exp = 96;
  s.n_ff_shexp = 160;
  s.n_layer = 3;
  s.n_vocab = 600;
  auto f = write_and_open("qwen2moe_q8_0", s);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(int_key(*f, "qwen2moe.expert_count"), 4);
  EXPECT_EQ(int_key(*f, "qwen2moe.expert_used_count"), 4);
  EXPECT_EQ(int_key(*f, "qwen2moe.expert_feed_forward_length"), 96);
  EXPECT_EQ(int_key(*f, "qwen2moe.expert_shared_feed_forward_length"), 160);
  EXPECT_EQ(shape_of(*f, "token_embd.weight"), (Shape{128, 600}));
  EXPECT_EQ(shape_of(*f, "blk.2.ffn_down_exps.weight"), (Shape{96, 128, 4}));
  EXPECT_EQ(shape_of(*f, "blk.2.ffn_down_shexp.weight"), (Shape{160, 128}));
  EXPECT_EQ(f->find_tensor("blk.2.ffn_up_exps.weight")->type, GgmlType::kQ8_0);
  EXPECT_EQ(f->find_tensor("blk.2.ffn_up_shexp.weight")->type, GgmlType::kQ8_0);
  EXPECT_EQ(f->find_tensor("blk.0.attn_q.weight")->type, GgmlType::kQ8_0);
  EXPECT_EQ(f->find_tensor("blk.2.ffn_gate_inp.weight")->type, GgmlType::kF32);
  EXPECT_EQ(f->find_tensor("blk.2.ffn_gate_inp_shexp.weight")->type, GgmlType::kF32);
  EXPECT_EQ(f->find_tensor("blk.0.attn_q.bias")->type, GgmlType::kF32);

  // One seed, one model: writing twice gives the same bytes.
  auto again = write_and_open("qwen2moe_q8_0_again", s);
  ASSERT_NE(again, nullptr);
  for (const auto& t : f->tensors()) {
    const auto* u = again->find_tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    ASSERT_EQ(u->num_bytes, t.num_bytes) << t.name;
    EXPECT_EQ(std::memcmp(f->tensor_data(t), again->tensor_data(*u), t.num_bytes), 0) << t.name;
  }
}

void expect_refused(const std::string& base, const std::function<void(MakeModelSpec&)>& edit,
                    const std::string& flag) {
  MakeModelSpec s = preset(base);
  edit(s);
  Status st = s.validate();
  ASSERT_FALSE(st.ok()) << "accepted; expected an error naming " << flag;
  EXPECT_NE(st.message().find(flag), std::string::npos) << st.message();
  const std::string path = ::testing::TempDir() + "/qwen2moe_refused.gguf";
  EXPECT_FALSE(make_model(s, path).ok());
}

TEST(Qwen2MoeMaker, BadValuesAreRefusedNamingTheFlag) {
  const std::string q = "qwen2moe-tiny";
  expect_refused(
      q, [](auto& s) { s.n_ff_shexp = 0; }, "--shared-expert-ffn");
  expect_refused(
      q, [](auto& s) { s.n_ff_shexp = -4; }, "--shared-expert-ffn");
  expect_refused(
      q, [](auto& s) { s.n_ff_exp = 0; }, "--expert-ffn");
  expect_refused(
      q,
      [](auto& s) {
        s.n_expert = 0;
        s.n_expert_used = 0;
      },
      "--experts");
  expect_refused(
      q, [](auto& s) { s.n_expert_used = 9; }, "--experts-used");
  expect_refused(
      q, [](auto& s) { s.n_expert_used = 0; }, "--experts-used");
  expect_refused(
      q, [](auto& s) { s.tied = true; }, "--tied");
  expect_refused(
      q, [](auto& s) { s.sliding_window = 16; }, "--sliding-window");
  expect_refused(
      q, [](auto& s) { s.n_head_kv = 3; }, "--kv-heads");
  expect_refused(
      q,
      [](auto& s) {
        s.weight_type = GgmlType::kQ8_0;
        s.n_ff_shexp = 48;  // not whole Q8_0 blocks
      },
      "--shared-expert-ffn");
  expect_refused(
      q, [](auto& s) { s.n_expert_shared = 2; }, "--experts-shared");  // deepseek2's flag
  expect_refused(
      q, [](auto& s) { s.kv_lora_rank = 64; }, "--kv-lora-rank");
  // The shared expert's width is qwen2moe's alone; --expert-ffn is the MoE families'.
  expect_refused(
      "tiny", [](auto& s) { s.n_ff_shexp = 256; }, "--shared-expert-ffn needs --arch qwen2moe");
  expect_refused(
      "mixtral-tiny", [](auto& s) { s.n_ff_exp = 64; }, "--expert-ffn needs --arch");
  expect_refused(
      "deepseek-v2-lite-tiny", [](auto& s) { s.n_ff_shexp = 256; }, "--shared-expert-ffn");
  expect_refused(
      "tiny",
      [](auto& s) {
        s.arch = "qwen2";
        s.n_expert = 8;
        s.n_expert_used = 2;
      },
      "--experts needs --arch");
  EXPECT_TRUE(preset(q).validate().ok());
  MakeModelSpec from_arch;  // --arch qwen2moe alone names the first missing flag
  from_arch.arch = "qwen2moe";
  EXPECT_NE(from_arch.validate().message().find("--experts"), std::string::npos);
}

}  // namespace
}  // namespace kvw
