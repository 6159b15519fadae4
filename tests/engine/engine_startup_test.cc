// Engine start-up reads the model's hyper-parameters once (issue 29): the budget plan, the
// Model and, with --draft-model, the draft's plan and Model share one hparams_from_gguf each.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "gguf/gguf_file.h"
#include "model/hparams.h"

namespace kvw {
namespace {

using testutil::config_with_blocks;
using testutil::tiny_model_path;

TEST(EngineStartup, PlansAndLoadsWithTheHyperParametersItIsGiven) {
  const std::string path = tiny_model_path();
  const EngineConfig cfg = config_with_blocks(path, 32);
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok()) << file.message();
  auto hp = hparams_from_gguf(**file);
  ASSERT_TRUE(hp.ok()) << hp.message();
  const uint64_t before = hparams_reads();
  auto e = Engine::create(cfg, std::move(*file), std::move(*hp));
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_EQ(hparams_reads(), before) << "the plan or the Model parsed the file again";
}

TEST(EngineStartup, ReadsEachFilesHyperParametersOnce) {
  const std::string path = tiny_model_path();
  // (config_with_blocks plans with the planner, which reads the files itself.)
  const EngineConfig plain = config_with_blocks(path, 32);
  const uint64_t before = hparams_reads();
  auto e = Engine::create(plain);
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_EQ(hparams_reads(), before + 1);
  // A draft model (the same file here): one read for it too.
  SpecConfig spec{.enabled = true, .num_speculative_tokens = 2, .max_seqs = 4, .draft_model = path};
  const EngineConfig drafted = config_with_blocks(path, 32, spec);
  const uint64_t before_draft = hparams_reads();
  auto d = Engine::create(drafted);
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_EQ(hparams_reads(), before_draft + 2);
}

}  // namespace
}  // namespace kvw
