#include "model/hparams.h"

#include <gtest/gtest.h>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/model.h"
#include "model/model_maker.h"

namespace kvw {
namespace {

TEST(HParams, ReadsWhatMakeModelWrote) {
  MakeModelSpec s;
  s.arch = "qwen2";
  s.n_embd = 128;
  s.n_head = 8;
  s.n_head_kv = 2;
  s.n_ff = 256;
  s.sliding_window = 64;
  s.rope_scaling = RopeScaling::kYarn;
  s.rope_scale = 4;
  s.rope_orig_ctx = 128;
  s.tied = true;
  s.vocab_type = "bpe";
  const std::string path = ::testing::TempDir() + "/hp.gguf";
  ASSERT_TRUE(make_model(s, path).ok());
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  auto hp = hparams_from_gguf(**f);
  ASSERT_TRUE(hp.ok()) << hp.message();
  EXPECT_EQ(hp->arch, "qwen2");
  EXPECT_EQ(hp->n_embd, 128);
  EXPECT_EQ(hp->head_dim, 16);
  EXPECT_EQ(hp->n_head_kv, 2);
  EXPECT_EQ(hp->sliding_window, 64);
  EXPECT_TRUE(hp->qkv_bias);
  EXPECT_TRUE(hp->tied_embeddings);
  EXPECT_EQ(hp->rope.style, RopeStyle::kNeox);
  EXPECT_EQ(hp->rope.scaling, RopeScaling::kYarn);
  EXPECT_FLOAT_EQ(hp->rope.scale_factor, 4.0f);
  EXPECT_EQ(hp->rope.orig_ctx, 128);
}

TEST(HParams, MissingKeyNamesFileAndKey) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.embedding_length", 64);
  const std::string path = ::testing::TempDir() + "/nokey.gguf";
  ASSERT_TRUE(w.write(path).ok());
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  auto hp = hparams_from_gguf(**f);
  ASSERT_FALSE(hp.ok());
  EXPECT_NE(hp.message().find("nokey.gguf"), std::string::npos) << hp.message();
  EXPECT_NE(hp.message().find("llama.block_count"), std::string::npos) << hp.message();
}

TEST(HParams, UnsupportedArchitectureIsAClearError) {
  GgufWriter w;
  w.set_string("general.architecture", "mamba");
  const std::string path = ::testing::TempDir() + "/mamba.gguf";
  ASSERT_TRUE(w.write(path).ok());
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok());
  auto hp = hparams_from_gguf(**f);
  ASSERT_FALSE(hp.ok());
  EXPECT_NE(hp.message().find("'mamba' is not supported"), std::string::npos) << hp.message();
}

TEST(Weights, WrongTensorShapeNamesTheTensor) {
  MakeModelSpec s;
  const std::string good = ::testing::TempDir() + "/good.gguf";
  ASSERT_TRUE(make_model(s, good).ok());
  // Same metadata, but claim a wider feed-forward than the tensors have.
  auto f = GgufFile::open(good);
  ASSERT_TRUE(f.ok());
  GgufWriter w;
  for (const auto& kv : (*f)->metadata()) w.set(kv.key, kv.value);
  w.set_u32("llama.feed_forward_length", 512);
  for (const auto& t : (*f)->tensors()) {
    const uint8_t* p = (*f)->tensor_data(t);
    w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(p, p + t.num_bytes));
  }
  const std::string bad = ::testing::TempDir() + "/badshape.gguf";
  ASSERT_TRUE(w.write(bad).ok());
  auto m = Model::load(bad, {});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("blk.0.ffn_gate.weight"), std::string::npos) << m.message();
  EXPECT_NE(m.message().find("expected [64, 512]"), std::string::npos) << m.message();
}

}  // namespace
}  // namespace kvw
