// Prompt logprobs (issue 31: echo + logprobs): every prompt token after the first gets the
// log-probability the model gives it after the tokens before it, from the prefill's own logits.
// The oracle is an independent one-shot forward over the prompt, log-softmaxed here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../model/teacher_forced.h"
#include "engine/engine.h"
#include "engine_test_util.h"

namespace kvw {
namespace {

using testutil::config_with_blocks;
using testutil::make_engine;
using testutil::prompt;

struct PromptResult {
  std::vector<ChannelEvent> events;  // kPromptLogprobs, in order
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
  std::string error;
  bool prompt_after_token = false;
};

PromptResult run(Engine& e, GenerationRequest r) {
  auto ch = e.submit(std::move(r));
  EXPECT_TRUE(ch.ok()) << ch.message();
  PromptResult res;
  if (!ch.ok()) return res;
  while (true) {
    ChannelEvent ev = (*ch)->next();
    if (ev.kind == ChannelEvent::Kind::kFinished) {
      res.reason = ev.reason;
      res.error = ev.error;
      return res;
    }
    if (ev.kind == ChannelEvent::Kind::kToken) {
      res.tokens.push_back(ev.token_id);
    } else {
      res.prompt_after_token = res.prompt_after_token || !res.tokens.empty();
      res.events.push_back(std::move(ev));
    }
  }
}

// Checks the events cover prompt tokens 1..n-1 once, in order, each chunk at most `max_rows`,
// with the oracle's logprob for the token and the oracle's top k (best first).
void expect_matches_oracle(const PromptResult& res, const std::vector<int32_t>& p, int32_t k,
                           const std::vector<std::vector<double>>& oracle, int64_t max_rows) {
  int64_t next = 1;
  for (const ChannelEvent& ev : res.events) {
    ASSERT_EQ(ev.prompt_pos, next) << "chunks must be contiguous";
    ASSERT_LE((int64_t)ev.prompt.size(), max_rows);
    ASSERT_EQ(ev.prompt_top_k, k);
    ASSERT_EQ(ev.top_logprobs.size(), ev.prompt.size() * (size_t)k);
    for (size_t i = 0; i < ev.prompt.size(); ++i) {
      const int64_t pos = ev.prompt_pos + (int64_t)i;
      const std::vector<double>& lp = oracle[(size_t)pos - 1];  // row pos-1 predicts token pos
      EXPECT_EQ(ev.prompt[i].token_id, p[(size_t)pos]);
      EXPECT_NEAR(ev.prompt[i].logprob, lp[(size_t)p[(size_t)pos]], 1e-4) << "position " << pos;
      std::vector<int32_t> order(lp.size());
      for (size_t t = 0; t < order.size(); ++t) order[t] = (int32_t)t;
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return lp[(size_t)a] > lp[(size_t)b]; });
      int32_t rank = 1;
      for (double v : lp) rank += v > lp[(size_t)p[(size_t)pos]] ? 1 : 0;
      EXPECT_EQ(ev.prompt_ranks[i], rank) << "position " << pos;
      for (int32_t j = 0; j < k; ++j) {
        const TokenLogprob& got = ev.top_logprobs[i * (size_t)k + (size_t)j];
        EXPECT_NEAR(got.logprob, lp[(size_t)order[(size_t)j]], 1e-4) << "position " << pos;
      }
    }
    next += (int64_t)ev.prompt.size();
  }
  EXPECT_EQ(next, (int64_t)p.size()) << "every prompt token after the first has a logprob";
}

TEST(EnginePromptLogprobs, MatchTeacherForcedForwardChunkedAndAfterAPrefixCacheHit) {
  const std::string model = testutil::tiny_model_path();
  EngineConfig cfg = config_with_blocks(model, 64);
  cfg.enable_prefix_caching = true;
  cfg.sched.max_num_batched_tokens = 32;
  cfg.sched.max_prompt_logit_rows = 8;  // a 70-token prompt: 9 steps of prompt rows
  cfg.memory_budget_bytes += uint64_t{8} << 20;
  auto e = make_engine(cfg);
  ASSERT_NE(e, nullptr);
  const int32_t V = e->model().hparams().n_vocab;
  const std::vector<int32_t> p = prompt(31, 70, V);
  const auto oracle = testing::teacher_forced_logprobs(model, p, cfg.block_size, cfg.kv_dtype);

  GenerationRequest plain;  // caches the prompt's full blocks
  plain.prompt = p;
  plain.max_tokens = 2;
  plain.ignore_eos = true;
  PromptResult warm = run(*e, plain);
  ASSERT_EQ(warm.reason, FinishReason::kLength) << warm.error;
  EXPECT_TRUE(warm.events.empty()) << "no prompt logprobs unless asked";

  GenerationRequest r = plain;
  r.prompt_logprobs = 3;
  PromptResult res = run(*e, r);
  ASSERT_EQ(res.reason, FinishReason::kLength) << res.error;
  EXPECT_FALSE(res.prompt_after_token) << "the prompt's logprobs come before the first token";
  EXPECT_EQ(res.tokens, warm.tokens) << "the output does not change";
  expect_matches_oracle(res, p, 3, oracle, 8);
  EXPECT_GE(res.events.size(), 9u) << "the prompt is chunked by max_prompt_logit_rows";

  // The cache held the prompt's blocks, yet the logprob request computed every position.
  EXPECT_EQ(e->stats().prefix.num_hit_blocks, 0u);
  PromptResult again = run(*e, plain);  // a plain request does take the hit
  EXPECT_EQ(again.tokens, warm.tokens);
  EXPECT_GT(e->stats().prefix.num_hit_blocks, 0u);
}

TEST(EnginePromptLogprobs, ZeroTopLogprobsAndOneTokenPrompt) {
  const std::string model = testutil::tiny_model_path();
  EngineConfig cfg = config_with_blocks(model, 32);
  auto e = make_engine(cfg);
  ASSERT_NE(e, nullptr);
  const int32_t V = e->model().hparams().n_vocab;
  const std::vector<int32_t> p = prompt(32, 20, V);
  const auto oracle = testing::teacher_forced_logprobs(model, p, cfg.block_size, cfg.kv_dtype);
  GenerationRequest r;
  r.prompt = p;
  r.max_tokens = 1;
  r.prompt_logprobs = 0;
  PromptResult res = run(*e, r);
  ASSERT_NE(res.reason, FinishReason::kError) << res.error;
  expect_matches_oracle(res, p, 0, oracle, cfg.sched.max_prompt_logit_rows);

  r.prompt = {p[0]};  // nothing before the only token: no event
  res = run(*e, r);
  ASSERT_NE(res.reason, FinishReason::kError) << res.error;
  EXPECT_TRUE(res.events.empty());

  r.prompt_logprobs = kMaxLogprobs + 1;
  EXPECT_FALSE(e->submit(r).ok());
}

}  // namespace
}  // namespace kvw
