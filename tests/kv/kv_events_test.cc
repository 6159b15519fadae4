// Tests for the KV cache events the KvManager records (kv/kv_events.h): what BlockStored carries
// (consecutive chain hashes, the parent hash, the blocks' tokens), BlockRemoved on eviction,
// nothing for a prefix another block already caches, and that replaying the events always gives
// exactly the hashes the pool holds (with prefix hits, evictions, swap-out/in and revivals from
// the swap tier). 16-token blocks x 11 blocks.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "kv/kv_manager.h"
#include "kv_test_util.h"

namespace kvw {
namespace {

using test::FakeStorage;
using test::iota_tokens;
using test::MemBlockFile;
using Kind = KvCacheEvent::Kind;

constexpr int32_t kBs = 16;

std::vector<uint64_t> chain(std::span<const int32_t> tokens) {
  std::vector<uint64_t> h;
  hash_full_blocks(tokens, kBs, 0, kPrefixHashSeed, h);
  return h;
}

// A subscriber's view: the hashes the events say are cached.
class Mirror {
 public:
  void apply(const std::vector<KvCacheEvent>& events) {
    for (const KvCacheEvent& e : events) {
      if (e.kind == Kind::kAllBlocksCleared) hashes_.clear();
      for (uint64_t h : e.block_hashes) {
        if (e.kind == Kind::kBlockStored) {
          EXPECT_TRUE(hashes_.insert(h).second) << "stored twice: " << h;
        } else {
          EXPECT_EQ(hashes_.erase(h), 1u) << "removed but never stored: " << h;
        }
      }
    }
  }
  const std::set<uint64_t>& hashes() const { return hashes_; }

 private:
  std::set<uint64_t> hashes_;
};

std::set<uint64_t> pool_hashes(const KvManager& kv) {
  std::set<uint64_t> s;
  for (const BlockRecord& r : kv.block_map()) {
    if (r.block_hash) s.insert(*r.block_hash);
  }
  return s;
}

class KvEventsTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kSlots = 6;

  KvEventsTest() : storage_(11, kBs), kv_(KvManagerConfig{.num_blocks = 11}, &storage_) {}

  void attach_swap() {
    const uint64_t bpb = storage_.bytes_per_block();
    auto swap = SwapSpace::open_with_file(
        SwapConfig{.path = "mem", .swap_bytes = kSlots * bpb, .max_inflight_bytes = 2 * bpb},
        &storage_, std::make_unique<MemBlockFile>(kSlots * bpb));
    ASSERT_TRUE(swap.ok()) << swap.message();
    kv_.attach_swap(std::move(swap).value());
  }
  void run_prompt(uint64_t seq, const std::vector<int32_t>& prompt) {
    const int64_t cached = kv_.add_sequence(SeqId{seq}, prompt);
    ASSERT_EQ(kv_.allocate_slots(SeqId{seq}, int64_t(prompt.size()) - cached), AllocStatus::kOk);
    storage_.write_tokens(kv_.block_table(SeqId{seq}), prompt, cached, int64_t(prompt.size()));
    kv_.commit_computed(SeqId{seq}, prompt, int64_t(prompt.size()));
    kv_.check_invariants();
  }
  std::vector<KvCacheEvent> take() {
    std::vector<KvCacheEvent> e;
    kv_.take_kv_events(e);
    mirror_.apply(e);
    EXPECT_EQ(mirror_.hashes(), pool_hashes(kv_));
    return e;
  }

  FakeStorage storage_;
  KvManager kv_;
  Mirror mirror_;
};

TEST_F(KvEventsTest, NothingIsRecordedUntilAsked) {
  run_prompt(1, iota_tokens(40, 0));
  std::vector<KvCacheEvent> e;
  kv_.take_kv_events(e);
  EXPECT_TRUE(e.empty());
}

TEST_F(KvEventsTest, FullBlocksAreStoredAsOneChainWithTheirTokens) {
  kv_.record_kv_events();
  const std::vector<int32_t> a = iota_tokens(40, 1000);
  run_prompt(1, a);
  const std::vector<KvCacheEvent> e = take();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].kind, Kind::kAllBlocksCleared);
  EXPECT_EQ(e[1].kind, Kind::kBlockStored);
  EXPECT_EQ(e[1].block_hashes, chain(a));  // the two full blocks; the partial third is not
  EXPECT_FALSE(e[1].parent_block_hash.has_value());
  EXPECT_EQ(e[1].token_ids, std::vector<int32_t>(a.begin(), a.begin() + 32));
}

TEST_F(KvEventsTest, PrefixHitStoresOnlyTheNewBlockWithItsParent) {
  kv_.record_kv_events();
  const std::vector<int32_t> a = iota_tokens(48, 0);
  run_prompt(1, a);
  take();
  std::vector<int32_t> b(a.begin(), a.begin() + 32);
  const std::vector<int32_t> tail = iota_tokens(17, 500);
  b.insert(b.end(), tail.begin(), tail.end());
  run_prompt(2, b);  // hits blocks 0 and 1, computes block 2 (new) and one more token
  const std::vector<KvCacheEvent> e = take();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].kind, Kind::kBlockStored);
  EXPECT_EQ(e[0].block_hashes, std::vector<uint64_t>{chain(b)[2]});
  EXPECT_EQ(e[0].parent_block_hash, chain(a)[1]);
  EXPECT_EQ(e[0].token_ids, std::vector<int32_t>(b.begin() + 32, b.begin() + 48));
}

TEST_F(KvEventsTest, PrefixAnotherBlockAlreadyCachesIsNotStoredAgain) {
  kv_.record_kv_events();
  const std::vector<int32_t> a = iota_tokens(33, 0);
  for (uint64_t s : {1, 2}) {  // both admitted before either is computed: no hit
    ASSERT_EQ(kv_.add_sequence(SeqId{s}, a), 0);
    ASSERT_EQ(kv_.allocate_slots(SeqId{s}, 33), AllocStatus::kOk);
  }
  kv_.commit_computed(SeqId{1}, a, 33);
  kv_.commit_computed(SeqId{2}, a, 33);  // its copies stay private
  const std::vector<KvCacheEvent> e = take();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1].block_hashes, chain(a));
}

TEST_F(KvEventsTest, EvictionRemovesTheHashes) {
  kv_.record_kv_events();
  const std::vector<int32_t> a = iota_tokens(48, 0);
  run_prompt(1, a);
  kv_.free_sequence(SeqId{1});  // 3 cached blocks, LRU
  take();
  run_prompt(2, iota_tokens(8 * kBs + 1, 9000));  // 9 blocks of 11: evicts one cached block
  const std::vector<KvCacheEvent> e = take();
  size_t removed = 0;
  for (const KvCacheEvent& ev : e) {
    if (ev.kind == Kind::kBlockRemoved) removed += ev.block_hashes.size();
  }
  EXPECT_EQ(removed, 1u);
  EXPECT_EQ(kv_.prefix_counters().num_evictions, 1u);
}

TEST_F(KvEventsTest, SwapOutAndInAndTierRevivalKeepTheMirrorExact) {
  attach_swap();
  kv_.record_kv_events();
  const std::vector<int32_t> a = iota_tokens(40, 100);
  run_prompt(1, a);
  take();
  ASSERT_TRUE(kv_.swap_out(SeqId{1}, a));
  run_prompt(2, iota_tokens(11 * kBs, -9999));  // evicts a's cached blocks (offloaded)
  kv_.free_sequence(SeqId{2});
  kv_.poll_swap();
  take();
  EXPECT_TRUE(pool_hashes(kv_).count(chain(a)[0]) == 0);
  ASSERT_EQ(kv_.swap_in(SeqId{1}), SwapInStatus::kOk);
  std::vector<KvCacheEvent> e = take();  // a's blocks are registered again, with their tokens
  ASSERT_FALSE(e.empty());
  EXPECT_EQ(e.back().kind, Kind::kBlockStored);
  EXPECT_EQ(e.back().block_hashes, std::vector<uint64_t>{chain(a)[1]});
  EXPECT_EQ(e.back().parent_block_hash, chain(a)[0]);
  EXPECT_EQ(e.back().token_ids, std::vector<int32_t>(a.begin() + 16, a.begin() + 32));
}

TEST_F(KvEventsTest, RandomWorkloadUnderATinyPoolKeepsTheMirrorExact) {
  attach_swap();
  kv_.record_kv_events();
  std::mt19937 rng(17);
  std::vector<std::vector<int32_t>> prefixes;
  for (int32_t p = 0; p < 4; ++p) prefixes.push_back(iota_tokens(32, p * 1000));
  std::map<uint64_t, std::vector<int32_t>> live;  // seq -> prompt
  uint64_t next = 1;
  for (int step = 0; step < 300; ++step) {
    const uint32_t op = rng() % 4;
    if (op < 2) {
      std::vector<int32_t> prompt = prefixes[rng() % prefixes.size()];
      const std::vector<int32_t> tail = iota_tokens(int32_t(rng() % 40 + 1), int32_t(rng()));
      prompt.insert(prompt.end(), tail.begin(), tail.end());
      if (!kv_.can_admit(prompt, int64_t(prompt.size()))) continue;
      run_prompt(next, prompt);
      live.emplace(next++, std::move(prompt));
    } else if (!live.empty()) {
      auto it = std::next(live.begin(), ptrdiff_t(rng() % live.size()));
      const SeqId s{it->first};
      bool keep = false;
      if (op == 2 && kv_.is_swapped(s)) {
        keep = kv_.swap_in(s) == SwapInStatus::kOk;
      } else if (op == 2) {
        keep = kv_.swap_out(s, it->second);
      }
      if (!keep) {
        if (kv_.has_sequence(s) || kv_.is_swapped(s)) kv_.free_sequence(s);
        live.erase(it);
      }
    }
    kv_.poll_swap();
    kv_.check_invariants();
    take();
  }
  EXPECT_GT(kv_.prefix_counters().num_evictions, 0u);
  EXPECT_GT(kv_.prefix_counters().num_hit_blocks, 0u);
}

}  // namespace
}  // namespace kvw
