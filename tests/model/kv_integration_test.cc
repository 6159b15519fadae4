// The forward pass running on the KV manager: prefix-cache hits, swap out/in, prefixes revived
// from the swap tier, forks (copy-on-write) and defragmentation all leave a sequence's logits
// bit-identical to an uninterrupted cold run.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kv/kv_arena.h"
#include "kv/kv_manager.h"
#include "kv/swap_space.h"
#include "model/model.h"
#include "model/model_maker.h"

namespace kvw {
namespace {

class KvIntegration : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    MakeModelSpec s;
    s.n_embd = 128;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_ff = 256;
    s.weight_type = GgmlType::kQ8_0;
    s.seed = 5;
    path_ = ::testing::TempDir() + "/kv_integration.gguf";
    ASSERT_TRUE(make_model(s, path_).ok());
  }

  void SetUp() override {
    auto m = Model::load(path_, {});
    ASSERT_TRUE(m.ok()) << m.message();
    model_ = std::move(m.value());
    V_ = model_->hparams().n_vocab;
  }

  std::vector<int32_t> tokens(int n, uint32_t seed) const {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = (int32_t)(rng() % V_);
    return t;
  }

  // Logits of every position of `toks`, computed in one forward on a private arena.
  std::vector<float> cold(std::span<const int32_t> toks) {
    const uint32_t nb = (uint32_t)(toks.size() + 15) / 16;
    KvArena kv(model_->kv_config(nb, 16, KvDtype::kF16));
    std::vector<uint32_t> table(nb);
    for (uint32_t i = 0; i < nb; ++i) table[i] = i;
    SeqInput in{.tokens = toks, .start_pos = 0, .block_table = table, .all_logits = true};
    std::vector<float> out(toks.size() * V_);
    EXPECT_TRUE(model_->forward({&in, 1}, kv, out.data()).ok());
    return out;
  }

  // Computes tokens [num_computed, toks.size()) of `seq` through the manager; all their logits.
  std::vector<float> compute(KvManager& mgr, KvArena& kv, SeqId seq,
                             std::span<const int32_t> toks) {
    const int64_t done = mgr.num_computed_tokens(seq);
    const int64_t n = (int64_t)toks.size() - done;
    EXPECT_EQ(mgr.allocate_slots(seq, (int64_t)toks.size() - mgr.num_tokens(seq)),
              AllocStatus::kOk);
    SeqInput in{.tokens = toks.subspan(done),
                .start_pos = done,
                .block_table = as_indices(mgr.block_table(seq)),
                .all_logits = true};
    std::vector<float> out(n * V_);
    EXPECT_TRUE(model_->forward({&in, 1}, kv, out.data()).ok());
    mgr.commit_computed(seq, toks, (int64_t)toks.size());
    mgr.check_invariants();
    return out;
  }

  std::vector<float> tail(const std::vector<float>& all, int64_t from_pos) const {
    return {all.begin() + from_pos * V_, all.end()};
  }

  static bool same(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  }

  static std::string path_;
  std::unique_ptr<Model> model_;
  int32_t V_ = 0;
};
std::string KvIntegration::path_;

TEST_F(KvIntegration, PrefixHitComputesOnlyNewTokensAndMatchesColdRun) {
  KvArena kv(model_->kv_config(16, 16, KvDtype::kF16));
  KvManager mgr({.num_blocks = 16, .block_size = 16}, &kv);
  auto a = tokens(40, 1);
  EXPECT_EQ(mgr.add_sequence(SeqId{1}, a), 0);
  compute(mgr, kv, SeqId{1}, a);
  mgr.free_sequence(SeqId{1});
  auto b = a;
  b.resize(32);
  const auto suffix = tokens(18, 2);
  b.insert(b.end(), suffix.begin(), suffix.end());
  EXPECT_EQ(mgr.add_sequence(SeqId{2}, b), 32);  // two full blocks of the shared prefix
  const auto got = compute(mgr, kv, SeqId{2}, b);
  EXPECT_EQ(got.size(), 18u * V_);  // only the new tokens were computed
  EXPECT_TRUE(same(got, tail(cold(b), 32)));
  EXPECT_GT(mgr.prefix_counters().num_hit_tokens, 0u);
}

TEST_F(KvIntegration, SwappedAndRestoredSequenceContinuesLikeAnUninterruptedRun) {
  KvArena kv(model_->kv_config(8, 16, KvDtype::kF16));
  KvManager mgr({.num_blocks = 8, .block_size = 16, .enable_prefix_caching = false}, &kv);
  auto swap = SwapSpace::open(
      {.path = ::testing::TempDir() + "/swap1", .swap_bytes = 8 * kv.bytes_per_block()}, &kv);
  ASSERT_TRUE(swap.ok()) << swap.message();
  mgr.attach_swap(std::move(swap.value()));
  const auto all = tokens(70, 3);
  std::span<const int32_t> first(all.data(), 45);
  mgr.add_sequence(SeqId{1}, first);
  compute(mgr, kv, SeqId{1}, first);
  ASSERT_TRUE(mgr.swap_out(SeqId{1}));
  // Another sequence takes every block and overwrites their contents.
  const auto other = tokens(128, 4);
  mgr.add_sequence(SeqId{2}, other);
  compute(mgr, kv, SeqId{2}, other);
  mgr.free_sequence(SeqId{2});
  ASSERT_EQ(mgr.swap_in(SeqId{1}), SwapInStatus::kOk);
  const auto rest = compute(mgr, kv, SeqId{1}, all);
  EXPECT_TRUE(same(rest, tail(cold(all), 45)));
}

TEST_F(KvIntegration, PrefixRevivedFromSwapTierMatchesColdRun) {
  KvArena kv(model_->kv_config(6, 16, KvDtype::kF16));
  KvManager mgr({.num_blocks = 6, .block_size = 16}, &kv);
  auto swap = SwapSpace::open(
      {.path = ::testing::TempDir() + "/swap2", .swap_bytes = 16 * kv.bytes_per_block()}, &kv);
  ASSERT_TRUE(swap.ok()) << swap.message();
  mgr.attach_swap(std::move(swap.value()));
  const auto p = tokens(48, 5);
  mgr.add_sequence(SeqId{1}, p);
  compute(mgr, kv, SeqId{1}, p);
  mgr.free_sequence(SeqId{1});
  // Fill the pool: the cached prefix blocks are evicted and offloaded to the tier.
  const auto flood = tokens(96, 6);
  mgr.add_sequence(SeqId{2}, flood);
  compute(mgr, kv, SeqId{2}, flood);
  mgr.free_sequence(SeqId{2});
  mgr.poll_swap();
  EXPECT_GT(mgr.prefix_counters().num_offloaded, 0u);
  auto q = std::vector<int32_t>(p.begin(), p.begin() + 32);
  const auto suffix = tokens(10, 7);
  q.insert(q.end(), suffix.begin(), suffix.end());
  const int64_t reused = mgr.add_sequence(SeqId{3}, q);
  EXPECT_EQ(reused, 32);
  EXPECT_GT(mgr.prefix_counters().num_swap_hits, 0u);
  const auto got = compute(mgr, kv, SeqId{3}, q);
  EXPECT_TRUE(same(got, tail(cold(q), 32)));
}

TEST_F(KvIntegration, ForkedSequencesMatchTheirOwnColdRuns) {
  KvArena kv(model_->kv_config(12, 16, KvDtype::kF16));
  KvManager mgr({.num_blocks = 12, .block_size = 16}, &kv);
  const auto prompt = tokens(21, 8);  // partial last block: forked by copy-on-write
  mgr.add_sequence(SeqId{1}, prompt);
  compute(mgr, kv, SeqId{1}, prompt);
  ASSERT_EQ(mgr.fork(SeqId{1}, SeqId{2}), AllocStatus::kOk);
  auto a = prompt, b = prompt;
  const auto ta = tokens(15, 9), tb = tokens(15, 10);
  a.insert(a.end(), ta.begin(), ta.end());
  b.insert(b.end(), tb.begin(), tb.end());
  const auto ga = compute(mgr, kv, SeqId{1}, a);
  const auto gb = compute(mgr, kv, SeqId{2}, b);
  EXPECT_TRUE(same(ga, tail(cold(a), 21)));
  EXPECT_TRUE(same(gb, tail(cold(b), 21)));
}

TEST_F(KvIntegration, DefragmentationKeepsLogits) {
  KvArena kv(model_->kv_config(12, 16, KvDtype::kF16));
  KvManager mgr({.num_blocks = 12, .block_size = 16, .enable_prefix_caching = false}, &kv);
  const auto hole = tokens(48, 11);
  mgr.add_sequence(SeqId{1}, hole);
  compute(mgr, kv, SeqId{1}, hole);
  const auto all = tokens(60, 12);
  std::span<const int32_t> first(all.data(), 40);
  mgr.add_sequence(SeqId{2}, first);
  compute(mgr, kv, SeqId{2}, first);
  mgr.free_sequence(SeqId{1});  // leaves a hole below sequence 2's blocks
  const auto before =
      std::vector<BlockId>(mgr.block_table(SeqId{2}).begin(), mgr.block_table(SeqId{2}).end());
  EXPECT_GT(mgr.defragment(8), 0u);
  EXPECT_NE(before, std::vector<BlockId>(mgr.block_table(SeqId{2}).begin(),
                                         mgr.block_table(SeqId{2}).end()));
  const auto rest = compute(mgr, kv, SeqId{2}, all);
  EXPECT_TRUE(same(rest, tail(cold(all), 40)));
}

// The same model with a 40-token sliding window on every layer: the KvManager releases blocks
// behind the window (KvManagerConfig::sliding_window), which must not change a single logit.
class KvWindowIntegration : public KvIntegration {
 protected:
  static constexpr int32_t kWindow = 40;

  static void SetUpTestSuite() {
    MakeModelSpec s;
    s.n_embd = 128;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_ff = 256;
    s.weight_type = GgmlType::kQ8_0;
    s.seed = 6;
    s.sliding_window = kWindow;
    wpath_ = ::testing::TempDir() + "/kv_window_integration.gguf";
    ASSERT_TRUE(make_model(s, wpath_).ok());
  }

  void SetUp() override {
    auto m = Model::load(wpath_, {});
    ASSERT_TRUE(m.ok()) << m.message();
    model_ = std::move(m.value());
    ASSERT_EQ(model_->hparams().sliding_window, kWindow);
    V_ = model_->hparams().n_vocab;
  }

  static KvManagerConfig windowed(uint32_t num_blocks, bool prefix_caching) {
    return {.num_blocks = num_blocks,
            .block_size = 16,
            .enable_prefix_caching = prefix_caching,
            .sliding_window = kWindow};
  }

  static std::string wpath_;
};
std::string KvWindowIntegration::wpath_;

// 200 tokens (5 windows) decoded one at a time in an 8-block (128-token) pool that frees behind
// the window, defragmented at 100 tokens and swapped out and in at 150, give exactly the logits
// of the same decode in a pool that keeps every block, and of one cold forward.
TEST_F(KvWindowIntegration, FreeingBehindTheWindowKeepsLogitsBitIdenticalThroughSwapAndDefrag) {
  const auto all = tokens(200, 21);
  KvArena ref_kv(model_->kv_config(16, 16, KvDtype::kF16));
  KvManager ref({.num_blocks = 16, .block_size = 16, .enable_prefix_caching = false}, &ref_kv);
  KvArena kv(model_->kv_config(8, 16, KvDtype::kF16));
  KvManager mgr(windowed(8, /*prefix_caching=*/false), &kv);
  auto swap = SwapSpace::open(
      {.path = ::testing::TempDir() + "/swap_window", .swap_bytes = 8 * kv.bytes_per_block()}, &kv);
  ASSERT_TRUE(swap.ok()) << swap.message();
  mgr.attach_swap(std::move(swap.value()));
  const SeqId s{1};
  // Blocks 0..2 stay busy until the defragmentation below, so the sequence lives in 3..7.
  mgr.add_sequence(SeqId{9}, {});
  ASSERT_EQ(mgr.allocate_slots(SeqId{9}, 48), AllocStatus::kOk);
  ref.add_sequence(s, {all.data(), 30});
  mgr.add_sequence(s, {all.data(), 30});
  std::vector<float> got_ref = compute(ref, ref_kv, s, {all.data(), 30});
  std::vector<float> got = compute(mgr, kv, s, {all.data(), 30});
  size_t max_live = 0;
  for (size_t n = 31; n <= all.size(); ++n) {
    if (n == 101) {  // blocks 0..2 free below the sequence's: the defragmenter moves it down
      mgr.free_sequence(SeqId{9});
      EXPECT_GE(mgr.defragment(8), 3u);
      mgr.check_invariants();
    }
    if (n == 151) {  // swap out, let another sequence overwrite every block, swap back in
      ASSERT_TRUE(mgr.swap_out(s));
      const auto junk = tokens(128, 22);
      mgr.add_sequence(SeqId{2}, junk);
      compute(mgr, kv, SeqId{2}, junk);
      mgr.free_sequence(SeqId{2});
      ASSERT_EQ(mgr.swap_in(s), SwapInStatus::kOk);
      mgr.check_invariants();
    }
    std::span<const int32_t> prefix(all.data(), n);
    const auto r = compute(ref, ref_kv, s, prefix);
    const auto g = compute(mgr, kv, s, prefix);
    max_live = std::max(max_live, mgr.num_live_blocks(s));
    got_ref.insert(got_ref.end(), r.begin(), r.end());
    got.insert(got.end(), g.begin(), g.end());
  }
  EXPECT_TRUE(same(got, got_ref));
  EXPECT_TRUE(same(got, cold(all)));
  EXPECT_EQ(max_live, mgr.max_window_blocks());  // 4 of the 8 blocks; the reference held 13
  EXPECT_EQ(ref.num_live_blocks(s), 13u);
  EXPECT_GT(mgr.num_window_freed_blocks(), 8u);  // more than the whole pool over the run
}

// A prompt sharing 100 tokens with a donor that already released its leading blocks (and whose
// very first block was then evicted) reuses the donor's blocks inside its window and computes
// the same logits as a cold run.
TEST_F(KvWindowIntegration, PrefixHitOnADonorThatFreedItsLeadingBlocksMatchesColdRun) {
  KvArena kv(model_->kv_config(10, 16, KvDtype::kF16));
  KvManager mgr(windowed(10, /*prefix_caching=*/true), &kv);
  const auto donor = tokens(150, 23);
  mgr.add_sequence(SeqId{1}, donor);
  for (size_t end = 16; end < donor.size(); end += 16)
    compute(mgr, kv, SeqId{1}, {donor.data(), end});
  compute(mgr, kv, SeqId{1}, donor);
  EXPECT_EQ(mgr.num_live_blocks(SeqId{1}), 4u);  // 150 computed: blocks 0..5 released
  // Evict the donor's oldest released block (block 0 of the prefix).
  const uint32_t free_now = mgr.pool().num_free_blocks();
  mgr.add_sequence(SeqId{2}, {});
  ASSERT_EQ(mgr.allocate_slots(SeqId{2}, int64_t(free_now + 1) * 16), AllocStatus::kOk);
  mgr.free_sequence(SeqId{2});
  EXPECT_EQ(mgr.prefix_counters().num_evictions, 1u);
  auto q = std::vector<int32_t>(donor.begin(), donor.begin() + 100);
  const auto suffix = tokens(30, 24);
  q.insert(q.end(), suffix.begin(), suffix.end());
  // Blocks 0..5 (96 tokens) are the shared full blocks; position 96 reads 57..95: blocks 3..5.
  EXPECT_EQ(mgr.add_sequence(SeqId{3}, q), 96);
  const auto got = compute(mgr, kv, SeqId{3}, q);
  EXPECT_TRUE(same(got, tail(cold(q), 96)));
}

// The forward accepts holes only where no new token attends: entries wholly below
// start_pos + 1 - w.
TEST_F(KvWindowIntegration, ForwardRefusesAHoleInsideTheWindow) {
  KvArena kv(model_->kv_config(8, 16, KvDtype::kF16));
  const auto toks = tokens(1, 25);
  std::vector<uint32_t> table = {index_of(kNullBlock), index_of(kNullBlock), 0, 1, 2};
  std::vector<float> out(V_);
  // Position 72 reads 33..72: blocks 2..4; blocks 0 and 1 (0..31) may be holes.
  SeqInput in{.tokens = toks, .start_pos = 72, .block_table = table};
  EXPECT_TRUE(model_->forward({&in, 1}, kv, out.data()).ok());
  // Position 71 reads 32..71: still fine. Position 70 reads 31, in block 1: refused.
  in.start_pos = 70;
  const Status st = model_->forward({&in, 1}, kv, out.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("hole inside the attention window"), std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace kvw
