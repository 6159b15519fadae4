// Tests for BlockPool, BlockLease and PrefixCache: tiny pools (11 blocks), exact block ids,
// exact free-queue and eviction order, check_invariants after every operation.
#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include "kv/prefix_cache.h"
#include "kv_test_util.h"

namespace kvw {
namespace {

using test::ids;
using V = std::vector<uint32_t>;

TEST(BlockPool, FirstAllocationsAreContiguousFromZero) {
  BlockPool pool(11, nullptr);
  pool.check_invariants();
  std::optional<BlockLease> a = pool.allocate(3);
  ASSERT_TRUE(a);
  EXPECT_EQ(ids(a->blocks()), (V{0, 1, 2}));
  std::optional<BlockLease> b = pool.allocate(2);
  ASSERT_TRUE(b);
  EXPECT_EQ(ids(b->blocks()), (V{3, 4}));
  EXPECT_EQ(pool.num_used_blocks(), 5u);
  EXPECT_EQ(pool.num_free_blocks(), 6u);
  EXPECT_EQ(pool.meta(BlockId{3}).ref_count, 1);
  pool.check_invariants();
}

TEST(BlockPool, AllocateReturnsNulloptAndLeavesPoolUnchangedWhenExhausted) {
  BlockPool pool(11, nullptr);
  std::optional<BlockLease> a = pool.allocate(8);
  ASSERT_TRUE(a);
  const std::vector<BlockId> before = pool.free_queue_order();
  EXPECT_FALSE(pool.allocate(4));
  std::vector<BlockId> out;
  EXPECT_FALSE(pool.allocate(4, out));
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(pool.free_queue_order(), before);
  EXPECT_EQ(pool.num_allocatable_blocks(), 3u);
  pool.check_invariants();
  EXPECT_TRUE(pool.allocate(3));  // exactly the rest still works (and is freed again)
  pool.check_invariants();
}

TEST(BlockPool, LeaseFreesInReverseOrderUnhashedBlocksReusedFirst) {
  BlockPool pool(11, nullptr);
  {
    std::optional<BlockLease> a = pool.allocate(3);  // 0 1 2
    pool.check_invariants();
  }
  // Freed 2, 1, 0, each pushed to the head: the queue starts 0 1 2 again, then 3..10.
  EXPECT_EQ(ids(pool.free_queue_order()), (V{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(pool.num_used_blocks(), 0u);
  pool.check_invariants();
}

TEST(BlockPool, CachedBlocksGoToTailTailOfSequenceEvictedFirst) {
  PrefixCache cache;
  BlockPool pool(11, &cache);
  std::optional<BlockLease> a = pool.allocate(3);  // 0 1 2
  for (uint32_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(cache.insert(100 + i, BlockId{i}));
    pool.set_hash(BlockId{i}, 100 + i);
  }
  a.reset();  // frees 2, 1, 0 to the tail
  pool.check_invariants();
  EXPECT_EQ(pool.num_cached_blocks(), 3u);
  EXPECT_EQ(pool.num_free_blocks(), 8u);
  EXPECT_EQ(ids(pool.free_queue_order()), (V{3, 4, 5, 6, 7, 8, 9, 10, 2, 1, 0}));

  std::vector<BlockId> seen_evicted;
  pool.set_evict_callback([&](BlockId b, uint64_t h) {
    seen_evicted.push_back(b);
    EXPECT_EQ(h, 100 + index_of(b));
  });
  std::optional<BlockLease> b = pool.allocate(8);  // all free blocks, no eviction yet
  EXPECT_TRUE(seen_evicted.empty());
  std::optional<BlockLease> c = pool.allocate(2);  // evicts 2 then 1
  ASSERT_TRUE(c);
  EXPECT_EQ(ids(c->blocks()), (V{2, 1}));
  EXPECT_EQ(ids(seen_evicted), (V{2, 1}));
  EXPECT_EQ(pool.num_evictions(), 2u);
  EXPECT_FALSE(cache.lookup(102));
  EXPECT_FALSE(cache.lookup(101));
  EXPECT_EQ(cache.lookup(100), BlockId{0});
  EXPECT_FALSE(pool.meta(BlockId{2}).has_hash);
  pool.check_invariants();
}

TEST(BlockPool, TouchRevivesCachedBlockFromMiddleOfQueue) {
  PrefixCache cache;
  BlockPool pool(11, &cache);
  std::optional<BlockLease> a = pool.allocate(3);
  for (uint32_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(cache.insert(7 + i, BlockId{i}));
    pool.set_hash(BlockId{i}, 7 + i);
  }
  a.reset();
  pool.touch(BlockId{1});  // a prefix hit on the middle cached block
  pool.check_invariants();
  EXPECT_EQ(pool.state(BlockId{1}), BlockState::kUsed);
  EXPECT_EQ(pool.meta(BlockId{1}).ref_count, 1);
  EXPECT_EQ(ids(pool.free_queue_order()), (V{3, 4, 5, 6, 7, 8, 9, 10, 2, 0}));
  pool.touch(BlockId{1});  // second owner
  EXPECT_EQ(pool.meta(BlockId{1}).ref_count, 2);
  BlockId one = BlockId{1};
  pool.free(std::span<const BlockId>(&one, 1));
  EXPECT_EQ(pool.state(BlockId{1}), BlockState::kUsed);
  pool.free(std::span<const BlockId>(&one, 1));
  // Back at the tail: now the most recently used cached block.
  EXPECT_EQ(ids(pool.free_queue_order()), (V{3, 4, 5, 6, 7, 8, 9, 10, 2, 0, 1}));
  pool.check_invariants();
}

TEST(BlockPool, MoveBlockKeepsLruPositionOfCachedBlock) {
  PrefixCache cache;
  BlockPool pool(11, &cache);
  std::optional<BlockLease> a = pool.allocate(11);
  std::vector<BlockId> keep{BlockId{8}, BlockId{9}};
  pool.touch(keep);  // extra refs so 8, 9 stay cached below
  for (uint32_t i : {8u, 9u}) {
    ASSERT_TRUE(cache.insert(i, BlockId{i}));
    pool.set_hash(BlockId{i}, i);
  }
  a.reset();  // 10..0 freed; 8, 9 still referenced once
  std::vector<BlockId> nine{BlockId{9}}, eight{BlockId{8}};
  pool.free(nine);
  pool.free(eight);
  EXPECT_EQ(ids(pool.free_queue_order()), (V{0, 1, 2, 3, 4, 5, 6, 7, 10, 9, 8}));
  cache.rename(9, BlockId{0});
  pool.move_block(BlockId{9}, BlockId{0});
  pool.check_invariants();
  EXPECT_EQ(pool.state(BlockId{0}), BlockState::kCached);
  EXPECT_EQ(pool.state(BlockId{9}), BlockState::kFree);
  EXPECT_EQ(ids(pool.free_queue_order()), (V{9, 1, 2, 3, 4, 5, 6, 7, 10, 0, 8}));
}

TEST(PrefixCache, ChainHashDependsOnParentAndTokens) {
  const std::vector<int32_t> t = test::iota_tokens(48, 1);
  std::vector<uint64_t> h;
  hash_full_blocks(t, 16, 0, kPrefixHashSeed, h);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0], hash_block_tokens(kPrefixHashSeed, std::span(t).first(16)));
  EXPECT_EQ(h[1], hash_block_tokens(h[0], std::span(t).subspan(16, 16)));
  // Same tokens under another parent: another hash.
  EXPECT_NE(hash_block_tokens(kPrefixHashSeed, std::span(t).subspan(16, 16)), h[1]);
  // Resuming from block 2 with its parent gives the same tail.
  std::vector<uint64_t> tail;
  hash_full_blocks(t, 16, 2, h[1], tail);
  EXPECT_EQ(tail, std::vector<uint64_t>{h[2]});
  // A partial block is not hashed.
  std::vector<uint64_t> partial;
  hash_full_blocks(std::span(t).first(47), 16, 0, kPrefixHashSeed, partial);
  EXPECT_EQ(partial.size(), 2u);
}

// A block that straddles a shared prompt's end and a sequence's outputs hashes as its tokens
// in one piece, at every split point (streamed in two parts: no scratch copy, issue 30).
TEST(PrefixCache, SplitBlockHashesAsItsTokensInOnePiece) {
  const std::vector<int32_t> t = test::iota_tokens(16, 7);
  const uint64_t whole = hash_block_tokens(kPrefixHashSeed, t);
  const std::span<const int32_t> all(t);
  for (size_t cut = 0; cut <= t.size(); ++cut) {
    const TokenSpan split(all.first(cut), all.subspan(cut));
    EXPECT_EQ(hash_split_block(kPrefixHashSeed, split), whole) << "split at " << cut;
  }
  EXPECT_NE(hash_split_block(kPrefixHashSeed + 1,
                             TokenSpan(std::span(t).first(8), std::span(t).subspan(8))),
            whole);
}

TEST(PrefixCache, InsertRefusesDuplicatePrefix) {
  PrefixCache cache;
  EXPECT_TRUE(cache.insert(5, BlockId{1}));
  EXPECT_FALSE(cache.insert(5, BlockId{2}));
  EXPECT_EQ(cache.lookup(5), BlockId{1});
  cache.erase(5, BlockId{1});
  EXPECT_FALSE(cache.lookup(5));
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace kvw
