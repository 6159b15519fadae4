// tests/engine/engine_spec_util.h: what the speculative-decoding tests (prompt lookup in
// engine_spec_test.cc, a draft model in engine_draft_test.cc) share: greedy identity under
// preemption (running a batch and the all-blocks-back check come from engine_test_util.h).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "planner/engine_budget.h"

namespace kvw::spectest {

using testutil::expect_all_free;
using testutil::run_batch;

// `rs` on 12 KV blocks (too few for all at once) with `spec`, preempted by swap or recompute:
// every output equals `want` (plain greedy), preemptions happened, drafts were accepted, and
// every block comes back.
inline void expect_preempted_identical(const std::string& model, const SpecConfig& spec,
                                       bool with_swap, const std::vector<GenerationRequest>& rs,
                                       const std::vector<std::vector<int32_t>>& want,
                                       const std::string& swap_name) {
  EngineConfig cfg = testutil::config_with_blocks(model, 12, spec);
  cfg.enable_prefix_caching = false;  // force real recomputation/swap, not cache revival
  if (with_swap) {
    cfg.swap_bytes = uint64_t{4} << 20;
    cfg.swap_path = ::testing::TempDir() + "/" + swap_name;
    cfg.memory_budget_bytes += planner::swap_staging_bytes(cfg.swap_bytes);
  } else {
    cfg.sched.preemption_mode = PreemptionMode::kRecompute;
  }
  auto e = testutil::make_engine(cfg);
  ASSERT_NE(e, nullptr);
  auto got = run_batch(*e, rs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(got[i].reason, FinishReason::kLength) << got[i].error;
    EXPECT_EQ(got[i].tokens, want[i]) << "request " << i;
  }
  const EngineStats s = e->stats();
  EXPECT_GT(s.num_preemptions, 0u);
  if (with_swap) {
    EXPECT_GT(s.num_swap_outs, 0u);
  }
  EXPECT_GT(s.spec.num_accepted_tokens, 0u);
  expect_all_free(*e);
}

}  // namespace kvw::spectest
