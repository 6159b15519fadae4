// Hybrid sliding-window models in the engine (gemma3: five local layers then a global one,
// 16-token windows; gemma2 in engine_test.cc, gpt-oss in engine_gptoss_test.cc): the local layers'
// KV lives in window slots released behind the window (kv/window_slots.h). Greedy tokens are the
// same alone, batched, chunked, from a prefix hit and preempted (recompute and swap) with f16 and
// int8 KV; a sequence whose full-KV footprint does not fit the budget runs and gives the tokens of
// --swa-full in a pool large enough for them.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine_family_util.h"

namespace kvw {
namespace {

using testutil::config_with_blocks;
using testutil::greedy;
using testutil::make_engine;
using testutil::prompt;
using testutil::run_one;

// gemma3 untied (greedy then moves under random weights); gemma2 files are always tied, and
// EngineGemma (engine_test.cc) runs both with penalties through the same paths.
TEST(EngineHybridWindow, Gemma3GreedyIdenticalAloneBatchedChunkedPrefixHitPreemptedF16AndInt8) {
  const std::string model = testutil::write_preset("gemma3-tiny", 71);
  testutil::expect_same_tokens_everywhere(model, KvDtype::kF16);
  testutil::expect_same_tokens_everywhere(model, KvDtype::kInt8);
}

// gemma3-tiny: per token 256 B in the global layer, 1280 B in the five local ones (f16, one KV
// head of 64). One sequence at a time: 1 x (ceil(15 / 16) + 3) + 256 / 16 = 20 window slots.
TEST(EngineHybridWindow, SequenceTooLongForFullKvRunsInWindowSlotsWithSwaFullTokens) {
  const std::string model = testutil::write_preset("gemma3-tiny", 72);
  EngineConfig cfg = config_with_blocks(model, 64);
  cfg.sched.max_num_seqs = 1;
  cfg.sched.max_model_len = 640;
  cfg.memory_budget_bytes = uint64_t{32} << 20;
  uint64_t budget = 0;
  {
    auto probe = make_engine(cfg);
    ASSERT_NE(probe, nullptr);
    const auto& b = probe->budget();
    EXPECT_EQ(b.hybrid_window, 16);
    EXPECT_EQ(b.kv_bytes_per_token, 256u);
    EXPECT_EQ(b.kv_window_bytes_per_token, 1280u);
    EXPECT_EQ(b.max_window_slots, 20u);
    budget = b.total_bytes - b.kv_pool_bytes + b.kv_pool_bytes_for(40);
  }
  cfg.memory_budget_bytes = budget;
  // After every step the sequence holds ceil(16 / 16) + 1 = 2 window slots at most (its last
  // positions), while its global-layer blocks grow with the context.
  uint32_t max_slots = 0, max_blocks = 0;
  cfg.step_observer = [&](const StepObservation& o) {
    max_slots = std::max(max_slots, o.num_used_window_slots);
    max_blocks = std::max(max_blocks, o.num_used_blocks);
  };
  auto e = make_engine(cfg);
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->budget().num_blocks, 40u);  // 640 tokens in the global layer
  ASSERT_EQ(e->budget().num_window_slots, 20u);
  EXPECT_EQ(e->budget().kv_pool_bytes, 40u * 4096 + 20u * 20480);

  // The same bytes with full KV in every layer: 573440 / (6 x 4096) = 23 blocks, 368 tokens.
  EngineConfig full_cfg = cfg;
  full_cfg.swa_full = true;
  {
    auto full = make_engine(full_cfg);
    ASSERT_NE(full, nullptr);
    EXPECT_EQ(full->budget().num_blocks, 23u);
    EXPECT_EQ(full->budget().num_window_slots, 0u);
  }
  // 50 + 500 tokens: 35 blocks, beyond 23; within 40 blocks and 20 window slots.
  const int32_t n_vocab = e->model().hparams().n_vocab;
  const GenerationRequest r = greedy(prompt(73, 50, n_vocab), 500);
  const auto got = run_one(*e, r);
  ASSERT_EQ(got.reason, FinishReason::kLength) << got.error;
  EXPECT_EQ(got.tokens.size(), 500u);
  EXPECT_EQ(e->stats().num_preemptions, 0u);
  testutil::expect_no_leak(*e);
  EXPECT_LE(max_slots, 2u);
  EXPECT_GE(max_blocks, 34u);  // 549 computed tokens: 35 blocks, the last one's may be unused
  EXPECT_EQ(e->kv_manager().window_slots()->num_allocatable_slots(), 20u);

  full_cfg.memory_budget_bytes = uint64_t{32} << 20;  // room for all of it
  auto full = make_engine(full_cfg);
  ASSERT_NE(full, nullptr);
  ASSERT_GE(full->budget().num_blocks, 35u);
  EXPECT_EQ(full->budget().hybrid_window, 0);
  const auto want = run_one(*full, r);
  ASSERT_EQ(want.reason, FinishReason::kLength) << want.error;
  EXPECT_EQ(got.tokens, want.tokens);
}

}  // namespace
}  // namespace kvw
