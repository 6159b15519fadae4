// Tests for the simulation driver: exact outcomes on tiny budgets, paged utilisation at
// saturation, preemption, prefix hits, rejection and determinism.
#include "kvsim/sim.h"

#include <gtest/gtest.h>

#include "kvsim/report.h"

namespace kvw::kvsim {
namespace {

// 32 bytes of KV per token (1 layer, 1 KV head, head_dim 8, f16).
SimConfig tiny_config(uint32_t max_model_len, uint64_t capacity_tokens) {
  SimConfig c;
  c.shape = ModelShape{.name = "tiny", .num_layers = 1, .num_kv_heads = 1, .head_dim = 8};
  c.max_model_len = max_model_len;
  c.kv_budget_bytes = capacity_tokens * c.shape.kv_bytes_per_token();
  c.max_num_batched_tokens = 512;
  return c;
}

std::vector<SimRequest> same_time(uint32_t n, uint32_t prompt, uint32_t output) {
  std::vector<SimRequest> reqs;
  for (uint32_t i = 0; i < n; ++i) {
    reqs.push_back(
        SimRequest{.conversation_id = i + 1, .prompt_tokens = prompt, .output_tokens = output});
  }
  return reqs;
}

TEST(Simulate, BudgetForFourMaxLengthSequences) {
  // 1024 tokens = 4 x max_model_len 256; 16 requests of 64 + 32 tokens arrive together.
  const SimConfig c = tiny_config(256, 1024);
  ASSERT_TRUE(c.validate().ok());
  const auto reqs = same_time(16, 64, 32);
  const SimResult contig = simulate(reqs, c, AllocatorKind::kContiguous);
  const SimResult paged = simulate(reqs, c, AllocatorKind::kPaged);

  EXPECT_EQ(contig.peak_running, 4u);  // exactly four reservations fit
  ASSERT_FALSE(contig.samples.empty());
  EXPECT_EQ(contig.samples[0].num_running, 4u);
  EXPECT_EQ(contig.samples[0].num_waiting, 12u);
  EXPECT_DOUBLE_EQ(contig.samples[0].reserved, 1.0);
  EXPECT_NEAR(contig.samples[0].utilisation, 4 * 64 / 1024.0, 1e-12);  // prefill done, held
  EXPECT_EQ(contig.num_preemptions, 0u);
  EXPECT_EQ(contig.num_finished, 16u);

  // Paged: 64 blocks of 16, watermark 1. Step 1 admits 8 prompts (the 512-token budget) in
  // 4 blocks each; step 2 grows those 8 into a 5th block (40 used) and admits while 4 blocks
  // plus the watermark are allocatable: 5 more (60 used), 13 running in all.
  EXPECT_EQ(paged.samples[0].num_running, 8u);
  EXPECT_EQ(paged.samples[1].num_running, 13u);
  EXPECT_EQ(paged.peak_running, 13u);
  EXPECT_EQ(paged.num_finished, 16u);
  EXPECT_EQ(paged.num_rejected, 0u);
  EXPECT_LT(paged.end_time_s, contig.end_time_s);  // 4 waves of 4 vs one wave
  EXPECT_GT(sustained_ratio(paged, contig), 1.0);
}

TEST(Simulate, PagedPreemptsNewestWhenDecodeCannotGrow) {
  // 8 blocks of 16 tokens; 4 sequences admitted at 32 tokens each (2 blocks) that then grow
  // to 32 + 40 tokens: the pool cannot hold all of them, so the newest are preempted.
  SimConfig c = tiny_config(128, 128);
  c.watermark = 0;
  const auto reqs = same_time(4, 32, 40);
  const SimResult paged = simulate(reqs, c, AllocatorKind::kPaged);
  EXPECT_EQ(paged.samples[0].num_running, 4u);
  EXPECT_GT(paged.num_preemptions, 0u);
  EXPECT_EQ(paged.num_finished, 4u);
  EXPECT_EQ(paged.num_unfinished, 0u);
  // Each computes 32 prompt + 39 decode tokens (the last sampled token's KV is never needed);
  // recompute after preemption costs more.
  EXPECT_GT(paged.computed_tokens, 4u * 71);
  // Contiguous: one 128-token reservation fits at a time, never preempts.
  const SimResult contig = simulate(reqs, c, AllocatorKind::kContiguous);
  EXPECT_EQ(contig.peak_running, 1u);
  EXPECT_EQ(contig.num_preemptions, 0u);
  EXPECT_EQ(contig.computed_tokens, 4u * 71);
}

TEST(Simulate, RejectsRequestsThatCanNeverFit) {
  const SimConfig c = tiny_config(256, 1024);
  auto reqs = same_time(3, 64, 32);
  reqs[1].prompt_tokens = 300;  // longer than max_model_len
  for (AllocatorKind k : {AllocatorKind::kPaged, AllocatorKind::kContiguous}) {
    const SimResult r = simulate(reqs, c, k);
    EXPECT_EQ(r.num_rejected, 1u) << allocator_name(k);
    EXPECT_EQ(r.num_finished, 2u) << allocator_name(k);
  }
}

TEST(Simulate, MultiturnRoundsHitThePrefixCacheOnPagedOnly) {
  SimConfig c = tiny_config(2048, 8192);
  WorkloadSpec spec{.pattern = Pattern::kMultiturn,
                    .num_requests = 3,
                    .min_rounds = 4,
                    .max_rounds = 4,
                    .system_prompt_tokens = 256,
                    .max_model_len = 2048};
  spec.min_turn_tokens = 32;
  spec.max_turn_tokens = 64;
  spec.min_reply_tokens = 16;
  spec.max_reply_tokens = 32;
  const auto reqs = generate_workload(spec);
  ASSERT_EQ(reqs.size(), 12u);
  const SimResult paged = simulate(reqs, c, AllocatorKind::kPaged);
  const SimResult contig = simulate(reqs, c, AllocatorKind::kContiguous);
  EXPECT_EQ(paged.num_finished, 12u);
  EXPECT_EQ(contig.num_finished, 12u);
  EXPECT_GT(paged.prefix_hit_rate, 0.5);  // rounds 2-4 re-send mostly cached history
  EXPECT_EQ(contig.prefix_hit_rate, 0.0);
  EXPECT_LT(paged.computed_tokens, contig.computed_tokens);
}

TEST(Simulate, PagedHolds95PercentUtilisationAtSaturationOnBurst) {
  SimConfig c = tiny_config(8192, 32768);  // contiguous: 4 max-length reservations
  c.max_num_batched_tokens = 2048;
  // 64 requests of ~1,700 tokens on average at once: over 3x what the cache holds.
  WorkloadSpec spec{.pattern = Pattern::kBurst,
                    .seed = 3,
                    .num_requests = 64,
                    .burst_size = 64,
                    .max_model_len = 8192};
  const auto reqs = generate_workload(spec);
  const SimResult paged = simulate(reqs, c, AllocatorKind::kPaged);
  const SimResult contig = simulate(reqs, c, AllocatorKind::kContiguous);
  ASSERT_GT(paged.num_saturated_steps, 100u);
  EXPECT_GE(paged.saturated_utilisation, 0.95);
  EXPECT_EQ(contig.peak_running, 4u);
  EXPECT_LT(contig.saturated_utilisation, 0.5);  // reservations mostly empty
  EXPECT_GT(sustained_ratio(paged, contig), 3.0);
  EXPECT_EQ(paged.num_finished, 64u);
  EXPECT_EQ(contig.num_finished, 64u);
}

TEST(Simulate, IsDeterministic) {
  const SimConfig c = tiny_config(1024, 4096);
  WorkloadSpec spec{.pattern = Pattern::kPoisson,
                    .seed = 11,
                    .num_requests = 40,
                    .max_prompt_tokens = 600,
                    .max_output_tokens = 300,
                    .rate_per_s = 20,
                    .max_model_len = 1024};
  const auto reqs = generate_workload(spec);
  const RunInfo info{"poisson", reqs.size()};
  const auto a = report_json(c, info, simulate(reqs, c, AllocatorKind::kPaged),
                             simulate(reqs, c, AllocatorKind::kContiguous));
  const auto b = report_json(c, info, simulate(reqs, c, AllocatorKind::kPaged),
                             simulate(reqs, c, AllocatorKind::kContiguous));
  EXPECT_EQ(a.dump(), b.dump());
}

TEST(SimConfig, ValidateNamesTheProblem) {
  SimConfig c = tiny_config(256, 1024);
  c.block_size = 64;
  EXPECT_NE(c.validate().message().find("block size 64"), std::string::npos);
  c = tiny_config(256, 1024);
  c.kv_budget_bytes = 100;
  EXPECT_NE(c.validate().message().find("less than one"), std::string::npos);
  EXPECT_EQ(model_shape_preset("llama-3-8b")->kv_bytes_per_token(), 131072u);
  EXPECT_FALSE(model_shape_preset("gpt-5").ok());
}

}  // namespace
}  // namespace kvw::kvsim
