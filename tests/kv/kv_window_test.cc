// Tests for KvManager under a sliding window (w = 40 tokens, 16-token blocks x 11 blocks): blocks
// wholly behind the window are released as a sequence advances, their table entries become
// holes, a decoding sequence holds at most max_window_blocks() = ceil((40 + 15) / 16) = 4 blocks,
// released blocks stay cached for prefix hits, and swap, fork and defragmentation keep the holes.
// FakeStorage holds one token id per slot, so each test checks that a sequence still reads its
// own tokens over the window (and never reads a released block: read_range CHECKs that).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "kv/kv_manager.h"
#include "kv_test_util.h"

namespace kvw {
namespace {

using test::FakeStorage;
using test::ids;
using test::iota_tokens;
using test::MemBlockFile;
using V = std::vector<uint32_t>;

constexpr int32_t kBs = 16;
constexpr uint32_t kBlocks = 11;
constexpr int32_t kWindow = 40;
constexpr uint32_t H = index_of(kNullBlock);  // a hole in ids()

class KvWindowTest : public ::testing::Test {
 protected:
  void make(bool prefix_caching, uint32_t swap_slots = 0) {
    kv_ = std::make_unique<KvManager>(KvManagerConfig{.num_blocks = kBlocks,
                                                      .block_size = kBs,
                                                      .enable_prefix_caching = prefix_caching,
                                                      .sliding_window = kWindow},
                                      &storage_);
    if (swap_slots == 0) return;
    const uint64_t bpb = storage_.bytes_per_block();
    auto swap = SwapSpace::open_with_file(
        SwapConfig{.path = "mem", .swap_bytes = swap_slots * bpb, .max_inflight_bytes = 2 * bpb},
        &storage_, std::make_unique<MemBlockFile>(swap_slots * bpb));
    ASSERT_TRUE(swap.ok()) << swap.message();
    kv_->attach_swap(std::move(swap).value());
  }

  // Computes tokens [num_computed, end) of `seq` in one chunk ("the forward" writes them).
  void advance(uint64_t seq, const std::vector<int32_t>& tokens, int64_t end) {
    const SeqId s{seq};
    const int64_t begin = kv_->num_computed_tokens(s);
    ASSERT_EQ(kv_->allocate_slots(s, end - kv_->num_tokens(s)), AllocStatus::kOk);
    storage_.write_tokens(kv_->block_table(s), tokens, begin, end);
    kv_->commit_computed(s, tokens, end);
    kv_->check_invariants();
  }
  // The next token reads positions [n + 1 - w, n): they must hold the sequence's own tokens.
  void expect_window_reads(uint64_t seq, const std::vector<int32_t>& tokens) {
    const int64_t n = kv_->num_computed_tokens(SeqId{seq});
    const int64_t begin = std::max<int64_t>(0, n + 1 - kWindow);
    EXPECT_EQ(storage_.read_range(kv_->block_table(SeqId{seq}), begin, n),
              std::vector<int32_t>(tokens.begin() + begin, tokens.begin() + n))
        << "seq " << seq << " at " << n;
  }

  FakeStorage storage_{kBlocks, kBs};
  std::unique_ptr<KvManager> kv_;
};

TEST(KvWindow, BoundsFollowTheWindowArithmetic) {
  auto bound = [](int32_t w, int32_t bs) {
    return KvManager({.num_blocks = 8, .block_size = bs, .sliding_window = w}, nullptr)
        .max_window_blocks();
  };
  EXPECT_EQ(bound(40, 16), 4u);  // 40 positions from the last slot of a block: 1 + 16 + 16 + 7
  EXPECT_EQ(bound(32, 16), 3u);  // ceil(32/16) + 1
  EXPECT_EQ(bound(33, 16), 3u);  // 1 + 16 + 16: no extra block when w = 1 (mod block_size)
  EXPECT_EQ(bound(4096, 16), 257u);
  EXPECT_EQ(bound(0, 16), 0u);  // no window
  KvManager kv({.num_blocks = 8, .block_size = 16, .sliding_window = 40}, nullptr);
  EXPECT_EQ(kv.first_live_block(54), 0);  // position 15 is still attended by position 54
  EXPECT_EQ(kv.first_live_block(55), 1);  // the token at 55 reads 16..55
  EXPECT_EQ(kv.first_live_block(100), 3);
}

TEST_F(KvWindowTest, DecodeEightWindowsLongHoldsAtMostFourBlocksAndThePoolRecovers) {
  make(/*prefix_caching=*/false);
  const std::vector<int32_t> tokens = iota_tokens(320, 1000);  // 20 blocks: twice the pool
  const SeqId s{1};
  EXPECT_EQ(kv_->add_sequence(s, {tokens.data(), 20}), 0);
  advance(1, tokens, 20);
  size_t max_live = 0;
  for (int64_t n = 20; n < 320; ++n) {
    ASSERT_EQ(kv_->allocate_slots(s, 1), AllocStatus::kOk) << "at " << n;
    max_live = std::max(max_live, kv_->num_live_blocks(s));
    storage_.write_tokens(kv_->block_table(s), tokens, n, n + 1);
    kv_->commit_computed(s, tokens, n + 1);
    kv_->check_invariants();
    expect_window_reads(1, tokens);
  }
  EXPECT_EQ(max_live, 4u);  // the bound, reached when position n sits in a block's first slot
  EXPECT_EQ(kv_->block_table(s).size(), 20u);
  EXPECT_EQ(kv_->first_live_block(320), 17);  // (320 + 1 - 40) / 16
  EXPECT_EQ(kv_->num_live_blocks(s), 3u);
  EXPECT_EQ(kv_->num_window_freed_blocks(), 17u);
  EXPECT_EQ(kv_->pool().num_used_blocks(), 3u);
  kv_->free_sequence(s);
  kv_->check_invariants();
  EXPECT_EQ(kv_->pool().num_free_blocks(), kBlocks);
}

TEST_F(KvWindowTest, ReleasedBlocksStayCachedAndAHitNeedsOnlyTheBlocksInItsWindow) {
  make(/*prefix_caching=*/true);
  const std::vector<int32_t> donor = iota_tokens(100, 2000);
  EXPECT_EQ(kv_->add_sequence(SeqId{1}, donor), 0);
  for (int64_t end : {16, 32, 48, 64, 80, 96, 100}) advance(1, donor, end);
  // Blocks 0, 1, 2 were released at 64, 80 and 96 computed tokens, in that order; hashed, they
  // stay cached (LRU: 0 is the oldest).
  EXPECT_EQ(ids(kv_->block_table(SeqId{1})), (V{H, H, H, 3, 4, 5, 6}));
  EXPECT_EQ(kv_->pool().num_cached_blocks(), 3u);
  EXPECT_EQ(kv_->num_window_freed_blocks(), 3u);
  // Another sequence takes the 4 free blocks and evicts the oldest cached one, block 0.
  const std::vector<int32_t> other = iota_tokens(80, 9000);
  EXPECT_EQ(kv_->add_sequence(SeqId{2}, other), 0);
  ASSERT_EQ(kv_->allocate_slots(SeqId{2}, 80), AllocStatus::kOk);
  EXPECT_EQ(ids(kv_->block_table(SeqId{2})), (V{7, 8, 9, 10, 0}));
  EXPECT_EQ(kv_->prefix_counters().num_evictions, 1u);
  kv_->free_sequence(SeqId{2});

  // A prompt sharing 70 tokens with the donor: blocks 0..3 have the donor's chain hashes. Block
  // 0 is gone, but resuming at position 64 reads only 25..63 (blocks 1..3), which are cached.
  std::vector<int32_t> p(donor.begin(), donor.begin() + 70);
  const std::vector<int32_t> suffix = iota_tokens(20, 7000);
  p.insert(p.end(), suffix.begin(), suffix.end());
  EXPECT_EQ(kv_->num_cached_prefix_tokens(p), 64);
  EXPECT_TRUE(kv_->can_admit(p, 90));
  EXPECT_EQ(kv_->add_sequence(SeqId{3}, p), 64);
  EXPECT_EQ(ids(kv_->block_table(SeqId{3})), (V{H, 1, 2, 3}));
  EXPECT_EQ(kv_->pool().meta(BlockId{3}).ref_count, 2);  // shared with the donor
  kv_->check_invariants();
  expect_window_reads(3, p);  // 25..63 from the donor's blocks
  advance(3, p, 90);
  EXPECT_EQ(kv_->num_live_blocks(SeqId{3}), 3u);  // blocks 3.. of 90 tokens
  expect_window_reads(3, p);
  expect_window_reads(1, donor);
  kv_->free_sequence(SeqId{1});
  kv_->free_sequence(SeqId{3});
  kv_->check_invariants();
  EXPECT_EQ(kv_->num_allocatable_blocks(), kBlocks);
}

TEST_F(KvWindowTest, SwapOutCopiesOnlyLiveBlocksAndSwapInRestoresTheHoles) {
  make(/*prefix_caching=*/false, /*swap_slots=*/6);
  const std::vector<int32_t> tokens = iota_tokens(130, 3000);
  kv_->add_sequence(SeqId{1}, {tokens.data(), 100});
  advance(1, tokens, 100);
  EXPECT_EQ(ids(kv_->block_table(SeqId{1})), (V{H, H, H, 3, 4, 5, 6}));
  ASSERT_TRUE(kv_->swap_out(SeqId{1}));
  EXPECT_EQ(kv_->swap_space()->counters().num_slots_used, 4u);  // 7 blocks, 3 of them holes
  // Another sequence overwrites every block of the pool.
  const std::vector<int32_t> junk = iota_tokens(int32_t(kBlocks) * kBs, -9999);
  kv_->add_sequence(SeqId{2}, junk);
  advance(2, junk, int64_t(junk.size()));
  kv_->free_sequence(SeqId{2});
  ASSERT_EQ(kv_->swap_in(SeqId{1}), SwapInStatus::kOk);
  kv_->check_invariants();
  EXPECT_EQ(kv_->block_table(SeqId{1}).size(), 7u);
  EXPECT_EQ(kv_->num_live_blocks(SeqId{1}), 4u);
  EXPECT_EQ(kv_->num_computed_tokens(SeqId{1}), 100);
  expect_window_reads(1, tokens);
  for (int64_t end = 101; end <= 130; ++end) {
    advance(1, tokens, end);
    expect_window_reads(1, tokens);
  }
  kv_->free_sequence(SeqId{1});
  kv_->poll_swap();
  kv_->check_invariants();
  EXPECT_EQ(kv_->swap_space()->counters().num_slots_used, 0u);
}

TEST_F(KvWindowTest, ForkSharesTheLiveFullBlocksAndKeepsTheHoles) {
  make(/*prefix_caching=*/true);
  const std::vector<int32_t> prompt = iota_tokens(100, 4000);
  kv_->add_sequence(SeqId{1}, prompt);
  advance(1, prompt, 100);
  ASSERT_EQ(kv_->fork(SeqId{1}, SeqId{2}), AllocStatus::kOk);
  kv_->check_invariants();
  const std::vector<uint32_t> child = ids(kv_->block_table(SeqId{2}));
  EXPECT_EQ(std::vector<uint32_t>(child.begin(), child.begin() + 6), (V{H, H, H, 3, 4, 5}));
  EXPECT_NE(child[6], 6u);  // the partial last block is a private copy
  EXPECT_EQ(kv_->pool().meta(BlockId{3}).ref_count, 2);
  std::vector<int32_t> a = prompt, b = prompt;
  const std::vector<int32_t> ta = iota_tokens(30, 5000), tb = iota_tokens(30, 6000);
  a.insert(a.end(), ta.begin(), ta.end());
  b.insert(b.end(), tb.begin(), tb.end());
  for (int64_t end = 101; end <= 130; ++end) {
    advance(1, a, end);
    advance(2, b, end);
    expect_window_reads(1, a);
    expect_window_reads(2, b);
  }
  kv_->free_sequence(SeqId{1});
  kv_->free_sequence(SeqId{2});
  kv_->check_invariants();
  EXPECT_EQ(kv_->num_allocatable_blocks(), kBlocks);
}

TEST_F(KvWindowTest, DefragmentMovesLiveBlocksIntoTheReleasedOnesAndLeavesTheHoles) {
  make(/*prefix_caching=*/false);
  const std::vector<int32_t> tokens = iota_tokens(130, 7000);
  kv_->add_sequence(SeqId{1}, {tokens.data(), 100});
  advance(1, tokens, 100);
  EXPECT_EQ(ids(kv_->block_table(SeqId{1})), (V{H, H, H, 3, 4, 5, 6}));
  // Released blocks 0..2 are free below the live ones: the highest three move down.
  EXPECT_EQ(kv_->defragment(8), 3u);
  kv_->check_invariants();
  EXPECT_EQ(ids(kv_->block_table(SeqId{1})), (V{H, H, H, 3, 2, 1, 0}));
  expect_window_reads(1, tokens);
  for (int64_t end = 101; end <= 130; ++end) {
    advance(1, tokens, end);
    expect_window_reads(1, tokens);
  }
}

}  // namespace
}  // namespace kvw
