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

}  // namespace
}  // namespace kvw
