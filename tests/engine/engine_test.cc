// Engine behaviour: batch-invariant greedy output (alone, batched, prefix hit, preempted and
// swapped; dense, Mixtral-style MoE and DeepSeek MLA), clean ends (cancel, reject, shutdown), no
// leaked blocks, the start-up budget check and the numerics guard.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <limits>
#include <set>

#include "engine_test_util.h"
#include "gguf/gguf_file.h"
#include "model/model_maker.h"
#include "planner/engine_budget.h"

namespace kvw {
namespace {

using testutil::config_with_blocks;
using testutil::greedy;
using testutil::make_engine;
using testutil::prompt;
using testutil::run_batch;
using testutil::run_one;

void expect_no_leak(Engine& e) {
  testutil::expect_all_free(e);
  EXPECT_FALSE(e.scheduler().has_unfinished());
}

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override { model_ = testutil::tiny_model_path(); }
  std::string model_;
};

void expect_batched_equals_alone(const std::string& model, const GenSampling& s = {}) {
  auto e = make_engine(config_with_blocks(model, 256));
  ASSERT_NE(e, nullptr);
  const int32_t n_vocab = e->model().hparams().n_vocab;
  std::vector<GenerationRequest> rs;
  for (int i = 0; i < 7; ++i) rs.push_back(greedy(prompt(100 + i, 20 + 3 * i, n_vocab), 12, s));
  std::vector<std::vector<int32_t>> alone;
  for (const auto& r : rs) {
    auto c = run_one(*e, r);
    EXPECT_EQ(c.reason, FinishReason::kLength);
    EXPECT_EQ(c.tokens.size(), 12u);
    alone.push_back(c.tokens);
  }
  auto batched = run_batch(*e, rs);
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(batched[i].reason, FinishReason::kLength);
    EXPECT_EQ(batched[i].tokens, alone[i]) << "request " << i;
  }
  EXPECT_EQ(e->stats().num_numerics_errors, 0u);
  expect_no_leak(*e);
}

void expect_prefix_hit_gives_same_output(const std::string& model, const GenSampling& s = {}) {
  auto e = make_engine(config_with_blocks(model, 64));
  ASSERT_NE(e, nullptr);
  const auto r = greedy(prompt(7, 50, e->model().hparams().n_vocab), 10, s);  // 3 full blocks
  auto first = run_one(*e, r);
  auto second = run_one(*e, r);
  EXPECT_EQ(first.tokens.size(), 10u);
  EXPECT_EQ(second.tokens, first.tokens);
  e->shutdown();
  EXPECT_GE(e->kv_manager().prefix_counters().num_hit_blocks, 3u);
  expect_no_leak(*e);
}

TEST_F(EngineTest, GreedyOutputIdenticalAloneAndBatchedWithSixOthers) {
  expect_batched_equals_alone(model_);
}

TEST_F(EngineTest, PrefixCacheHitGivesSameOutput) {
  expect_prefix_hit_gives_same_output(model_);
}

void run_under_tiny_budget(const std::string& model, bool with_swap, const GenSampling& s = {}) {
  auto big = make_engine(config_with_blocks(model, 512));
  ASSERT_NE(big, nullptr);
  const int32_t n_vocab = big->model().hparams().n_vocab;
  std::vector<GenerationRequest> rs;
  for (int i = 0; i < 8; ++i) rs.push_back(greedy(prompt(200 + i, 40, n_vocab), 40, s));
  std::vector<std::vector<int32_t>> alone;
  for (const auto& r : rs) alone.push_back(run_one(*big, r).tokens);
  big->shutdown();

  // Each request needs 5 blocks (80 tokens); 12 blocks hold two at a time.
  EngineConfig cfg = config_with_blocks(model, 12);
  cfg.enable_prefix_caching = false;  // force real recomputation/swap, not cache revival
  if (with_swap) {
    cfg.swap_bytes = uint64_t{4} << 20;
    cfg.swap_path = ::testing::TempDir() + "/engine_swap.bin";
    cfg.memory_budget_bytes += planner::swap_staging_bytes(cfg.swap_bytes);  // a budget row
  } else {
    cfg.sched.preemption_mode = PreemptionMode::kRecompute;
  }
  auto e = make_engine(cfg);
  ASSERT_NE(e, nullptr);
  auto batched = run_batch(*e, rs);
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(batched[i].reason, FinishReason::kLength) << batched[i].error;
    EXPECT_EQ(batched[i].tokens, alone[i]) << "request " << i;
  }
  const EngineStats s = e->stats();
  EXPECT_GT(s.num_preemptions, 0u);
  EXPECT_EQ(s.num_preemptions_swap + s.num_preemptions_recompute, s.num_preemptions);
  EXPECT_GT(s.num_alloc_failures, 0u);  // preemptions happen only when a sequence did not fit
  if (with_swap) {
    EXPECT_GT(s.num_swap_outs, 0u);
    EXPECT_GT(s.num_preemptions_swap, 0u);
    EXPECT_GT(s.swap_out_bytes, 0u);
    EXPECT_GT(s.swap_in_bytes, 0u);
  } else {
    EXPECT_EQ(s.num_preemptions_swap, 0u);
    EXPECT_EQ(s.swap_out_bytes, 0u);
  }
  expect_no_leak(*e);
}

TEST_F(EngineTest, GreedyOutputIdenticalWhenPreemptedForRecomputeUnderTinyBudget) {
  run_under_tiny_budget(model_, false);
}

TEST_F(EngineTest, GreedyOutputIdenticalWhenSwappedUnderTinyBudget) {
  run_under_tiny_budget(model_, true);
}

// Mixtral-style experts (8, top-2): a step groups its tokens per expert, and the output of each
// request is still the same alone, batched, from a prefix hit, preempted and swapped.
TEST(EngineMoe, GreedyOutputIdenticalAloneBatchedPrefixHitPreemptedAndSwapped) {
  auto spec = make_model_preset("mixtral-tiny");
  ASSERT_TRUE(spec.ok());
  const std::string model = ::testing::TempDir() + "/engine_moe.gguf";
  ASSERT_TRUE(make_model(*spec, model).ok());
  expect_batched_equals_alone(model);
  expect_prefix_hit_gives_same_output(model);
  run_under_tiny_budget(model, false);
  run_under_tiny_budget(model, true);
}

// DeepSeek-style files (MLA latent cache, shared experts; V2-Lite-like and V3-like routing) and
// Qwen2-MoE (gated shared expert): the same guarantees, over the one-row-per-token cache for MLA.
TEST(EngineSharedExperts, GreedyOutputIdenticalAloneBatchedPrefixHitPreemptedAndSwapped) {
  for (const char* name : {"deepseek-v2-lite-tiny", "deepseek-v3-tiny", "qwen2moe-tiny"}) {
    SCOPED_TRACE(name);
    auto spec = make_model_preset(name);
    ASSERT_TRUE(spec.ok());
    const std::string model = ::testing::TempDir() + "/engine_" + name + ".gguf";
    ASSERT_TRUE(make_model(*spec, model).ok());
    expect_batched_equals_alone(model);
    expect_prefix_hit_gives_same_output(model);
    run_under_tiny_budget(model, false);
    run_under_tiny_budget(model, true);
  }
}

// Qwen3 (heads longer than n_embd / n_head, per-head Q/K RMSNorm): the same guarantees (f16 KV;
// int8 KV and chunked prefill at the model level: tests/model/qwen3_test.cc). Untied output: the
// preset's tied one repeats the last token under random weights, which would make every comparison
// trivially equal.
// qwen3moe too (16 experts, top-4 renormalised; untied in its preset).
TEST(EngineQwen3, GreedyOutputIdenticalAloneBatchedPrefixHitPreemptedAndSwapped) {
  for (const char* name : {"qwen3-tiny", "qwen3moe-tiny"}) {
    SCOPED_TRACE(name);
    auto spec = make_model_preset(name);
    ASSERT_TRUE(spec.ok());
    spec->tied = false;
    const std::string model = ::testing::TempDir() + "/engine_" + name + ".gguf";
    ASSERT_TRUE(make_model(*spec, model).ok());
    expect_batched_equals_alone(model);
    expect_prefix_hit_gives_same_output(model);
    run_under_tiny_budget(model, false);
    run_under_tiny_budget(model, true);
    auto e = make_engine(config_with_blocks(model, 64));
    ASSERT_NE(e, nullptr);
    const auto out = run_one(*e, greedy(prompt(5, 30, e->model().hparams().n_vocab), 12)).tokens;
    EXPECT_GT(std::set<int32_t>(out.begin(), out.end()).size(), 3u) << "degenerate output";
    e->shutdown();
  }
}

// Gemma-2 and Gemma-3 (tied output, windowed local layers of 16 tokens beside global ones, so
// no block is released behind the window; soft-capping; per-head Q/K norms): the same guarantees
// with f16 KV, and with int8 KV greedy tokens are identical alone, batched and chunked into
// 16-token prefill steps. Prompts of 40+ tokens cross the window. A tied output under random
// weights repeats the last token (gemma2 files are always tied), which would make every
// comparison trivially equal: presence and frequency penalties keep the argmax moving.
TEST(EngineGemma, GreedyOutputIdenticalAloneBatchedChunkedPrefixHitPreemptedAndSwapped) {
  for (const char* name : {"gemma2-tiny", "gemma3-tiny"}) {
    SCOPED_TRACE(name);
    auto spec = make_model_preset(name);
    ASSERT_TRUE(spec.ok());
    const std::string model = ::testing::TempDir() + "/engine_" + name + ".gguf";
    ASSERT_TRUE(make_model(*spec, model).ok());
    const GenSampling s{.presence_penalty = 2.0f, .frequency_penalty = 2.0f};
    expect_batched_equals_alone(model, s);
    expect_prefix_hit_gives_same_output(model, s);
    run_under_tiny_budget(model, false, s);
    run_under_tiny_budget(model, true, s);
    EngineConfig cfg = config_with_blocks(model, 128);
    cfg.kv_dtype = KvDtype::kInt8;
    auto e = make_engine(cfg);
    ASSERT_NE(e, nullptr);
    const int32_t n_vocab = e->model().hparams().n_vocab;
    std::vector<GenerationRequest> rs;
    for (int i = 0; i < 5; ++i) rs.push_back(greedy(prompt(300 + i, 40 + 7 * i, n_vocab), 16, s));
    std::vector<std::vector<int32_t>> alone;
    for (const auto& r : rs) alone.push_back(run_one(*e, r).tokens);
    EXPECT_GT(std::set<int32_t>(alone[0].begin(), alone[0].end()).size(), 3u) << "degenerate";
    const auto batched = run_batch(*e, rs);
    for (size_t i = 0; i < rs.size(); ++i) EXPECT_EQ(batched[i].tokens, alone[i]) << i;
    e->shutdown();
    EXPECT_EQ(e->kv_manager().config().sliding_window, 0);  // global layers keep every block
    cfg.sched.max_num_batched_tokens = 16;                  // prompts prefilled in 16-token chunks
    auto chunked = make_engine(cfg);
    ASSERT_NE(chunked, nullptr);
    const auto out = run_batch(*chunked, rs);
    for (size_t i = 0; i < rs.size(); ++i) EXPECT_EQ(out[i].tokens, alone[i]) << "chunked " << i;
    expect_no_leak(*chunked);
  }
}

TEST_F(EngineTest, CancelFreesBlocksByTheNextStep) {
  auto e = make_engine(config_with_blocks(model_, 64));
  ASSERT_NE(e, nullptr);
  auto ch = e->submit(greedy(prompt(3, 30, e->model().hparams().n_vocab), 400));
  ASSERT_TRUE(ch.ok());
  ChannelEvent first = (*ch)->next();
  ASSERT_EQ(first.kind, ChannelEvent::Kind::kToken);
  EXPECT_GT(e->stats().num_kv_sequences, 0u);
  ASSERT_TRUE(e->cancel((*ch)->request_id()));
  auto c = (*ch)->collect();
  EXPECT_EQ(c.reason, FinishReason::kCancelled);
  EXPECT_LT(c.tokens.size(), 399u);
  // Stats are published before the channel ends, so they already show the blocks back.
  const EngineStats s = e->stats();
  EXPECT_EQ(s.num_kv_sequences, 0u);
  EXPECT_EQ(s.num_allocatable_blocks, s.num_blocks);
  expect_no_leak(*e);
}

TEST_F(EngineTest, StartupFailsWithTableAndFlagWhenBudgetTooSmall) {
  EngineConfig cfg = config_with_blocks(model_, 8);
  cfg.memory_budget_bytes = 64 << 10;
  auto e = Engine::create(cfg);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("--memory-budget"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("weights"), std::string::npos) << e.message();
}

// The start-up allocations are checked against what the machine can give before any is made.
TEST_F(EngineTest, StartupRefusesABudgetTheMachineCannotTouch) {
  EngineConfig cfg = config_with_blocks(model_, 64);
  cfg.available_memory_bytes = 1 << 20;  // 1 MiB left on this "machine"
  auto e = Engine::create(cfg);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("cannot touch the memory budget"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("1.00 MiB"), std::string::npos) << e.message();
  cfg.available_memory_bytes = uint64_t{1} << 40;
  EXPECT_TRUE(Engine::create(cfg).ok());
}

// Start-up plans with the model file, then loads weights and tokenizer from it: one open and
// parse in all; over a file already open (kvwarden serve's path), none.
TEST_F(EngineTest, CreateOpensTheModelFileOnce) {
  const EngineConfig cfg = config_with_blocks(model_, 16);
  uint64_t before = GgufFile::open_count();
  auto e = make_engine(cfg);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(GgufFile::open_count() - before, 1u);
  e.reset();
  auto file = GgufFile::open(model_);
  ASSERT_TRUE(file.ok()) << file.message();
  before = GgufFile::open_count();
  auto opened = Engine::create(cfg, std::move(*file));
  ASSERT_TRUE(opened.ok()) << opened.message();
  EXPECT_EQ(GgufFile::open_count(), before);
  EXPECT_EQ((*opened)->model().file().path(), model_);
}

// fp8 is a planner dtype (GPU plans); the CPU engine refuses it before opening the model.
TEST_F(EngineTest, StartupRefusesAnFp8KvCache) {
  EngineConfig cfg;
  cfg.model_path = model_;
  cfg.kv_dtype = KvDtype::kFp8;
  auto e = Engine::create(cfg);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("--kv-cache-dtype fp8"), std::string::npos) << e.message();
}

TEST_F(EngineTest, InvalidRequestsAreRejectedCleanly) {
  EngineConfig cfg = config_with_blocks(model_, 64);
  cfg.sched.max_model_len = 64;
  auto e = make_engine(cfg);
  ASSERT_NE(e, nullptr);
  const int32_t n_vocab = e->model().hparams().n_vocab;
  EXPECT_FALSE(e->submit(greedy({n_vocab}, 4)).ok());  // token out of range
  EXPECT_FALSE(e->submit(greedy({}, 4)).ok());
  GenerationRequest bad_temp = greedy({5, 6}, 4);
  bad_temp.sampling.temperature = -1;
  EXPECT_FALSE(e->submit(bad_temp).ok());
  // Too long for --max-model-len: refused by the scheduler, reported on the channel.
  auto c = run_one(*e, greedy(prompt(1, 100, n_vocab), 4));
  EXPECT_EQ(c.reason, FinishReason::kError);
  EXPECT_FALSE(c.error.empty());
  // The engine keeps serving.
  EXPECT_EQ(run_one(*e, greedy(prompt(2, 10, n_vocab), 4)).tokens.size(), 4u);
  EXPECT_EQ(e->stats().num_rejected, 1u);
  expect_no_leak(*e);
}

TEST_F(EngineTest, ShutdownFailsPendingRequestsWithoutTerminating) {
  auto e = make_engine(config_with_blocks(model_, 64));
  ASSERT_NE(e, nullptr);
  std::vector<std::shared_ptr<TokenChannel>> chs;
  for (int i = 0; i < 4; ++i) {
    auto ch = e->submit(greedy(prompt(i, 20, e->model().hparams().n_vocab), 400));
    ASSERT_TRUE(ch.ok());
    chs.push_back(*ch);
  }
  (void)chs[0]->next();
  e->shutdown();
  for (auto& ch : chs) {
    auto c = ch->collect();
    EXPECT_TRUE(c.reason == FinishReason::kError || c.reason == FinishReason::kLength);
  }
  EXPECT_FALSE(e->submit(greedy({5}, 1)).ok());
  expect_no_leak(*e);
}

TEST_F(EngineTest, NumericsGuardEndsPoisonedRequestWhileOthersContinue) {
  // A finite 1e30 row is harmless (RMSNorm's sum of squares overflows to inf, scaling it to 0);
  // an overflowed (inf) activation becomes NaN in the norm and reaches K/V, so every later
  // position of that sequence has NaN logits, while other sequences never read its blocks.
  constexpr int32_t kPoison = 7;
  const std::string poisoned =
      testutil::poisoned_model_path(model_, kPoison, std::numeric_limits<float>::infinity());
  auto e = make_engine(config_with_blocks(poisoned, 64));
  ASSERT_NE(e, nullptr);
  std::vector<int32_t> clean = prompt(11, 20, e->model().hparams().n_vocab);
  std::erase(clean, kPoison);
  std::vector<int32_t> bad = clean;
  bad[5] = kPoison;
  auto out = run_batch(*e, {greedy(bad, 8), greedy(clean, 8)});
  EXPECT_EQ(out[0].reason, FinishReason::kError);
  EXPECT_NE(out[0].error.find("numerics"), std::string::npos) << out[0].error;
  EXPECT_EQ(out[1].reason, FinishReason::kLength);
  EXPECT_EQ(out[1].tokens.size(), 8u);
  EXPECT_EQ(e->stats().num_numerics_errors, 1u);
  expect_no_leak(*e);
}

TEST_F(EngineTest, ActivationClampLetsAnOverflowingRequestFinish) {
  // Same poisoned row as above: with --activation-clamp the inf embedding is clamped to a finite
  // value, so the request completes and nothing trips the guard.
  constexpr int32_t kPoison = 7;
  const std::string poisoned =
      testutil::poisoned_model_path(model_, kPoison, std::numeric_limits<float>::infinity());
  EngineConfig cfg = config_with_blocks(poisoned, 64);
  cfg.activation_clamp = 1e4f;
  auto e = make_engine(cfg);
  ASSERT_NE(e, nullptr);
  std::vector<int32_t> bad = prompt(11, 20, e->model().hparams().n_vocab);
  std::erase(bad, kPoison);
  bad[5] = kPoison;
  auto out = run_batch(*e, {greedy(bad, 8)});
  EXPECT_EQ(out[0].reason, FinishReason::kLength) << out[0].error;
  EXPECT_EQ(out[0].tokens.size(), 8u);
  EXPECT_EQ(e->stats().num_numerics_errors, 0u);
  expect_no_leak(*e);
}

TEST_F(EngineTest, ExtremeEmbeddingValuesFrom1e4To1e8StayFiniteWithAndWithoutClamp) {
  // The residual stream is f32 and every matmul input is RMS-normalised, so rows of 1e4..1e8
  // do not overflow here (they would in an fp16 residual); the guard must stay quiet and the
  // clamp must not break generation.
  constexpr int32_t kPoison = 7;
  for (float v : {1e4f, 1e6f, 1e8f}) {
    for (float clamp : {0.0f, 1e3f}) {
      SCOPED_TRACE("value " + std::to_string(v) + " clamp " + std::to_string(clamp));
      EngineConfig cfg = config_with_blocks(testutil::poisoned_model_path(model_, kPoison, v), 32);
      cfg.activation_clamp = clamp;
      auto e = make_engine(cfg);
      ASSERT_NE(e, nullptr);
      std::vector<int32_t> p = prompt(3, 12, e->model().hparams().n_vocab);
      p[4] = kPoison;
      auto out = run_batch(*e, {greedy(p, 4)});
      EXPECT_EQ(out[0].reason, FinishReason::kLength) << out[0].error;
      EXPECT_EQ(e->stats().num_numerics_errors, 0u);
      expect_no_leak(*e);
    }
  }
}

TEST(EngineSharedModel, Stories260KGreedyBatchedMatchesAlone) {
  const char* dir = std::getenv("KVW_TEST_MODELS");
  const std::string path = std::string(dir ? dir : "") + "/stories260K.gguf";
  ASSERT_TRUE(dir && std::filesystem::exists(path)) << "no " << path;
  auto e = make_engine(config_with_blocks(path, 128));
  ASSERT_NE(e, nullptr);
  const auto& tok = e->tokenizer();
  std::vector<GenerationRequest> rs;
  for (const char* text : {"Once upon a time", "The cat sat", "Lily went to the park"}) {
    GenerationRequest r;
    r.prompt = tok.encode(text, true, false);
    r.max_tokens = 24;
    rs.push_back(r);
  }
  std::vector<std::vector<int32_t>> alone;
  for (const auto& r : rs) alone.push_back(run_one(*e, r).tokens);
  auto batched = run_batch(*e, rs);
  for (size_t i = 0; i < rs.size(); ++i) EXPECT_EQ(batched[i].tokens, alone[i]);
  expect_no_leak(*e);
}

}  // namespace
}  // namespace kvw

namespace kvw {
namespace {

// Requests of different lengths free blocks in the middle of the pool; with the defragmenter
// on, moves happen between steps and every output is the one the defragmenter-off run gives.
TEST(EngineDefrag, MovesBlocksBetweenStepsAndOutputsStayIdentical) {
  const std::string model = testutil::tiny_model_path();
  auto run = [&](double threshold, EngineStats* stats) {
    EngineConfig cfg = testutil::config_with_blocks(model, 96);
    cfg.enable_prefix_caching = false;  // freed blocks become free, not cached
    cfg.defrag_threshold = threshold;
    cfg.defrag_max_moves = 8;
    cfg.kv_stats_interval_ms = 0;  // check every step
    auto e = testutil::make_engine(cfg);
    EXPECT_NE(e, nullptr);
    const int32_t n_vocab = e->model().hparams().n_vocab;
    std::vector<GenerationRequest> rs;
    for (int i = 0; i < 12; ++i) {
      GenerationRequest r;
      r.prompt = testutil::prompt(300 + i, 20 + 7 * i, n_vocab);
      r.max_tokens = 4 + 23 * (i % 4);  // short and long ones interleaved
      r.ignore_eos = true;
      rs.push_back(std::move(r));
    }
    std::vector<std::shared_ptr<TokenChannel>> chs;
    for (const auto& r : rs) chs.push_back(*e->submit(r));
    std::vector<std::vector<int32_t>> out;
    for (auto& ch : chs) out.push_back(ch->collect().tokens);
    *stats = e->stats();
    e->shutdown();
    e->kv_manager().check_invariants();
    return out;
  };
  EngineStats off{}, on{};
  const auto plain = run(0.0, &off);
  const auto defragged = run(0.01, &on);
  EXPECT_EQ(off.num_defrag_moves, 0u);
  EXPECT_GT(on.num_defrag_moves, 0u);
  EXPECT_EQ(defragged, plain);
}

}  // namespace
}  // namespace kvw
