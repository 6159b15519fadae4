// Tests for KvManager's hybrid window (gemma2/3, gpt-oss: windowed and global layers; w = 40
// tokens, 16-token blocks): every block keeps its global layers' KV, while its window slot goes
// back as soon as the block falls wholly behind the window, so a decoding sequence holds at most
// ceil(40 / 16) + 1 = 4 slots while its blocks grow; a prefix hit never uses a block whose
// window rows were given away; fork, truncate and swap keep the slot counts exact
// (check_invariants after every operation).
#include <gtest/gtest.h>

#include <memory>

#include "kv/kv_manager.h"
#include "kv_test_util.h"

namespace kvw {
namespace {

using test::FakeStorage;
using test::iota_tokens;
using test::MemBlockFile;

constexpr int32_t kBs = 16;
constexpr int32_t kWindow = 40;
constexpr uint32_t kMaxSlotsPerSeq = (kWindow + kBs - 1) / kBs + 1;  // 4

std::unique_ptr<KvManager> make(uint32_t blocks, uint32_t slots, bool prefix_caching,
                                KvStorage* storage = nullptr) {
  return std::make_unique<KvManager>(KvManagerConfig{.num_blocks = blocks,
                                                     .block_size = kBs,
                                                     .enable_prefix_caching = prefix_caching,
                                                     .hybrid_window = kWindow,
                                                     .num_window_slots = slots},
                                     storage);
}

// Prefills `prompt` in one chunk, then decodes until `total` tokens are computed.
void run_to(KvManager& kv, SeqId s, const std::vector<int32_t>& tokens, int64_t total) {
  int64_t n = kv.num_computed_tokens(s);
  if (n < int64_t(tokens.size()) && kv.num_tokens(s) == n) {
    ASSERT_EQ(kv.allocate_slots(s, int64_t(tokens.size()) - n), AllocStatus::kOk);
    kv.commit_computed(s, tokens, int64_t(tokens.size()));
    kv.check_invariants();
    n = int64_t(tokens.size());
  }
  std::vector<int32_t> all = iota_tokens(int32_t(total), 1000);
  std::copy(tokens.begin(), tokens.end(), all.begin());
  for (; n < total; ++n) {
    ASSERT_EQ(kv.allocate_slots(s, 1), AllocStatus::kOk) << "at " << n;
    kv.commit_computed(s, all, n + 1);
    kv.check_invariants();
    EXPECT_LE(kv.num_used_window_slots(), kMaxSlotsPerSeq) << "at " << n + 1;
  }
}

TEST(KvHybrid, WindowSlotsStayBoundedWhileTheFullGroupGrows) {
  auto kv = make(64, 64, false);
  kv->add_sequence(SeqId{1}, {});
  run_to(*kv, SeqId{1}, iota_tokens(20, 0), 300);
  EXPECT_EQ(kv->num_live_blocks(SeqId{1}), 19u);  // ceil(300 / 16): global layers keep all
  // 300 computed: blocks below floor((300 + 1 - 40) / 16) = 16 hold no slot.
  EXPECT_EQ(kv->first_window_block(300), 16);
  EXPECT_EQ(kv->num_used_window_slots(), 3u);
  std::vector<uint32_t> wt;
  kv->window_block_table(SeqId{1}, wt);
  ASSERT_EQ(wt.size(), 19u);
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(wt[i], kNoWindowSlot) << i;
  for (size_t i = 16; i < 19; ++i) EXPECT_LT(wt[i], 64u) << i;
  kv->free_sequence(SeqId{1});
  kv->check_invariants();
  EXPECT_EQ(kv->window_slots()->num_allocatable_slots(), 64u);
}

// 6 slots cannot hold 32 blocks' window rows: only the release keeps the sequence going.
TEST(KvHybrid, SequenceLongerThanTheWindowSlotsRuns) {
  auto kv = make(40, 6, false);
  kv->add_sequence(SeqId{1}, {});
  run_to(*kv, SeqId{1}, iota_tokens(30, 0), 500);
  EXPECT_EQ(kv->num_live_blocks(SeqId{1}), 32u);
  kv->free_sequence(SeqId{1});
  kv->check_invariants();
}

TEST(KvHybrid, AllocationFailsWithNothingChangedWhenSlotsRunOut) {
  auto kv = make(40, 6, false);
  kv->add_sequence(SeqId{1}, {});
  EXPECT_FALSE(kv->can_allocate(SeqId{1}, 7 * kBs));
  EXPECT_EQ(kv->allocate_slots(SeqId{1}, 7 * kBs), AllocStatus::kNoFreeBlocks);
  EXPECT_EQ(kv->num_tokens(SeqId{1}), 0);
  EXPECT_EQ(kv->pool().num_free_blocks(), 40u);
  EXPECT_TRUE(kv->can_allocate(SeqId{1}, 6 * kBs));
  kv->check_invariants();
}

TEST(KvHybrid, PrefixHitRevivesKeptWindowSlots) {
  auto kv = make(64, 64, true);
  const std::vector<int32_t> p = iota_tokens(100, 0);
  kv->add_sequence(SeqId{1}, p);
  run_to(*kv, SeqId{1}, p, 100);
  kv->free_sequence(SeqId{1});
  kv->check_invariants();
  // 6 full blocks are cached; the window of token 96 reaches back to block (97 - 40) / 16 = 3,
  // whose slots were kept (evictable) when the sequence ended.
  EXPECT_EQ(kv->num_cached_prefix_tokens(p), 96);
  EXPECT_EQ(kv->add_sequence(SeqId{2}, p), 96);
  kv->check_invariants();
  EXPECT_EQ(kv->num_used_window_slots(), 3u);
  run_to(*kv, SeqId{2}, p, 130);
  kv->free_sequence(SeqId{2});
  kv->check_invariants();
}

// The window rows of cached blocks are given to new blocks under slot pressure: a later prompt
// with that prefix must recompute rather than read slots another block now owns.
TEST(KvHybrid, PrefixHitNeverUsesBlocksWhoseWindowRowsWereFreed) {
  auto kv = make(64, 8, true);
  const std::vector<int32_t> p = iota_tokens(100, 0);
  kv->add_sequence(SeqId{1}, p);
  run_to(*kv, SeqId{1}, p, 100);
  kv->free_sequence(SeqId{1});
  EXPECT_EQ(kv->num_cached_prefix_tokens(p), 96);
  kv->add_sequence(SeqId{2}, {});
  ASSERT_EQ(kv->allocate_slots(SeqId{2}, 8 * kBs), AllocStatus::kOk);  // takes every slot
  kv->check_invariants();
  kv->free_sequence(SeqId{2});
  kv->check_invariants();
  EXPECT_EQ(kv->num_cached_prefix_tokens(p), 0);
  EXPECT_EQ(kv->add_sequence(SeqId{3}, p), 0);
  kv->free_sequence(SeqId{3});
  kv->check_invariants();
}

TEST(KvHybrid, ForkTruncateAndDefragmentKeepSlotCounts) {
  FakeStorage storage(64, kBs);
  auto kv = make(64, 16, false, &storage);
  kv->add_sequence(SeqId{1}, {});
  run_to(*kv, SeqId{1}, iota_tokens(70, 0), 90);
  ASSERT_EQ(kv->fork(SeqId{1}, SeqId{2}), AllocStatus::kOk);
  kv->check_invariants();
  ASSERT_EQ(kv->allocate_slots(SeqId{2}, 40), AllocStatus::kOk);
  kv->truncate_slots(SeqId{2}, 95);
  kv->check_invariants();
  kv->free_sequence(SeqId{1});
  kv->check_invariants();
  kv->defragment(64);
  kv->check_invariants();
  kv->free_sequence(SeqId{2});
  kv->check_invariants();
  EXPECT_EQ(kv->window_slots()->num_allocatable_slots(), 16u);
}

TEST(KvHybrid, SwapOutAndInRestoreTheWindowSlots) {
  FakeStorage storage(32, kBs);
  auto kv = make(32, 8, true, &storage);
  const uint64_t bpb = storage.bytes_per_block();
  auto swap = SwapSpace::open_with_file(
      SwapConfig{.path = "mem", .swap_bytes = 32 * bpb, .max_inflight_bytes = 2 * bpb}, &storage,
      std::make_unique<MemBlockFile>(32 * bpb));
  ASSERT_TRUE(swap.ok()) << swap.message();
  kv->attach_swap(std::move(swap).value());
  const std::vector<int32_t> p = iota_tokens(60, 0);
  kv->add_sequence(SeqId{1}, p);
  run_to(*kv, SeqId{1}, p, 120);
  const uint32_t used = kv->num_used_window_slots();
  ASSERT_TRUE(kv->swap_out(SeqId{1}, iota_tokens(120, 0)));
  kv->check_invariants();
  EXPECT_EQ(kv->num_used_window_slots(), 0u);
  ASSERT_EQ(kv->swap_in(SeqId{1}), SwapInStatus::kOk);
  kv->check_invariants();
  EXPECT_EQ(kv->num_used_window_slots(), used);
  EXPECT_EQ(kv->num_computed_tokens(SeqId{1}), 120);
  kv->free_sequence(SeqId{1});
  kv->check_invariants();
}

}  // namespace
}  // namespace kvw
