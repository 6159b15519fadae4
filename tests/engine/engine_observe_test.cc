// What the engine reports beyond tokens: log-probabilities, per-step observations and the KV
// block map snapshot (the inputs of /metrics, /debug/trace and /debug/kv).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <mutex>
#include <set>

#include "engine/engine.h"
#include "engine/seq_sampler.h"
#include "engine_test_util.h"

namespace kvw {
namespace {

using testutil::config_with_blocks;
using testutil::make_engine;
using testutil::prompt;

TEST(ComputeLogprobs, MatchesLogSoftmaxAndOrdersTopByProbability) {
  const std::vector<float> l = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  double z = 0.0;
  for (float x : l) z += std::exp(double(x));
  float lp = 0.0f;
  std::vector<TokenLogprob> top;
  compute_logprobs(l.data(), 5, 2, 3, &lp, &top);
  EXPECT_NEAR(lp, 2.0 - std::log(z), 1e-5);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].token_id, 1);  // ties: lower id first
  EXPECT_EQ(top[1].token_id, 3);
  EXPECT_EQ(top[2].token_id, 2);
  EXPECT_NEAR(top[0].logprob, 3.0 - std::log(z), 1e-5);
  compute_logprobs(l.data(), 5, 4, 0, &lp, &top);
  EXPECT_TRUE(top.empty());
}

TEST(EngineObserve, GreedyTokensCarryTheirLogprobAsTheBestAlternative) {
  auto e = make_engine(config_with_blocks(testutil::tiny_model_path(), 64));
  ASSERT_NE(e, nullptr);
  GenerationRequest r;
  r.prompt = prompt(7, 12, e->model().hparams().n_vocab);
  r.max_tokens = 6;
  r.ignore_eos = true;
  r.sampling.logprobs = 4;
  auto ch = e->submit(r);
  ASSERT_TRUE(ch.ok()) << ch.message();
  int n = 0;
  for (ChannelEvent ev = (*ch)->next(); ev.kind == ChannelEvent::Kind::kToken;
       ev = (*ch)->next(), ++n) {
    ASSERT_EQ(ev.top_logprobs.size(), 4u);
    EXPECT_EQ(ev.top_logprobs[0].token_id, ev.token_id);  // greedy picks the most likely
    EXPECT_FLOAT_EQ(ev.top_logprobs[0].logprob, ev.logprob);
    EXPECT_LE(ev.logprob, 0.0f);
    double mass = 0.0;
    for (size_t i = 0; i < ev.top_logprobs.size(); ++i) {
      mass += std::exp(ev.top_logprobs[i].logprob);
      if (i > 0) {
        EXPECT_LE(ev.top_logprobs[i].logprob, ev.top_logprobs[i - 1].logprob);
      }
    }
    EXPECT_LE(mass, 1.0 + 1e-5);
  }
  EXPECT_EQ(n, 6);

  GenerationRequest bad = r;
  bad.sampling.logprobs = 21;
  EXPECT_FALSE(e->submit(bad).ok());
  bad.sampling.logprobs = -1;
  bad.sampling.presence_penalty = 3.0f;
  EXPECT_FALSE(e->submit(bad).ok());
}

TEST(EngineObserve, StepObserverSeesEveryStepAndItsBlocks) {
  std::mutex mu;
  std::vector<StepObservation> seen;
  EngineConfig cfg = config_with_blocks(testutil::tiny_model_path(), 64);
  cfg.step_observer = [&](const StepObservation& o) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(o);
  };
  auto e = make_engine(cfg);
  ASSERT_NE(e, nullptr);
  GenerationRequest r;
  r.prompt = prompt(9, 40, e->model().hparams().n_vocab);
  r.max_tokens = 5;
  r.ignore_eos = true;
  auto ch = e->submit(r);
  ASSERT_TRUE(ch.ok());
  auto c = (*ch)->collect();
  ASSERT_EQ(c.tokens.size(), 5u);
  e->shutdown();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(seen.size(), e->stats().num_steps);
  uint32_t allocated = 0, freed = 0, tokens = 0;
  bool finished_seen = false;
  for (size_t i = 0; i < seen.size(); ++i) {
    if (i > 0) {
      EXPECT_GT(seen[i].step, seen[i - 1].step);
      EXPECT_GE(seen[i].start_ns, seen[i - 1].start_ns + seen[i - 1].duration_ns);
    }
    allocated += seen[i].blocks_allocated;
    freed += seen[i].blocks_freed;
    tokens += seen[i].num_tokens;
    for (uint64_t id : seen[i].finished) finished_seen |= id == (*ch)->request_id();
  }
  EXPECT_EQ(tokens, 40u + 4u);  // the prompt, then one token per decode (the 5th is not fed)
  EXPECT_GE(allocated, 3u);     // 44 tokens in 16-token blocks
  EXPECT_EQ(allocated, freed);  // everything back at the end
  EXPECT_TRUE(finished_seen);
}

TEST(EngineObserve, KvEventSinkMirrorsThePrefixCache) {
  std::mutex mu;
  std::set<uint64_t> mirror;  // a subscriber's view, rebuilt from the events
  size_t num_stored = 0, num_removed = 0;
  EngineConfig cfg = config_with_blocks(testutil::tiny_model_path(), 16);
  cfg.kv_event_sink = [&](std::vector<KvCacheEvent>&& events) {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_FALSE(events.empty());
    for (const KvCacheEvent& ev : events) {
      if (ev.kind == KvCacheEvent::Kind::kAllBlocksCleared) mirror.clear();
      for (uint64_t h : ev.block_hashes) {
        if (ev.kind == KvCacheEvent::Kind::kBlockStored) {
          EXPECT_TRUE(mirror.insert(h).second);
          ++num_stored;
        } else {
          EXPECT_EQ(mirror.erase(h), 1u);
          ++num_removed;
        }
      }
    }
  };
  auto e = make_engine(cfg);
  ASSERT_NE(e, nullptr);
  const int32_t n_vocab = e->model().hparams().n_vocab;
  const std::vector<int32_t> shared = prompt(3, 48, n_vocab);
  for (uint64_t i = 0; i < 6; ++i) {  // a shared prefix (hits) in a 16-block pool (evictions)
    GenerationRequest r;
    std::vector<int32_t> p = shared;
    const std::vector<int32_t> tail = prompt(100 + i, 60, n_vocab);
    p.insert(p.end(), tail.begin(), tail.end());
    r.prompt = std::move(p);
    r.max_tokens = 20;
    r.ignore_eos = true;
    auto ch = e->submit(r);
    ASSERT_TRUE(ch.ok()) << ch.message();
    ASSERT_EQ((*ch)->collect().tokens.size(), 20u);
  }
  // The finished request's last step handed its events over before its channel finished.
  auto snap = e->kv_snapshot(std::chrono::milliseconds(2000));
  ASSERT_NE(snap, nullptr);
  std::set<uint64_t> cached;
  for (const BlockRecord& b : snap->blocks)
    if (b.block_hash) cached.insert(*b.block_hash);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(mirror, cached);
  EXPECT_GT(num_removed, 0u);
  EXPECT_GT(e->stats().prefix.num_hit_blocks, 0u);
  EXPECT_EQ(num_stored - num_removed, cached.size());
}

TEST(EngineObserve, KvSnapshotShowsTheRunningRequestsBlocks) {
  auto e = make_engine(config_with_blocks(testutil::tiny_model_path(), 64));
  ASSERT_NE(e, nullptr);
  GenerationRequest r;
  r.prompt = prompt(11, 50, e->model().hparams().n_vocab);
  // Long enough that the request still runs when the snapshot is taken even if this thread
  // waits for a core meanwhile (200 tokens once finished first under a loaded ctest -j2).
  r.max_tokens = 450;
  r.ignore_eos = true;
  auto ch = e->submit(r);
  ASSERT_TRUE(ch.ok());
  ASSERT_EQ((*ch)->next().kind, ChannelEvent::Kind::kToken);  // running now
  auto snap = e->kv_snapshot(std::chrono::seconds(5));
  ASSERT_NE(snap, nullptr);
  ASSERT_EQ(snap->blocks.size(), 64u);
  uint32_t owned = 0;
  for (const BlockRecord& b : snap->blocks) {
    if (b.owner.has_value()) {
      EXPECT_EQ(index_of(*b.owner), (*ch)->request_id());
      ++owned;
    }
  }
  EXPECT_GE(owned, 4u);  // >= 51 tokens in 16-token blocks
  EXPECT_EQ(snap->stats.num_used_blocks, owned);
  e->cancel((*ch)->request_id());
  (*ch)->collect();
  // A later snapshot is newer and shows the blocks released.
  auto later = e->kv_snapshot(std::chrono::seconds(5));
  ASSERT_NE(later, nullptr);
  EXPECT_EQ(later->stats.num_used_blocks, 0u);
  EXPECT_GE(later->step, snap->step);
}

}  // namespace
}  // namespace kvw
