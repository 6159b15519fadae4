#include "model/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <span>
#include <vector>

namespace kvw {
namespace {

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  Sampler s({.temperature = 0.0f}, 5);
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 2.0f, 0.5f};
  EXPECT_EQ(s.sample(l.data(), {}), 1);
}

TEST(Sampler, TopKOneIsGreedyAtAnyTemperature) {
  Sampler s({.temperature = 5.0f, .top_k = 1, .seed = 3}, 4);
  std::vector<float> l = {0.1f, 0.2f, 0.9f, 0.3f};
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(l.data(), {}), 2);
}

TEST(Sampler, SameSeedSameDraws) {
  std::vector<float> l = {1.0f, 1.1f, 0.9f, 1.05f, 0.2f};
  SamplingParams p{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 42};
  Sampler a(p, 5), b(p, 5);
  std::vector<int> da, db;
  for (int i = 0; i < 100; ++i) {
    da.push_back(a.sample(l.data(), {}));
    db.push_back(b.sample(l.data(), {}));
  }
  EXPECT_EQ(da, db);
  p.seed = 43;
  Sampler c(p, 5);
  std::vector<int> dc;
  for (int i = 0; i < 100; ++i) dc.push_back(c.sample(l.data(), {}));
  EXPECT_NE(da, dc);
}

TEST(Sampler, FrequenciesFollowSoftmax) {
  // logits ln(1), ln(2), ln(7): probabilities 0.1, 0.2, 0.7
  std::vector<float> l = {0.0f, std::log(2.0f), std::log(7.0f)};
  Sampler s({.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 7}, 3);
  std::map<int, int> n;
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) ++n[s.sample(l.data(), {})];
  EXPECT_NEAR(n[0] / (double)draws, 0.1, 0.015);
  EXPECT_NEAR(n[1] / (double)draws, 0.2, 0.015);
  EXPECT_NEAR(n[2] / (double)draws, 0.7, 0.015);
}

TEST(Sampler, TopPAndMinPCutTheTail) {
  std::vector<float> l = {0.0f, std::log(2.0f), std::log(7.0f)};
  // top_p 0.7: only the 0.7 token survives
  Sampler tp({.temperature = 1.0f, .top_k = 0, .top_p = 0.7f, .min_p = 0.0f, .seed = 1}, 3);
  // min_p 0.2: keeps tokens with p >= 0.14, drops the 0.1 token
  Sampler mp({.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.2f, .seed = 1}, 3);
  for (int i = 0; i < 500; ++i) {
    EXPECT_EQ(tp.sample(l.data(), {}), 2);
    EXPECT_NE(mp.sample(l.data(), {}), 0);
  }
}

TEST(Sampler, RepeatPenaltyDemotesRecentTokens) {
  std::vector<float> l = {2.0f, 1.5f, 0.1f};
  Sampler s({.temperature = 0.0f, .repeat_penalty = 2.0f, .repeat_last_n = 4}, 3);
  std::vector<int32_t> history = {0, 0, 0};
  EXPECT_EQ(s.sample(l.data(), {.history = history}), 1);  // 2.0 / 2 = 1.0 < 1.5
  std::vector<int32_t> old = {0, 2, 2, 2, 2};              // token 0 is outside the last 4
  EXPECT_EQ(s.sample(l.data(), {.history = old}), 0);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesCountGeneratedTokensOnly) {
  std::vector<float> l = {2.0f, 1.5f, 0.1f};
  std::vector<int32_t> history = {0, 0, 1, 0, 0};  // prompt {0, 0}, generated {1, 0, 0}
  std::span<const int32_t> generated = std::span<const int32_t>(history).last(3);
  // Presence 0.6: token 0 -> 1.4 < 1.5 - 0.6? no: token 1 is generated too -> 0.9; 0 wins.
  Sampler presence({.temperature = 0.0f, .presence_penalty = 0.6f}, 3);
  EXPECT_EQ(presence.sample(l.data(), {.history = history, .generated = generated}), 0);
  // Frequency 0.4: token 0 (twice) -> 1.2, token 1 (once) -> 1.1: still 0; at 0.6: 0.8 < 0.9.
  Sampler freq4({.temperature = 0.0f, .frequency_penalty = 0.4f}, 3);
  EXPECT_EQ(freq4.sample(l.data(), {.history = history, .generated = generated}), 0);
  Sampler freq6({.temperature = 0.0f, .frequency_penalty = 0.6f}, 3);
  EXPECT_EQ(freq6.sample(l.data(), {.history = history, .generated = generated}), 1);
  // The prompt's own tokens are not penalised.
  EXPECT_EQ(freq6.sample(l.data(), {.history = history}), 0);
  // Negative values encourage repetition.
  Sampler encourage({.temperature = 0.0f, .presence_penalty = -2.0f}, 3);
  std::vector<int32_t> only2 = {2};
  EXPECT_EQ(encourage.sample(l.data(), {.history = only2, .generated = only2}),
            2);  // 0.1 + 2 = 2.1 > 2.0
}

// vLLM's repetition_penalty over the seen set: a positive logit is divided, a negative one
// multiplied, the others untouched. Greedy ties go to the lower id, so each case sits exactly on
// the boundary of the right value and a wrong formula moves the pick.
TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegativeSeenLogits) {
  Sampler s({.temperature = 0.0f, .repetition_penalty = 2.0f}, 3);
  const std::vector<int32_t> seen0 = {0};
  std::vector<float> pos = {2.0f, 1.0f, 0.5f};  // 2 / 2 = 1.0 ties token 1: lower id wins
  EXPECT_EQ(s.sample(pos.data(), {.seen = seen0}), 0);
  pos[1] = std::nextafter(1.0f, 2.0f);
  EXPECT_EQ(s.sample(pos.data(), {.seen = seen0}), 1);
  std::vector<float> neg = {-1.0f, -2.0f, -3.0f};  // -1 x 2 = -2.0 ties token 1
  EXPECT_EQ(s.sample(neg.data(), {.seen = seen0}), 0);
  neg[1] = std::nextafter(-2.0f, 0.0f);
  EXPECT_EQ(s.sample(neg.data(), {.seen = seen0}), 1);
  // Below 1 it encourages: 1.0 / 0.5 = 2.0 beats 1.9; -4 x 0.5 = -2 beats -2.5.
  Sampler enc({.temperature = 0.0f, .repetition_penalty = 0.5f}, 3);
  std::vector<float> l = {1.0f, 1.9f, 0.0f};
  EXPECT_EQ(enc.sample(l.data(), {.seen = seen0}), 0);
  std::vector<float> n2 = {-4.0f, -2.5f, -3.0f};
  EXPECT_EQ(enc.sample(n2.data(), {.seen = seen0}), 0);
  // Unseen tokens keep their logit; an empty seen set changes nothing.
  std::vector<float> u = {2.0f, 1.5f, 0.1f};
  EXPECT_EQ(s.sample(u.data(), {}), 0);
  const std::vector<int32_t> seen2 = {2};
  EXPECT_EQ(s.sample(u.data(), {.seen = seen2}), 0);
}

TEST(Sampler, AdjustedLogitsAreRestoredEvenWhenOneTokenIsAdjustedSeveralTimes) {
  // Token 1 gets a bias, a ban, both repetition penalties and presence/frequency penalties.
  Sampler s({.temperature = 0.7f,
             .top_k = 2,
             .repeat_penalty = 1.5f,
             .repeat_last_n = 8,
             .presence_penalty = 0.5f,
             .frequency_penalty = 0.5f,
             .logit_bias = {{1, 3.0f}},
             .seed = 3,
             .repetition_penalty = 1.3f},
            4);
  const std::vector<float> orig = {0.5f, -1.5f, 2.0f, 1.0f};
  std::vector<float> l = orig;
  const std::vector<int32_t> ids = {1, 1, 3}, seen = {1, 3}, banned = {1};
  for (int i = 0; i < 20; ++i) {
    const int32_t t = s.sample(l.data(), {.history = ids,
                                          .generated = ids,
                                          .seen = seen,
                                          .banned = i % 2 == 0 ? std::span<const int32_t>(banned)
                                                               : std::span<const int32_t>()});
    if (i % 2 == 0) {
      EXPECT_NE(t, 1);
    }
    ASSERT_EQ(l, orig) << "draw " << i;
  }
}

// min_tokens: banned ids (EOS, stop_token_ids) are never drawn, greedy or sampled, whatever
// their logit or bias, and come back once the ban is lifted.
TEST(Sampler, BannedTokensAreNeverDrawn) {
  std::vector<float> l = {5.0f, 0.0f, 0.1f, -0.2f};
  const std::vector<int32_t> banned = {0, 2};
  Sampler greedy({.temperature = 0.0f, .logit_bias = {{0, 100.0f}}}, 4);
  EXPECT_EQ(greedy.sample(l.data(), {.banned = banned}), 1);
  EXPECT_EQ(greedy.sample(l.data(), {}), 0);
  for (int32_t top_k : {0, 2}) {
    Sampler s({.temperature = 1.5f, .top_k = top_k, .top_p = 0.99f, .min_p = 0.0f, .seed = 5}, 4);
    std::map<int32_t, int> n;
    for (int i = 0; i < 400; ++i) ++n[s.sample(l.data(), {.banned = banned})];
    EXPECT_EQ(n[0] + n[2], 0) << "top_k " << top_k;
    EXPECT_GT(n[1], 0);
  }
}

TEST(SamplingParams, ValidateRejectsOutOfRange) {
  EXPECT_FALSE(SamplingParams{.repetition_penalty = 0.0f}.validate().ok());
  EXPECT_FALSE(SamplingParams{.repetition_penalty = -1.0f}.validate().ok());
  EXPECT_FALSE(SamplingParams{.presence_penalty = 2.5f}.validate().ok());
  EXPECT_FALSE(SamplingParams{.frequency_penalty = -2.1f}.validate().ok());
  EXPECT_FALSE(SamplingParams{.temperature = -1.0f}.validate().ok());
  EXPECT_FALSE(SamplingParams{.top_p = 0.0f}.validate().ok());
  EXPECT_FALSE(SamplingParams{.min_p = 1.5f}.validate().ok());
  EXPECT_TRUE(SamplingParams{}.validate().ok());
}

}  // namespace
}  // namespace kvw
