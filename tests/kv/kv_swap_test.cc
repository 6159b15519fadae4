// Tests for KvManager with the swap tier: a preempted sequence swapped out and back reads its
// own tokens, an evicted prefix is revived from the tier instead of recomputed, and disk errors
// end as a clean "recompute" outcome with no slot or block leaked. 16-token blocks x 11 blocks,
// an in-memory BlockFile, and an in-flight bound of 2 blocks so that kBusy paths run.
#include <gtest/gtest.h>

#include "kv/kv_manager.h"
#include "kv_test_util.h"

namespace kvw {
namespace {

using test::FakeStorage;
using test::ids;
using test::iota_tokens;
using test::MemBlockFile;

class KvSwapTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kSlots = 6;

  KvSwapTest() : storage_(11, 16), kv_(KvManagerConfig{.num_blocks = 11}, &storage_) {
    const uint64_t bpb = storage_.bytes_per_block();
    auto file = std::make_unique<MemBlockFile>(kSlots * bpb);
    file_ = file.get();
    Result<std::unique_ptr<SwapSpace>> swap = SwapSpace::open_with_file(
        SwapConfig{.path = "mem", .swap_bytes = kSlots * bpb, .max_inflight_bytes = 2 * bpb},
        &storage_, std::move(file));
    EXPECT_TRUE(swap.ok()) << swap.message();
    kv_.attach_swap(std::move(swap).value());
  }

  void run_prompt(uint64_t seq, const std::vector<int32_t>& prompt) {
    const int64_t cached = kv_.add_sequence(SeqId{seq}, prompt);
    ASSERT_EQ(kv_.allocate_slots(SeqId{seq}, int64_t(prompt.size()) - cached), AllocStatus::kOk);
    storage_.write_tokens(kv_.block_table(SeqId{seq}), prompt, cached, int64_t(prompt.size()));
    kv_.commit_computed(SeqId{seq}, prompt, int64_t(prompt.size()));
    kv_.check_invariants();
  }
  // Fills the whole pool with another sequence's tokens (evicting every cached block), then
  // frees it, so nothing of the earlier data survives in the first tier.
  void overwrite_pool(uint64_t seq) {
    const std::vector<int32_t> junk =
        iota_tokens(int32_t(kv_.num_allocatable_blocks()) * 16, -9999);
    run_prompt(seq, junk);
    kv_.free_sequence(SeqId{seq});
    kv_.poll_swap();
    kv_.check_invariants();
  }

  FakeStorage storage_;
  KvManager kv_;
  MemBlockFile* file_ = nullptr;
};

TEST_F(KvSwapTest, SwappedOutSequenceComesBackWithItsTokens) {
  const std::vector<int32_t> a = iota_tokens(40, 100);
  run_prompt(1, a);
  ASSERT_TRUE(kv_.swap_out(SeqId{1}));
  kv_.check_invariants();
  EXPECT_TRUE(kv_.is_swapped(SeqId{1}));
  EXPECT_FALSE(kv_.has_sequence(SeqId{1}));
  EXPECT_EQ(kv_.stats().num_used_blocks, 0u);
  overwrite_pool(2);
  ASSERT_EQ(kv_.swap_in(SeqId{1}), SwapInStatus::kOk);
  kv_.check_invariants();
  EXPECT_EQ(kv_.num_tokens(SeqId{1}), 40);
  EXPECT_EQ(kv_.num_computed_tokens(SeqId{1}), 40);
  EXPECT_EQ(storage_.read_tokens(kv_.block_table(SeqId{1}), 40), a);
  // Its two full blocks also stayed cached after the swap-out and were offloaded as prefixes
  // when the overwrite evicted them (check_invariants balances the tier's slots).
  EXPECT_GE(kv_.prefix_counters().num_offloaded, 2u);
  // It continues decoding like an uninterrupted sequence.
  ASSERT_EQ(kv_.allocate_slots(SeqId{1}, 1), AllocStatus::kOk);
  kv_.free_sequence(SeqId{1});
  kv_.check_invariants();
}

TEST_F(KvSwapTest, EvictedPrefixIsRevivedFromTheTierInsteadOfRecomputed) {
  const std::vector<int32_t> p = iota_tokens(48, 7);
  run_prompt(1, p);
  kv_.free_sequence(SeqId{1});  // 3 cached blocks
  overwrite_pool(2);            // evicts them: offloaded to the tier
  EXPECT_EQ(kv_.prefix_counters().num_offloaded, 3u);
  EXPECT_EQ(kv_.num_cached_prefix_tokens(p), 0);  // not in the pool any more

  std::vector<int32_t> q = p;
  q.push_back(1);
  EXPECT_EQ(kv_.add_sequence(SeqId{3}, q), 48);
  kv_.check_invariants();
  EXPECT_EQ(kv_.prefix_counters().num_swap_hits, 3u);
  EXPECT_EQ(storage_.read_tokens(kv_.block_table(SeqId{3}), 48), p);
  // Revived blocks are cached again: a third request hits them in the pool.
  EXPECT_EQ(kv_.num_cached_prefix_tokens(q), 48);
}

TEST_F(KvSwapTest, WriteErrorTurnsSwapInIntoCleanRecompute) {
  run_prompt(1, iota_tokens(40, 3));
  file_->fail_writes = true;
  ASSERT_TRUE(kv_.swap_out(SeqId{1}));  // the error shows when the copies complete
  EXPECT_EQ(kv_.swap_in(SeqId{1}), SwapInStatus::kLost);
  EXPECT_FALSE(kv_.is_swapped(SeqId{1}));
  EXPECT_FALSE(kv_.has_sequence(SeqId{1}));
  kv_.check_invariants();
  EXPECT_EQ(kv_.swap_space()->counters().num_slots_used, 0u);
  EXPECT_EQ(kv_.stats().num_used_blocks, 0u);
}

TEST_F(KvSwapTest, ReadErrorLosesTheSequenceAndLeaksNothing) {
  run_prompt(1, iota_tokens(40, 3));
  ASSERT_TRUE(kv_.swap_out(SeqId{1}));
  file_->fail_reads = true;
  EXPECT_EQ(kv_.swap_in(SeqId{1}), SwapInStatus::kLost);
  kv_.check_invariants();
  EXPECT_EQ(kv_.swap_space()->counters().num_slots_used, 0u);
  EXPECT_EQ(kv_.stats().num_used_blocks, 0u);
}

TEST_F(KvSwapTest, SwapOutRefusedWhenTierTooSmallAndSwapInWaitsForBlocks) {
  kv_.add_sequence(SeqId{1}, {});
  ASSERT_EQ(kv_.allocate_slots(SeqId{1}, 7 * 16), AllocStatus::kOk);
  storage_.write_tokens(kv_.block_table(SeqId{1}), iota_tokens(112, 0), 0, 112);
  kv_.commit_computed(SeqId{1}, iota_tokens(112, 0), 112);
  EXPECT_FALSE(kv_.swap_out(SeqId{1}));  // 7 blocks > 6 slots: nothing changed
  EXPECT_TRUE(kv_.has_sequence(SeqId{1}));
  kv_.check_invariants();

  run_prompt(2, iota_tokens(40, 500));  // 3 blocks
  ASSERT_TRUE(kv_.swap_out(SeqId{2}));
  kv_.add_sequence(SeqId{3}, {});
  ASSERT_EQ(kv_.allocate_slots(SeqId{3}, 4 * 16), AllocStatus::kOk);  // pool full
  EXPECT_EQ(kv_.swap_in(SeqId{2}), SwapInStatus::kNoFreeBlocks);
  EXPECT_TRUE(kv_.is_swapped(SeqId{2}));
  kv_.free_sequence(SeqId{3});
  ASSERT_EQ(kv_.swap_in(SeqId{2}), SwapInStatus::kOk);
  EXPECT_EQ(storage_.read_tokens(kv_.block_table(SeqId{2}), 40), iota_tokens(40, 500));
  kv_.check_invariants();
}

}  // namespace
}  // namespace kvw
