// Randomised property test for KvManager: thousands of random add / reserve / compute / decode /
// fork / free / defragment / step operations (with evictions from pool pressure) against a naive
// model that only tracks token lists and counts. After every operation: check_invariants()
// (ref counts balance, no block owned twice, queue and cache consistent), the counts match the
// model, and every sequence reads back exactly its own computed tokens through its block table
// (FakeStorage keeps a token id per slot), so prefix hits, copy-on-write and defragmentation
// moves are checked for content, not only bookkeeping. With a sliding window, a sequence reads
// only the positions its next token attends to (the blocks behind them are released).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "kv/kv_manager.h"
#include "kv_test_util.h"

namespace kvw {
namespace {

using test::FakeStorage;

struct ModelSeq {
  std::vector<int32_t> tokens;  // every token known so far (size >= num_tokens)
  int64_t num_tokens = 0;
  int64_t num_computed = 0;
};

class PropertyRun {
 public:
  PropertyRun(uint32_t seed, uint32_t num_blocks, uint32_t swap_slots, int32_t window = 0)
      : rng_(seed),
        window_(window),
        storage_(num_blocks, 16),
        kv_(KvManagerConfig{.num_blocks = num_blocks, .sliding_window = window}, &storage_) {
    if (swap_slots > 0) {
      const uint64_t bpb = storage_.bytes_per_block();
      auto swap = SwapSpace::open_with_file(
          SwapConfig{.path = "mem", .swap_bytes = swap_slots * bpb, .max_inflight_bytes = 3 * bpb},
          &storage_, std::make_unique<test::MemBlockFile>(swap_slots * bpb));
      EXPECT_TRUE(swap.ok()) << swap.message();
      kv_.attach_swap(std::move(swap).value());
    }
    // Three shared "system prompts" so that prefix hits are frequent.
    for (int k = 0; k < 3; ++k) bases_.push_back(random_tokens(16 * (k + 1) + k));
  }

  void run(int num_ops) {
    for (int i = 0; i < num_ops; ++i) {
      const int op = pick(0, 99);
      if (op < 20)
        add();
      else if (op < 35)
        reserve();
      else if (op < 50)
        compute();
      else if (op < 65)
        decode();
      else if (op < 72)
        fork();
      else if (op < 87)
        free_one();
      else if (op < 91)
        kv_.defragment(static_cast<uint32_t>(pick(0, 4)));
      else if (op < 94)
        swap_out();
      else if (op < 97)
        swap_in();
      else {
        kv_.advance_step();
        kv_.poll_swap();
      }
      verify();
    }
    while (!swapped_.empty()) {
      kv_.free_sequence(SeqId{swapped_.begin()->first});
      swapped_.erase(swapped_.begin());
    }
    while (!model_.empty()) {
      kv_.free_sequence(SeqId{model_.begin()->first});
      model_.erase(model_.begin());
      verify();
    }
    const KvLayoutStats s = kv_.stats();
    EXPECT_EQ(s.num_used_blocks, 0u);  // nothing leaked
    EXPECT_EQ(s.num_free_blocks + s.num_cached_blocks, s.num_blocks);
    EXPECT_EQ(kv_.num_allocatable_blocks(), kv_.num_blocks());
  }

  uint64_t num_prefix_hit_tokens() const { return kv_.prefix_counters().num_hit_tokens; }
  uint64_t num_evictions() const { return kv_.prefix_counters().num_evictions; }
  uint64_t num_alloc_failures() const { return num_alloc_failures_; }
  uint64_t num_swap_ins() const { return num_swap_ins_; }
  uint64_t num_window_freed() const { return kv_.num_window_freed_blocks(); }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  std::vector<int32_t> random_tokens(int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = pick(0, 3);  // tiny vocabulary: accidental shared blocks too
    return t;
  }
  // A random live sequence, or nullopt.
  std::optional<uint64_t> any_seq() {
    if (model_.empty()) return std::nullopt;
    auto it = model_.begin();
    std::advance(it, pick(0, static_cast<int>(model_.size()) - 1));
    return it->first;
  }

  void add() {
    std::vector<int32_t> prompt = bases_[static_cast<size_t>(pick(0, 2))];
    const std::vector<int32_t> tail = random_tokens(pick(0, 40));
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    const uint64_t id = next_id_++;
    const bool predicted = kv_.can_admit(prompt, static_cast<int64_t>(prompt.size()));
    const int64_t cached = kv_.add_sequence(SeqId{id}, prompt);
    ASSERT_EQ(cached % 16, 0);
    ASSERT_LT(cached, static_cast<int64_t>(prompt.size()));
    // A prefix hit must hold exactly these tokens (those the window still reads).
    const int64_t from = first_read(cached);
    ASSERT_EQ(storage_.read_range(kv_.block_table(SeqId{id}), from, cached),
              std::vector<int32_t>(prompt.begin() + from, prompt.begin() + cached));
    ModelSeq m{prompt, cached, cached};
    const int64_t rest = static_cast<int64_t>(prompt.size()) - cached;
    const AllocStatus st = kv_.allocate_slots(SeqId{id}, rest);
    ASSERT_EQ(predicted, st == AllocStatus::kOk) << "can_admit disagrees with allocation";
    if (st == AllocStatus::kOk)
      m.num_tokens += rest;
    else
      ++num_alloc_failures_;
    model_.emplace(id, std::move(m));
  }

  void reserve() {
    const std::optional<uint64_t> id = any_seq();
    if (!id) return;
    ModelSeq& m = model_[*id];
    const int64_t k = pick(0, 20);
    while (static_cast<int64_t>(m.tokens.size()) < m.num_tokens + k) m.tokens.push_back(pick(0, 3));
    const bool predicted = kv_.can_allocate(SeqId{*id}, k);
    const AllocStatus st = kv_.allocate_slots(SeqId{*id}, k);
    ASSERT_EQ(predicted, st == AllocStatus::kOk);
    if (st == AllocStatus::kOk)
      m.num_tokens += k;
    else
      ++num_alloc_failures_;
  }

  void compute_seq(uint64_t id) {
    ModelSeq& m = model_[id];
    storage_.write_tokens(kv_.block_table(SeqId{id}), m.tokens, m.num_computed, m.num_tokens);
    kv_.commit_computed(SeqId{id}, std::span(m.tokens).first(static_cast<size_t>(m.num_tokens)),
                        m.num_tokens);
    m.num_computed = m.num_tokens;
  }

  void compute() {
    if (const std::optional<uint64_t> id = any_seq()) compute_seq(*id);
  }

  void decode() {
    const std::optional<uint64_t> id = any_seq();
    if (!id) return;
    ModelSeq& m = model_[*id];
    m.tokens.resize(static_cast<size_t>(m.num_tokens));
    m.tokens.push_back(pick(0, 3));
    if (kv_.allocate_slots(SeqId{*id}, 1) != AllocStatus::kOk) {
      m.tokens.pop_back();
      ++num_alloc_failures_;
      return;
    }
    ++m.num_tokens;
    compute_seq(*id);
  }

  void fork() {
    const std::optional<uint64_t> id = any_seq();
    if (!id) return;
    const uint64_t child = next_id_++;
    if (kv_.fork(SeqId{*id}, SeqId{child}) != AllocStatus::kOk) {
      EXPECT_FALSE(kv_.has_sequence(SeqId{child}));
      ++num_alloc_failures_;
      return;
    }
    ModelSeq m = model_[*id];
    m.tokens.resize(static_cast<size_t>(m.num_tokens));
    model_.emplace(child, std::move(m));
  }

  void free_one() {
    const std::optional<uint64_t> id = any_seq();
    if (!id) return;
    kv_.free_sequence(SeqId{*id});
    model_.erase(*id);
  }

  void swap_out() {
    const std::optional<uint64_t> id = any_seq();
    if (!id || !kv_.has_swap()) return;
    if (!kv_.swap_out(SeqId{*id})) return;
    ModelSeq m = model_[*id];
    m.num_tokens = m.num_computed;  // uncomputed reservations are dropped
    m.tokens.resize(static_cast<size_t>(m.num_tokens));
    swapped_.emplace(*id, std::move(m));
    model_.erase(*id);
  }

  void swap_in() {
    if (swapped_.empty()) return;
    auto it = swapped_.begin();
    std::advance(it, pick(0, static_cast<int>(swapped_.size()) - 1));
    const SwapInStatus st = kv_.swap_in(SeqId{it->first});
    ASSERT_NE(st, SwapInStatus::kLost);  // no disk errors injected here
    if (st != SwapInStatus::kOk) return;
    ++num_swap_ins_;
    model_.emplace(it->first, std::move(it->second));
    swapped_.erase(it);
  }

  // First position the next token attends to.
  int64_t first_read(int64_t num_computed) const {
    return window_ > 0 ? std::max<int64_t>(0, num_computed + 1 - window_) : 0;
  }

  void verify() {
    kv_.check_invariants();
    ASSERT_EQ(kv_.num_sequences(), model_.size());
    for (const auto& [id, m] : swapped_) ASSERT_TRUE(kv_.is_swapped(SeqId{id}));
    for (const auto& [id, m] : model_) {
      ASSERT_EQ(kv_.num_tokens(SeqId{id}), m.num_tokens) << "seq " << id;
      ASSERT_EQ(kv_.num_computed_tokens(SeqId{id}), m.num_computed) << "seq " << id;
      const int64_t from = first_read(m.num_computed);
      ASSERT_EQ(storage_.read_range(kv_.block_table(SeqId{id}), from, m.num_computed),
                std::vector<int32_t>(m.tokens.begin() + from, m.tokens.begin() + m.num_computed))
          << "seq " << id << " reads wrong KV";
    }
  }

  std::mt19937 rng_;
  int32_t window_;
  FakeStorage storage_;
  KvManager kv_;
  std::vector<std::vector<int32_t>> bases_;
  std::map<uint64_t, ModelSeq> model_;
  std::map<uint64_t, ModelSeq> swapped_;
  uint64_t num_swap_ins_ = 0;
  uint64_t next_id_ = 1;
  uint64_t num_alloc_failures_ = 0;
};

TEST(KvManagerProperty, RandomOperationsKeepInvariantsContentAndLeakNothing) {
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    for (uint32_t num_blocks : {11u, 40u}) {
      SCOPED_TRACE(testing::Message() << "seed " << seed << " blocks " << num_blocks);
      PropertyRun run(seed, num_blocks, 0);
      run.run(1200);
      if (HasFatalFailure()) return;
      // The run must actually exercise the interesting paths.
      EXPECT_GT(run.num_prefix_hit_tokens(), 0u);
      EXPECT_GT(run.num_evictions(), 0u);
      EXPECT_GT(run.num_alloc_failures(), 0u);
    }
  }
}

TEST(KvManagerProperty, RandomOperationsWithSwapTierKeepContentAndLeakNothing) {
  for (uint32_t seed : {5u, 6u, 7u}) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    PropertyRun run(seed, 24, 12);
    run.run(1200);
    if (HasFatalFailure()) return;
    EXPECT_GT(run.num_swap_ins(), 0u);
    EXPECT_GT(run.num_evictions(), 0u);
  }
}

TEST(KvManagerProperty, RandomOperationsUnderASlidingWindowKeepContentAndLeakNothing) {
  for (uint32_t seed : {8u, 9u, 10u}) {
    for (int32_t window : {24, 40}) {
      SCOPED_TRACE(testing::Message() << "seed " << seed << " window " << window);
      PropertyRun run(seed, 24, 12, window);
      run.run(1200);
      if (HasFatalFailure()) return;
      EXPECT_GT(run.num_window_freed(), 0u);
      EXPECT_GT(run.num_prefix_hit_tokens(), 0u);
      EXPECT_GT(run.num_swap_ins(), 0u);
    }
  }
}

}  // namespace
}  // namespace kvw
