// Tests for KvManager: 16-token blocks x 11 blocks, exact block ids, prefix hits, LRU eviction,
// fork with copy-on-write, defragmentation and layout statistics. FakeStorage holds one token id
// per slot, so every test can check that a sequence still reads its own tokens.
#include "kv/kv_manager.h"

#include <gtest/gtest.h>

#include "kv_test_util.h"

namespace kvw {
namespace {

using test::FakeStorage;
using test::ids;
using test::iota_tokens;
using V = std::vector<uint32_t>;

constexpr int32_t kBs = 16;
constexpr uint32_t kBlocks = 11;

class KvManagerTest : public ::testing::Test {
 protected:
  KvManagerTest()
      : storage_(kBlocks, kBs), kv_(KvManagerConfig{.num_blocks = kBlocks}, &storage_) {}

  // Adds a sequence, allocates the rest of its prompt, "runs the forward" and commits it.
  // Returns the tokens the prefix cache supplied.
  int64_t run_prompt(uint64_t seq, const std::vector<int32_t>& prompt) {
    const SeqId s{seq};
    const int64_t cached = kv_.add_sequence(s, prompt);
    kv_.check_invariants();
    EXPECT_EQ(kv_.allocate_slots(s, int64_t(prompt.size()) - cached), AllocStatus::kOk);
    storage_.write_tokens(kv_.block_table(s), prompt, cached, int64_t(prompt.size()));
    kv_.commit_computed(s, prompt, int64_t(prompt.size()));
    kv_.check_invariants();
    return cached;
  }
  void expect_reads(uint64_t seq, const std::vector<int32_t>& tokens) {
    EXPECT_EQ(storage_.read_tokens(kv_.block_table(SeqId{seq}), int64_t(tokens.size())), tokens);
  }
  static std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  FakeStorage storage_;
  KvManager kv_;
};

TEST_F(KvManagerTest, SecondRequestWithSamePrefixReusesBlocksAndComputesOnlyNewTokens) {
  const std::vector<int32_t> a = iota_tokens(40, 1000);
  EXPECT_EQ(run_prompt(1, a), 0);
  EXPECT_EQ(ids(kv_.block_table(SeqId{1})), (V{0, 1, 2}));

  const std::vector<int32_t> b = concat({a.begin(), a.begin() + 32}, iota_tokens(10, 5000));
  EXPECT_EQ(run_prompt(2, b), 32);  // two full shared blocks, only 10 tokens computed
  EXPECT_EQ(ids(kv_.block_table(SeqId{2})), (V{0, 1, 3}));
  EXPECT_EQ(kv_.pool().meta(BlockId{0}).ref_count, 2);
  EXPECT_EQ(kv_.pool().meta(BlockId{2}).ref_count, 1);
  expect_reads(1, a);
  expect_reads(2, b);

  const PrefixCacheCounters c = kv_.prefix_counters();
  EXPECT_EQ(c.num_queries, 2u);
  EXPECT_EQ(c.num_query_tokens, 82u);
  EXPECT_EQ(c.num_hit_blocks, 2u);
  EXPECT_EQ(c.num_hit_tokens, 32u);
  EXPECT_DOUBLE_EQ(c.hit_rate(), 32.0 / 82.0);
}

TEST_F(KvManagerTest, PrefixHitAlwaysLeavesTheLastTokenToCompute) {
  const std::vector<int32_t> a = iota_tokens(32, 7);
  run_prompt(1, a);
  EXPECT_EQ(kv_.num_cached_prefix_tokens(a), 16);  // not 32: the last token yields logits
  EXPECT_EQ(kv_.add_sequence(SeqId{2}, a), 16);
  EXPECT_EQ(ids(kv_.block_table(SeqId{2})), (V{0}));
  EXPECT_EQ(kv_.num_computed_tokens(SeqId{2}), 16);
  kv_.check_invariants();
  // A different first token shares nothing, even with the same later blocks (chain hash).
  std::vector<int32_t> other = a;
  other[0] = 99;
  EXPECT_EQ(kv_.num_cached_prefix_tokens(other), 0);
}

TEST_F(KvManagerTest, FreedPrefixesStayCachedAndAreEvictedLruTailFirst) {
  const std::vector<int32_t> p1 = iota_tokens(48, 0);
  const std::vector<int32_t> p2 = iota_tokens(32, 100);
  run_prompt(1, p1);  // blocks 0 1 2, all hashed
  run_prompt(2, p2);  // blocks 3 4
  kv_.free_sequence(SeqId{1});
  kv_.check_invariants();
  kv_.free_sequence(SeqId{2});
  kv_.check_invariants();
  EXPECT_EQ(kv_.stats().num_cached_blocks, 5u);
  EXPECT_EQ(ids(kv_.pool().free_queue_order()), (V{5, 6, 7, 8, 9, 10, 2, 1, 0, 4, 3}));

  // 8 blocks for an unrelated sequence: 6 free ones, then the LRU cached tail blocks 2, 1.
  kv_.add_sequence(SeqId{3}, iota_tokens(128, 9000));
  ASSERT_EQ(kv_.allocate_slots(SeqId{3}, 128), AllocStatus::kOk);
  kv_.check_invariants();
  EXPECT_EQ(ids(kv_.block_table(SeqId{3})), (V{5, 6, 7, 8, 9, 10, 2, 1}));
  EXPECT_EQ(kv_.prefix_counters().num_evictions, 2u);

  // p1 keeps only its first block (the chain breaks at the evicted block 1); p2 is intact.
  EXPECT_EQ(kv_.add_sequence(SeqId{4}, concat(p1, {1})), 16);
  EXPECT_EQ(ids(kv_.block_table(SeqId{4})), (V{0}));
  EXPECT_EQ(kv_.add_sequence(SeqId{5}, concat(p2, {1})), 32);
  EXPECT_EQ(ids(kv_.block_table(SeqId{5})), (V{3, 4}));
  EXPECT_EQ(kv_.num_allocatable_blocks(), 0u);
  kv_.check_invariants();
  expect_reads(5, p2);
}

TEST_F(KvManagerTest, AllocateSlotsIsAllOrNothing) {
  kv_.add_sequence(SeqId{1}, {});
  ASSERT_EQ(kv_.allocate_slots(SeqId{1}, 150), AllocStatus::kOk);  // 10 blocks
  EXPECT_FALSE(kv_.can_allocate(SeqId{1}, 30));
  EXPECT_EQ(kv_.allocate_slots(SeqId{1}, 30), AllocStatus::kNoFreeBlocks);  // needs 2, 1 left
  EXPECT_EQ(kv_.num_tokens(SeqId{1}), 150);
  EXPECT_EQ(kv_.block_table(SeqId{1}).size(), 10u);
  EXPECT_EQ(kv_.num_allocatable_blocks(), 1u);
  kv_.check_invariants();
  EXPECT_TRUE(kv_.can_allocate(SeqId{1}, 26));
  ASSERT_EQ(kv_.allocate_slots(SeqId{1}, 26), AllocStatus::kOk);
  EXPECT_EQ(ids(kv_.block_table(SeqId{1})), (V{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  ASSERT_EQ(kv_.allocate_slots(SeqId{1}, 0), AllocStatus::kOk);
  kv_.check_invariants();
}

TEST_F(KvManagerTest, ForkSharesComputedBlocksAndCopiesThePartialLastBlock) {
  const std::vector<int32_t> a = iota_tokens(40, 1);
  run_prompt(1, a);
  ASSERT_EQ(kv_.fork(SeqId{1}, SeqId{2}), AllocStatus::kOk);
  kv_.check_invariants();
  EXPECT_EQ(ids(kv_.block_table(SeqId{2})), (V{0, 1, 3}));
  EXPECT_EQ(storage_.copies, (std::vector<std::pair<uint32_t, uint32_t>>{{2, 3}}));
  EXPECT_EQ(kv_.pool().meta(BlockId{1}).ref_count, 2);
  EXPECT_EQ(kv_.num_computed_tokens(SeqId{2}), 40);
  expect_reads(2, a);

  // Each continues with its own sampled token; neither sees the other's.
  const std::vector<int32_t> a1 = concat(a, {-5});
  const std::vector<int32_t> a2 = concat(a, {-6});
  for (auto [seq, toks] : {std::pair{1u, &a1}, std::pair{2u, &a2}}) {
    ASSERT_EQ(kv_.allocate_slots(SeqId{seq}, 1), AllocStatus::kOk);
    storage_.write_tokens(kv_.block_table(SeqId{seq}), *toks, 40, 41);
    kv_.commit_computed(SeqId{seq}, *toks, 41);
    kv_.check_invariants();
  }
  expect_reads(1, a1);
  expect_reads(2, a2);
}

TEST_F(KvManagerTest, ForkAtBlockBoundarySharesEverythingAndFailsCleanlyWhenFull) {
  run_prompt(1, iota_tokens(32, 1));
  ASSERT_EQ(kv_.fork(SeqId{1}, SeqId{2}), AllocStatus::kOk);
  EXPECT_TRUE(storage_.copies.empty());
  EXPECT_EQ(ids(kv_.block_table(SeqId{2})), (V{0, 1}));

  run_prompt(3, iota_tokens(20, 500));  // blocks 2 3, last one partial
  kv_.add_sequence(SeqId{4}, {});
  ASSERT_EQ(kv_.allocate_slots(SeqId{4}, 7 * kBs), AllocStatus::kOk);  // pool now full
  EXPECT_EQ(kv_.fork(SeqId{3}, SeqId{5}), AllocStatus::kNoFreeBlocks);
  EXPECT_FALSE(kv_.has_sequence(SeqId{5}));
  EXPECT_EQ(kv_.pool().meta(BlockId{2}).ref_count, 1);
  kv_.check_invariants();
}

TEST_F(KvManagerTest, DefragmentMovesHighBlocksIntoLowHolesAndTablesFollow) {
  const std::vector<int32_t> t1 = iota_tokens(32, 100), t2 = iota_tokens(32, 200),
                             t3 = iota_tokens(48, 300), t4 = iota_tokens(32, 400),
                             t5 = iota_tokens(16, 500);
  run_prompt(1, t1);  // 0 1
  run_prompt(2, t2);  // 2 3
  run_prompt(3, t3);  // 4 5 6
  run_prompt(4, t4);  // 7 8
  run_prompt(5, t5);  // 9
  // Without prefix reuse in the way: drop the cached copies by freeing and evicting nothing;
  // the freed blocks of 2 and 4 stay cached (hashed), which the defragmenter treats as data.
  kv_.free_sequence(SeqId{2});
  kv_.free_sequence(SeqId{4});
  KvLayoutStats s = kv_.stats();
  EXPECT_EQ(s.num_free_blocks, 1u);  // block 10
  EXPECT_EQ(s.num_cached_blocks, 4u);

  // Evict the cached blocks so the holes are truly free: a 5-block sequence takes 10, 3, 2, 8,
  // 7 (free first, then LRU cached in free order), then is freed (unhashed -> queue head).
  kv_.add_sequence(SeqId{6}, {});
  ASSERT_EQ(kv_.allocate_slots(SeqId{6}, 5 * kBs), AllocStatus::kOk);
  EXPECT_EQ(ids(kv_.block_table(SeqId{6})), (V{10, 3, 2, 8, 7}));
  kv_.free_sequence(SeqId{6});
  kv_.check_invariants();
  s = kv_.stats();
  EXPECT_EQ(s.num_free_blocks, 5u);
  EXPECT_EQ(s.largest_free_run, 2u);  // {2,3}, {7,8}, {10}
  EXPECT_EQ(s.num_free_runs, 3u);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 3.0 / 5.0);

  storage_.copies.clear();
  EXPECT_EQ(kv_.defragment(1), 1u);  // bounded: one move per call
  kv_.check_invariants();
  EXPECT_EQ(storage_.copies, (std::vector<std::pair<uint32_t, uint32_t>>{{9, 2}}));
  EXPECT_EQ(kv_.defragment(8), 1u);  // 6 -> 3, then compact
  kv_.check_invariants();
  EXPECT_EQ(storage_.copies, (std::vector<std::pair<uint32_t, uint32_t>>{{9, 2}, {6, 3}}));
  EXPECT_EQ(ids(kv_.block_table(SeqId{5})), (V{2}));
  EXPECT_EQ(ids(kv_.block_table(SeqId{3})), (V{4, 5, 3}));
  EXPECT_EQ(kv_.defragment(8), 0u);
  s = kv_.stats();
  EXPECT_EQ(s.largest_free_run, 5u);  // 6..10
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.0);
  EXPECT_EQ(s.max_runs_per_seq, 2u);
  expect_reads(1, t1);
  expect_reads(3, t3);
  expect_reads(5, t5);
  // The moved blocks are still found by their prefix hash at their new ids.
  EXPECT_EQ(kv_.add_sequence(SeqId{7}, concat(t3, {1})), 48);
  EXPECT_EQ(ids(kv_.block_table(SeqId{7})), (V{4, 5, 3}));
  kv_.check_invariants();
}

TEST_F(KvManagerTest, StatsSeparateBlockUsageFromTokenUsage) {
  kv_.add_sequence(SeqId{1}, {});
  ASSERT_EQ(kv_.allocate_slots(SeqId{1}, 20), AllocStatus::kOk);  // 0 1
  kv_.add_sequence(SeqId{2}, {});
  ASSERT_EQ(kv_.allocate_slots(SeqId{2}, 5), AllocStatus::kOk);  // 2
  const KvLayoutStats s = kv_.stats();
  EXPECT_EQ(s.num_used_blocks, 3u);
  EXPECT_EQ(s.num_free_blocks, 8u);
  EXPECT_EQ(s.num_used_token_slots, 25u);
  EXPECT_EQ(s.num_waste_slots, 23u);
  EXPECT_DOUBLE_EQ(s.block_usage(), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(s.token_usage(), 25.0 / 176.0);
  EXPECT_DOUBLE_EQ(s.internal_waste(), 23.0 / 48.0);
  EXPECT_EQ(s.largest_free_run, 8u);
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.0);
  EXPECT_EQ(s.num_seqs, 2u);
  EXPECT_DOUBLE_EQ(s.mean_runs_per_seq(), 1.0);
}

TEST_F(KvManagerTest, CanAdmitCountsRevivedBlocksAndWatermark) {
  FakeStorage storage(kBlocks, kBs);
  KvManager kv(KvManagerConfig{.num_blocks = kBlocks, .watermark_blocks = 2}, &storage);
  const std::vector<int32_t> p = iota_tokens(48, 0);
  kv.add_sequence(SeqId{1}, p);
  ASSERT_EQ(kv.allocate_slots(SeqId{1}, 48), AllocStatus::kOk);
  kv.commit_computed(SeqId{1}, p, 48);
  kv.free_sequence(SeqId{1});  // 0 1 2 cached
  kv.add_sequence(SeqId{2}, {});
  ASSERT_EQ(kv.allocate_slots(SeqId{2}, 7 * kBs), AllocStatus::kOk);  // 3..9
  EXPECT_EQ(kv.num_allocatable_blocks(), 4u);                         // 10 and cached 2 1 0
  // 3 revived + 1 new + watermark 2 = 6 > 4.
  EXPECT_FALSE(kv.can_admit(concat(p, {1}), 49));
  // Unrelated prompts: 2 new + 2 = 4 fits, 3 new + 2 does not.
  EXPECT_TRUE(kv.can_admit(iota_tokens(32, 999), 32));
  EXPECT_FALSE(kv.can_admit(iota_tokens(33, 999), 33));
  EXPECT_TRUE(kv.can_allocate(SeqId{2}, 4 * kBs));  // running sequences may use the watermark
  kv.check_invariants();
}

TEST_F(KvManagerTest, BlockMapRecordsStateOwnerAndSteps) {
  run_prompt(1, iota_tokens(20, 0));  // step 0: blocks 0 (hashed) 1
  kv_.advance_step();
  kv_.add_sequence(SeqId{2}, concat(iota_tokens(16, 0), {7, 7}));  // hit on block 0 at step 1
  ASSERT_EQ(kv_.allocate_slots(SeqId{2}, 2), AllocStatus::kOk);    // block 2
  kv_.advance_step();
  kv_.free_sequence(SeqId{1});  // block 1 free, block 0 still held by seq 2
  const std::vector<BlockRecord> map = kv_.block_map();
  ASSERT_EQ(map.size(), kBlocks);
  EXPECT_EQ(map[0].state, BlockState::kUsed);
  EXPECT_EQ(map[0].owner, SeqId{2});
  EXPECT_EQ(map[0].ref_count, 1);
  EXPECT_EQ(map[0].num_tokens, 16);
  EXPECT_EQ(map[0].alloc_step, 0u);
  EXPECT_EQ(map[0].last_access_step, 2u);  // freed by seq 1 at step 2
  EXPECT_EQ(map[1].state, BlockState::kFree);
  EXPECT_FALSE(map[1].owner);
  EXPECT_EQ(map[2].owner, SeqId{2});
  EXPECT_EQ(map[2].num_tokens, 2);
  EXPECT_EQ(map[2].alloc_step, 1u);
  EXPECT_EQ(kv_.step(), 2u);
}

TEST(KvManager, PrefixCachingDisabledNeverHashesOrHits) {
  KvManager kv(KvManagerConfig{.num_blocks = kBlocks, .enable_prefix_caching = false}, nullptr);
  const std::vector<int32_t> p = iota_tokens(40, 0);
  for (uint64_t s = 1; s <= 2; ++s) {
    EXPECT_EQ(kv.add_sequence(SeqId{s}, p), 0);
    ASSERT_EQ(kv.allocate_slots(SeqId{s}, 40), AllocStatus::kOk);
    kv.commit_computed(SeqId{s}, p, 40);
    kv.check_invariants();
  }
  EXPECT_EQ(ids(kv.block_table(SeqId{2})), (V{3, 4, 5}));
  kv.free_sequence(SeqId{1});
  EXPECT_EQ(kv.stats().num_cached_blocks, 0u);
  EXPECT_EQ(kv.defragment(4), 3u);  // nullptr storage: tables still move
  EXPECT_EQ(ids(kv.block_table(SeqId{2})), (V{2, 1, 0}));
  kv.check_invariants();
}

TEST(KvManagerConfig, ValidateRejectsBadValues) {
  EXPECT_TRUE(KvManagerConfig{.num_blocks = 4}.validate().ok());
  EXPECT_FALSE(KvManagerConfig{.num_blocks = 0}.validate().ok());
  EXPECT_FALSE((KvManagerConfig{.num_blocks = 4, .block_size = 64}.validate().ok()));
  EXPECT_FALSE((KvManagerConfig{.num_blocks = 4, .watermark_blocks = 4}.validate().ok()));
}

}  // namespace
}  // namespace kvw

namespace kvw {
namespace {

// Speculative decoding's rollback: reserved slots beyond the verified tokens are given back,
// whole blocks beyond them freed to the head of the free queue (reused first), and the prefix
// cache holds only blocks whose every token was committed.
TEST_F(KvManagerTest, TruncateSlotsFreesWholeBlocksBeyondAndHashesNothingUnverified) {
  const SeqId s{1};
  const std::vector<int32_t> t = iota_tokens(30, 100);
  kv_.add_sequence(s, t);
  ASSERT_EQ(kv_.allocate_slots(s, 30), AllocStatus::kOk);
  kv_.commit_computed(s, t, 30);
  // Decode token at 30 plus 5 drafts: slots to 36, a third block.
  ASSERT_EQ(kv_.allocate_slots(s, 6), AllocStatus::kOk);
  EXPECT_EQ(ids(kv_.block_table(s)), (V{0, 1, 2}));
  kv_.truncate_slots(s, 31);  // only the decode token's KV is verified
  kv_.check_invariants();
  EXPECT_EQ(kv_.num_tokens(s), 31);
  EXPECT_EQ(ids(kv_.block_table(s)), (V{0, 1}));
  EXPECT_EQ(kv_.pool().num_free_blocks(), kBlocks - 2);
  // The freed block is the next one handed out.
  ASSERT_EQ(kv_.allocate_slots(s, 2), AllocStatus::kOk);
  EXPECT_EQ(ids(kv_.block_table(s)), (V{0, 1, 2}));
  kv_.truncate_slots(s, 31);
  kv_.free_sequence(s);
  kv_.check_invariants();
  EXPECT_EQ(kv_.num_allocatable_blocks(), kBlocks);
  EXPECT_EQ(kv_.stats().num_cached_blocks, 1u);  // block 0 only: block 1 never filled
}

}  // namespace
}  // namespace kvw
