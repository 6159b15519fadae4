// Issue 34, waits that end: a request that has emitted no token within its max_queue_wait_s is
// removed from the engine (blocks freed) and ends with kError / kQueueTimeout; one that has
// produced keeps running. Also the figures the predicted-wait check reads: computed tokens, the
// token rate and the waiting requests' work in tokens.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "model/model_maker.h"

namespace kvw {
namespace {

using testutil::config_with_blocks;
using testutil::make_engine;
using testutil::prompt;

GenerationRequest request(std::vector<int32_t> p, int32_t max_tokens, double max_wait_s) {
  GenerationRequest r;
  r.prompt = std::move(p);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.max_queue_wait_s = max_wait_s;
  return r;
}

// Waits (bounded) until the engine's published stats satisfy `pred`.
template <typename Pred>
EngineStats wait_stats(Engine& e, Pred pred) {
  EngineStats s = e.stats();
  for (int i = 0; i < 2000 && !pred(s); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    s = e.stats();
  }
  return s;
}

EngineConfig one_slot_config() {
  EngineConfig cfg = config_with_blocks(testutil::tiny_model_path(), 64);
  cfg.sched.max_num_seqs = 1;  // one running request: the next one queues behind it
  return cfg;
}

// A model slow enough that 4000 tokens take seconds (the tiny one decodes ~30k tokens/s).
EngineConfig slow_one_slot_config() {
  const std::string path = ::testing::TempDir() + "/engine_deadline_slow.gguf";
  MakeModelSpec spec;
  spec.n_embd = 128;
  spec.n_layer = 4;
  spec.n_ff = 512;
  spec.n_ctx = 4096;
  spec.seed = 7;
  const Status st = make_model(spec, path);
  EXPECT_TRUE(st.ok()) << st.message();
  EngineConfig cfg = config_with_blocks(path, 300);
  cfg.sched.max_model_len = 4096;
  cfg.sched.max_num_seqs = 1;
  return cfg;
}

TEST(EngineDeadline, QueuedRequestWithNoTokenByItsDeadlineEndsWithQueueTimeout) {
  auto e = make_engine(slow_one_slot_config());
  ASSERT_NE(e, nullptr);
  const int32_t n_vocab = e->model().hparams().n_vocab;
  // A has a deadline too, but it produces a token long before: it must not be cut by it.
  const auto start = std::chrono::steady_clock::now();
  auto a = e->submit(request(prompt(1, 20, n_vocab), 4000, /*max_wait_s=*/0.2));
  ASSERT_TRUE(a.ok()) << a.message();
  ASSERT_EQ((*a)->next().kind, ChannelEvent::Kind::kToken);
  const auto t0 = std::chrono::steady_clock::now();
  auto b = e->submit(request(prompt(2, 20, n_vocab), 8, /*max_wait_s=*/0.05));
  ASSERT_TRUE(b.ok()) << b.message();
  const TokenChannel::Collected cb = (*b)->collect();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE((*a)->finished()) << "A ended before B's deadline: the test proves nothing";
  EXPECT_EQ(cb.reason, FinishReason::kError);
  EXPECT_EQ(cb.error_kind, ErrorKind::kQueueTimeout) << cb.error;
  EXPECT_TRUE(cb.tokens.empty());
  EXPECT_NE(cb.error.find("--max-queue-wait"), std::string::npos) << cb.error;
  EXPECT_GE(waited, 0.05);
  EXPECT_LT(waited, 2.0);
  // B is gone from the engine (its blocks with it) while A still runs.
  EngineStats s = e->stats();
  EXPECT_EQ(s.num_queue_timeouts, 1u);
  EXPECT_EQ(s.num_waiting, 0u);
  EXPECT_EQ(s.num_kv_sequences, 1u);
  // Past A's own limit, A (which produced) still runs; then the client cancels it.
  std::this_thread::sleep_until(start + std::chrono::milliseconds(300));
  ASSERT_FALSE((*a)->finished()) << "A ended within 0.3 s: the test proves nothing";
  ASSERT_TRUE(e->cancel((*a)->request_id()));
  const TokenChannel::Collected ca = (*a)->collect();
  EXPECT_EQ(ca.reason, FinishReason::kCancelled);
  EXPECT_GT(ca.tokens.size(), 0u);
  EXPECT_EQ(e->stats().num_queue_timeouts, 1u);
  e->shutdown();
  const KvManager& kv = e->kv_manager();
  kv.check_invariants();
  EXPECT_EQ(kv.num_sequences(), 0u);
  EXPECT_EQ(kv.num_allocatable_blocks(), kv.num_blocks());
}

// The limit is on waiting to start: a request whose prefill is running when its limit passes (a
// long prompt on a slow machine) goes on to its tokens. Here A's prompt is prefilled in chunks
// of 16 tokens, one chunk per step, far longer than its 0.02 s limit.
TEST(EngineDeadline, PrefillInProgressIsNotCutByTheQueueLimit) {
  EngineConfig cfg = slow_one_slot_config();
  cfg.sched.max_num_batched_tokens = 16;
  auto e = make_engine(cfg);
  ASSERT_NE(e, nullptr);
  const int32_t n_vocab = e->model().hparams().n_vocab;
  auto a = e->submit(request(prompt(5, 400, n_vocab), 4, /*max_wait_s=*/0.02));
  ASSERT_TRUE(a.ok()) << a.message();
  const TokenChannel::Collected ca = (*a)->collect();
  EXPECT_EQ(ca.reason, FinishReason::kLength) << ca.error;
  EXPECT_EQ(ca.tokens.size(), 4u);
  const EngineStats s = e->stats();
  EXPECT_EQ(s.num_queue_timeouts, 0u);
  EXPECT_GE(s.num_computed_tokens, 400u);
  EXPECT_EQ(s.num_kv_sequences, 0u);
}

TEST(EngineDeadline, ZeroMeansNoLimit) {
  auto e = make_engine(one_slot_config());
  ASSERT_NE(e, nullptr);
  const int32_t n_vocab = e->model().hparams().n_vocab;
  auto a = e->submit(request(prompt(1, 20, n_vocab), 200, 0));
  ASSERT_TRUE(a.ok());
  ASSERT_EQ((*a)->next().kind, ChannelEvent::Kind::kToken);
  auto b = e->submit(request(prompt(2, 20, n_vocab), 8, 0));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->collect().reason, FinishReason::kLength);
  EXPECT_EQ(e->stats().num_queue_timeouts, 0u);
  EXPECT_FALSE(e->submit(request(prompt(3, 4, n_vocab), 1, -1)).ok());
}

TEST(EngineDeadline, StatsReportComputedTokensRateAndWaitingWork) {
  auto e = make_engine(one_slot_config());
  ASSERT_NE(e, nullptr);
  const int32_t n_vocab = e->model().hparams().n_vocab;
  auto one = e->submit(request(prompt(1, 20, n_vocab), 12, 0));
  ASSERT_TRUE(one.ok());
  ASSERT_EQ((*one)->collect().tokens.size(), 12u);
  EngineStats s = e->stats();
  EXPECT_EQ(s.num_computed_tokens, 20u + 11u);  // the last sampled token is never computed
  EXPECT_GT(s.token_rate, 0.0);
  // While A runs, B (30 prompt tokens, up to 50 more) waits: 80 tokens of work.
  auto a = e->submit(request(prompt(2, 20, n_vocab), 480, 0));
  ASSERT_TRUE(a.ok());
  ASSERT_EQ((*a)->next().kind, ChannelEvent::Kind::kToken);
  auto b = e->submit(request(prompt(3, 30, n_vocab), 50, 0));
  ASSERT_TRUE(b.ok());
  s = wait_stats(*e, [](const EngineStats& x) { return x.num_waiting == 1; });
  if (!(*a)->finished()) {
    EXPECT_EQ(s.num_waiting, 1u);
    EXPECT_EQ(s.num_waiting_work_tokens, 30 + 50);
  }
  e->cancel((*a)->request_id());
  EXPECT_EQ((*b)->collect().tokens.size(), 50u);
  s = wait_stats(*e, [](const EngineStats& x) { return x.num_waiting == 0; });
  EXPECT_EQ(s.num_waiting_work_tokens, 0);
}

}  // namespace
}  // namespace kvw
