// Scheduler behaviour under a sliding window (KvManagerConfig::sliding_window, 16-token blocks):
// a decoding sequence holds at most KvManager::max_window_blocks() blocks however long it runs,
// a prompt longer than the whole pool is prefilled in chunks that fit and completes, the p95
// reservation and re-admission use the window's bound instead of prompt + max_tokens, and
// windowed sequences swapped out come back with their holes. The fake engine (Harness) checks
// the KV manager's invariants (holes exactly behind the window) after every step.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "sched_test_util.h"

namespace kvw {
namespace {

using test::Harness;
using test::tokens;

KvManagerConfig window_kv(uint32_t num_blocks, int32_t window) {
  return KvManagerConfig{.num_blocks = num_blocks, .block_size = 16, .sliding_window = window};
}

TEST(SchedulerWindow, DecodeFourWindowsLongHoldsAtMostThreeBlocks) {
  Harness h(window_kv(16, 32), SchedConfig{.max_num_batched_tokens = 64,
                                           .max_num_seqs = 4,
                                           .max_model_len = 512,
                                           .long_prefill_chunk_tokens = 64});
  ASSERT_EQ(h.kv.max_window_blocks(), 3u);  // 32 positions touch at most 3 blocks of 16
  h.add(1, tokens(20, 1000), 108);          // 128 tokens: 8 blocks without the window
  size_t max_live = 0;
  int steps = 0;
  while (h.sched.has_unfinished()) {
    // Between schedule() and update_from_output(): the slots of this step are allocated.
    h.step([&](SampledToken& t) { max_live = std::max(max_live, h.kv.num_live_blocks(t.seq_id)); });
    ASSERT_LT(++steps, 1000);
  }
  EXPECT_EQ(h.reason_of(1), FinishReason::kLength);
  EXPECT_EQ(max_live, 3u);
  // 127 computed tokens: blocks 0..5 ((127 + 1 - 32) / 16 = 6) were released on the way.
  EXPECT_EQ(h.kv.num_window_freed_blocks(), 6u);
  EXPECT_EQ(h.kv.num_allocatable_blocks(), 16u);
  EXPECT_EQ(h.sched.counters().num_preemptions, 0u);
}

TEST(SchedulerWindow, PromptLongerThanThePoolIsPrefilledInChunksThatFitAndCompletes) {
  Harness h(window_kv(8, 32), SchedConfig{.max_num_batched_tokens = 256,
                                          .max_num_seqs = 4,
                                          .max_model_len = 1024,
                                          .long_prefill_chunk_tokens = 512});
  // The pool holds 128 tokens; the window's 3 blocks fit, so the length is not clamped to it.
  EXPECT_EQ(h.sched.max_model_len(), 1024);
  h.add(1, tokens(600, 1000), 20);
  int64_t max_chunk = 0;
  int steps = 0;
  while (h.sched.has_unfinished()) {
    const SchedulerOutput out = h.step();
    for (const ScheduledSeq& s : out.scheduled) max_chunk = std::max(max_chunk, s.num_tokens);
    ASSERT_LT(++steps, 1000);
  }
  EXPECT_EQ(h.reason_of(1), FinishReason::kLength);
  EXPECT_EQ(max_chunk, 128);  // the first chunk fills the empty pool; later ones leave room
                              // for the 31 positions before them
  EXPECT_EQ(h.sched.counters().num_preemptions, 0u);
  EXPECT_EQ(h.kv.num_allocatable_blocks(), 8u);
}

TEST(SchedulerWindow, WindowThatDoesNotFitThePoolKeepsTheLengthClamp) {
  // 64 positions touch 5 blocks; 4 blocks cannot hold one windowed sequence, so the old rule
  // (the whole sequence in the pool) stays.
  Harness h(window_kv(4, 64), SchedConfig{.max_num_batched_tokens = 64, .max_model_len = 1024});
  EXPECT_EQ(h.sched.max_model_len(), 64);
}

TEST(SchedulerWindow, P95ReservationIsCappedByTheWindowSoRequestsRunSideBySide) {
  // 4 requests of 20 + 100 tokens: 8 blocks each at full length, 32 in all, in a 12-block pool.
  // Windowed, each holds at most 3 blocks, so all 4 run at once without preemption even when
  // the p95 reservation (warmed up on one finished request of that length) is on.
  Harness h(window_kv(12, 32), SchedConfig{.max_num_batched_tokens = 64,
                                           .max_num_seqs = 8,
                                           .max_model_len = 512,
                                           .long_prefill_chunk_tokens = 64,
                                           .kv_reserve = KvReservePolicy::kP95,
                                           .kv_reserve_min_samples = 1});
  h.add(1, tokens(20, 1000), 100);
  h.run_to_completion();
  ASSERT_GT(h.sched.reserve_tokens(), 100);
  for (uint64_t id = 2; id <= 5; ++id) h.add(id, tokens(20, int32_t(id) * 1000), 100);
  size_t max_running = 0;
  int steps = 0;
  while (h.sched.has_unfinished()) {
    h.step();
    max_running = std::max(max_running, h.sched.num_running());
    ASSERT_LT(++steps, 2000);
  }
  EXPECT_EQ(max_running, 4u);
  EXPECT_EQ(h.sched.counters().num_preemptions, 0u);
  for (uint64_t id = 2; id <= 5; ++id) EXPECT_EQ(h.reason_of(id), FinishReason::kLength);
}

TEST(SchedulerWindow, SwappedWindowedSequencesComeBackAndFinish) {
  // Two decoding sequences need 3 + 3 blocks of a 5-block pool: the newer is swapped out (only
  // its live blocks travel) and swapped back in when the older one finishes.
  Harness h(window_kv(5, 32),
            SchedConfig{.max_num_batched_tokens = 64,
                        .max_num_seqs = 4,
                        .max_model_len = 512,
                        .long_prefill_chunk_tokens = 64,
                        .preemption_mode = PreemptionMode::kSwap},
            /*num_swap_slots=*/8);
  h.add(1, tokens(20, 1000), 100);
  h.add(2, tokens(20, 2000), 100);
  int steps = 0;
  while (h.sched.has_unfinished()) {
    // Nothing to run: a read-back is waiting for the swap worker (the engine would wait too).
    if (h.step().scheduled.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_LT(++steps, 20000);
  }
  EXPECT_EQ(h.reason_of(1), FinishReason::kLength);
  EXPECT_EQ(h.reason_of(2), FinishReason::kLength);
  EXPECT_GT(h.sched.counters().num_swap_outs, 0u);
  EXPECT_EQ(h.sched.counters().num_swap_ins, h.sched.counters().num_swap_outs);
  EXPECT_EQ(h.kv.num_allocatable_blocks(), 5u);
}

}  // namespace
}  // namespace kvw
