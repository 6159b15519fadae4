// tests/engine/engine_family_util.h: the guarantees every model family keeps in the engine
// (phi3, gpt-oss, ...): a request's greedy tokens are the same alone, beside seven others, with
// prompts chunked into 16-token steps, from a prefix-cache hit, and preempted (recompute and
// swap) under a tiny KV budget; no block leaks.
#pragma once

#include <gtest/gtest.h>

#include <set>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "model/model_maker.h"
#include "planner/engine_budget.h"

namespace kvw::testutil {

// Config over `model` with `dtype` KV whose budget leaves exactly `num_blocks` blocks.
inline EngineConfig config_for(const std::string& model, uint32_t num_blocks, KvDtype dtype) {
  EngineConfig cfg = testutil::config_with_blocks(model, num_blocks);
  cfg.kv_dtype = dtype;
  cfg.memory_budget_bytes = uint64_t{32} << 20;
  auto e = Engine::create(cfg);
  EXPECT_TRUE(e.ok()) << e.message();
  const auto& b = (*e)->budget();
  cfg.memory_budget_bytes = b.total_bytes - b.kv_pool_bytes + b.kv_pool_bytes_for(num_blocks);
  return cfg;
}

inline std::vector<std::vector<int32_t>> run_all(Engine& e,
                                                 const std::vector<GenerationRequest>& rs) {
  std::vector<std::shared_ptr<TokenChannel>> chs;
  for (const auto& r : rs) {
    auto ch = e.submit(r);
    EXPECT_TRUE(ch.ok()) << ch.message();
    chs.push_back(*ch);
  }
  std::vector<std::vector<int32_t>> out;
  for (auto& ch : chs) {
    auto c = ch->collect();
    EXPECT_EQ(c.reason, FinishReason::kLength) << c.error;
    out.push_back(c.tokens);
  }
  return out;
}

inline void expect_no_leak(Engine& e) {
  e.shutdown();
  e.kv_manager().check_invariants();
  EXPECT_EQ(e.kv_manager().num_sequences(), 0u);
  EXPECT_EQ(e.kv_manager().num_allocatable_blocks(), e.kv_manager().num_blocks());
}

// Every guarantee for one file and KV dtype.
inline void expect_same_tokens_everywhere(const std::string& model, KvDtype dtype) {
  SCOPED_TRACE(kv_dtype_name(dtype));
  auto alone_engine = make_engine(config_for(model, 256, dtype));
  ASSERT_NE(alone_engine, nullptr);
  const int32_t n_vocab = alone_engine->model().hparams().n_vocab;
  std::vector<GenerationRequest> rs;
  for (int i = 0; i < 8; ++i) rs.push_back(greedy(prompt(300 + i, 20 + 5 * i, n_vocab), 30));
  std::vector<std::vector<int32_t>> alone;
  for (const auto& r : rs) alone.push_back(run_one(*alone_engine, r).tokens);
  // Not degenerate: random weights with a tied head can repeat one token forever.
  EXPECT_GT(std::set<int32_t>(alone[0].begin(), alone[0].end()).size(), 3u);
  // Prefix hit: the same request again revives its full prompt blocks.
  EXPECT_EQ(run_one(*alone_engine, rs[7]).tokens, alone[7]);
  alone_engine->shutdown();
  EXPECT_GE(alone_engine->kv_manager().prefix_counters().num_hit_blocks, 3u);
  expect_no_leak(*alone_engine);

  // Batched with the others, and with every prompt chunked into 16-token steps.
  for (int64_t step_tokens : {256, 16}) {
    EngineConfig cfg = config_for(model, 256, dtype);
    cfg.sched.max_num_batched_tokens = step_tokens;
    auto e = make_engine(cfg);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(run_all(*e, rs), alone) << step_tokens << "-token steps";
    EXPECT_EQ(e->stats().num_numerics_errors, 0u);
    expect_no_leak(*e);
  }

  // Preempted: 12 blocks hold two of the 8 requests (up to 55 + 30 tokens each) at a time.
  for (bool swap : {false, true}) {
    EngineConfig cfg = config_for(model, 12, dtype);
    cfg.enable_prefix_caching = false;
    if (swap) {
      cfg.swap_bytes = uint64_t{4} << 20;
      cfg.swap_path = ::testing::TempDir() + "/engine_family_swap.bin";
      cfg.memory_budget_bytes += planner::swap_staging_bytes(cfg.swap_bytes);
    } else {
      cfg.sched.preemption_mode = PreemptionMode::kRecompute;
    }
    auto e = make_engine(cfg);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(run_all(*e, rs), alone) << (swap ? "swapped" : "recomputed");
    const EngineStats s = e->stats();
    EXPECT_GT(s.num_preemptions, 0u);
    if (swap) {
      EXPECT_GT(s.num_preemptions_swap, 0u);
    }
    expect_no_leak(*e);
  }
}

inline std::string write_preset(const char* name, uint64_t seed, GgmlType type = GgmlType::kF32) {
  auto spec = make_model_preset(name);
  EXPECT_TRUE(spec.ok());
  spec->seed = seed;
  spec->weight_type = type;
  spec->tied = false;  // a tied head repeats tokens under random weights (see the check above)
  // The seed is part of the name: ctest runs tests of one preset with other seeds in parallel,
  // and a shared path let one overwrite the other's weights mid-test (the flaky EnginePhi3 and
  // EngineHybridWindow failures under ctest -j).
  const std::string path = ::testing::TempDir() + "/engine_" + name + "_" +
                           std::string(type_traits(type).name) + "_" + std::to_string(seed) +
                           ".gguf";
  EXPECT_TRUE(make_model(*spec, path).ok());
  return path;
}

}  // namespace kvw::testutil
