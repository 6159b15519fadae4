// The engine on a sliding-window model (every layer attends to the last 32 positions): blocks
// behind the window are released as requests advance, so a prompt longer than the whole KV pool
// completes, windowed requests share a pool that could not hold them at full length, and the
// start-up budget sizes and reports the pool with the same per-sequence bound the KvManager
// keeps. Greedy outputs equal those of a pool large enough to never need the freeing.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "model/model_maker.h"

namespace kvw {
namespace {

using testutil::config_with_blocks;
using testutil::greedy;
using testutil::make_engine;
using testutil::prompt;
using testutil::run_one;

constexpr int32_t kWindow = 32;

std::string window_model_path() {
  const std::string path = ::testing::TempDir() + "/engine_window.gguf";
  MakeModelSpec spec;
  spec.seed = 3;
  spec.sliding_window = kWindow;
  const Status st = make_model(spec, path);
  EXPECT_TRUE(st.ok()) << st.message();
  return path;
}

TEST(EngineWindow, PromptLongerThanTheWholePoolCompletesLikeInABigPool) {
  const std::string model = window_model_path();
  auto big = make_engine(config_with_blocks(model, 64));  // 1024 tokens: room for everything
  ASSERT_NE(big, nullptr);
  const int32_t n_vocab = big->model().hparams().n_vocab;
  ASSERT_EQ(big->model().hparams().sliding_window, kWindow);
  const GenerationRequest r = greedy(prompt(41, 300, n_vocab), 40);
  const auto want = run_one(*big, r);
  ASSERT_EQ(want.reason, FinishReason::kLength) << want.error;
  big->shutdown();

  auto e = make_engine(config_with_blocks(model, 8));  // 128 tokens for a 340-token request
  ASSERT_NE(e, nullptr);
  const auto got = run_one(*e, r);
  EXPECT_EQ(got.reason, FinishReason::kLength) << got.error;
  EXPECT_EQ(got.tokens, want.tokens);
  const EngineStats s = e->stats();
  EXPECT_GT(s.num_window_freed_blocks, 8u);  // more than the pool holds
  EXPECT_EQ(s.num_preemptions, 0u);
  e->shutdown();
  const KvManager& kv = e->kv_manager();
  kv.check_invariants();
  EXPECT_EQ(kv.num_allocatable_blocks(), kv.num_blocks());
  EXPECT_EQ(e->scheduler().max_model_len(), 512);  // not clamped to the 128-token pool
  // The start-up table's per-sequence bound is the KvManager's: 32 positions touch 3 blocks.
  EXPECT_EQ(kv.max_window_blocks(), 3u);
  EXPECT_EQ(e->budget().kv_blocks_per_seq, 3u);
  EXPECT_EQ(e->budget().sliding_window, kWindow);
  EXPECT_EQ(e->budget().max_seqs_at_max_len, 8u / 3);
}

TEST(EngineWindow, WindowedRequestsShareAPoolTooSmallForThemAtFullLength) {
  const std::string model = window_model_path();
  auto big = make_engine(config_with_blocks(model, 256));
  ASSERT_NE(big, nullptr);
  const int32_t n_vocab = big->model().hparams().n_vocab;
  std::vector<GenerationRequest> rs;
  for (int i = 0; i < 6; ++i) rs.push_back(greedy(prompt(50 + i, 20, n_vocab), 100));
  std::vector<std::vector<int32_t>> alone;
  for (const auto& r : rs) alone.push_back(run_one(*big, r).tokens);
  big->shutdown();

  // 6 x 120 tokens is 48 blocks at full length; windowed, each holds at most 3: 18 blocks.
  auto e = make_engine(config_with_blocks(model, 18));
  ASSERT_NE(e, nullptr);
  std::vector<std::shared_ptr<TokenChannel>> chs;
  for (const auto& r : rs) chs.push_back(*e->submit(r));
  for (size_t i = 0; i < rs.size(); ++i) {
    const auto c = chs[i]->collect();
    EXPECT_EQ(c.reason, FinishReason::kLength) << c.error;
    EXPECT_EQ(c.tokens, alone[i]) << "request " << i;
  }
  EXPECT_EQ(e->stats().num_preemptions, 0u);
  e->shutdown();
  EXPECT_EQ(e->kv_manager().num_allocatable_blocks(), e->kv_manager().num_blocks());
}

TEST(EngineWindow, WithoutAMemoryBudgetThePoolIsSizedByTheWindow) {
  EngineConfig cfg;
  cfg.model_path = window_model_path();
  cfg.n_threads = 1;
  cfg.reserve_bytes = 1 << 20;
  cfg.sched.max_num_batched_tokens = 256;
  cfg.sched.max_num_seqs = 4;
  cfg.sched.max_model_len = 512;
  auto e = make_engine(cfg);
  ASSERT_NE(e, nullptr);
  const planner::BudgetTable& b = e->budget();
  EXPECT_EQ(b.num_blocks, 4u * 3);  // 3 blocks per sequence instead of 32
  EXPECT_EQ(b.kv_bytes_per_seq, 3 * b.kv_bytes_per_block);
  EXPECT_EQ(b.max_seqs_at_max_len, 4u);
  EXPECT_NE(b.to_string().find("sliding window 32"), std::string::npos) << b.to_string();
}

}  // namespace
}  // namespace kvw
