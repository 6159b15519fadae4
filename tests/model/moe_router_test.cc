// Expert routing against hand-computed cases: Mixtral's softmax + renormalised top-2, DeepSeek's
// sigmoid scores with a selection-only bias and a routed scale, group-limited top-k (groups
// ranked by the sum of their two best scores, as llama.cpp and DeepSeek-V3 do), ties, and inputs
// that must still give distinct experts.
#include "model/moe_router.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <vector>

namespace kvw {
namespace {

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
  std::vector<float> scores;  // the logits after gating
};

Routed route(const MoeParams& m, std::vector<float> logits, const std::vector<float>& bias = {}) {
  Routed r{std::vector<int32_t>(m.n_expert_used), std::vector<float>(m.n_expert_used), {}};
  std::vector<float> scratch(router_scratch_floats(m));
  route_token(m, logits.data(), bias.empty() ? nullptr : bias.data(), r.ids.data(),
              r.weights.data(), scratch.data());
  r.scores = logits;
  return r;
}

MoeParams mixtral(int32_t n_expert, int32_t k) {
  return MoeParams{.n_expert = n_expert, .n_expert_used = k, .n_ff_exp = 1};
}

TEST(MoeRouter, MixtralSoftmaxTopTwoRenormalised) {
  // softmax([1, 2, 3, 0]) = [.0871, .2369, .6439, .0321]; top-2 = experts 2, 1; renormalised
  // .6439 / (.6439 + .2369) = e^3 / (e^3 + e^2) = 1 / (1 + e^-1).
  const Routed r = route(mixtral(4, 2), {1, 2, 3, 0});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 1}));
  const float p = 1.0f / (1.0f + std::exp(-1.0f));
  EXPECT_NEAR(r.weights[0], p, 1e-6);
  EXPECT_NEAR(r.weights[1], 1 - p, 1e-6);
  EXPECT_NEAR(r.scores[2], std::exp(3.0) / (std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + 1),
              1e-6);
}

TEST(MoeRouter, WithoutNormTheWeightsAreTheSoftmaxScores) {
  MoeParams m = mixtral(4, 2);
  m.norm_weights = false;
  const Routed r = route(m, {1, 2, 3, 0});
  const double sum = std::exp(0.0) + std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(r.weights[0], std::exp(3.0) / sum, 1e-6);
  EXPECT_NEAR(r.weights[1], std::exp(2.0) / sum, 1e-6);
}

TEST(MoeRouter, SigmoidBiasSelectsButDoesNotWeigh) {
  // sigmoid([0, 0, ln 3, -ln 3]) = [.5, .5, .75, .25]; + bias [0, .3, 0, .6] = [.5, .8, .75,
  // .85]: experts 3 and 1 win, weighted by their unbiased scores .25 and .5, times scale 2.5.
  MoeParams m{.n_expert = 4, .n_expert_used = 2, .n_ff_exp = 1};
  m.gating = ExpertGating::kSigmoid;
  m.norm_weights = false;
  m.weights_scale = 2.5f;
  const float ln3 = std::log(3.0f);
  const Routed r = route(m, {0, 0, ln3, -ln3}, {0, 0.3f, 0, 0.6f});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{3, 1}));
  EXPECT_NEAR(r.weights[0], 0.25f * 2.5f, 1e-6);
  EXPECT_NEAR(r.weights[1], 0.5f * 2.5f, 1e-6);
}

TEST(MoeRouter, NormThenScale) {
  // Same choice, normalised: .25 / .75 and .5 / .75, then x 2.5.
  MoeParams m{.n_expert = 4, .n_expert_used = 2, .n_ff_exp = 1};
  m.gating = ExpertGating::kSigmoid;
  m.weights_scale = 2.5f;
  const float ln3 = std::log(3.0f);
  const Routed r = route(m, {0, 0, ln3, -ln3}, {0, 0.3f, 0, 0.6f});
  EXPECT_NEAR(r.weights[0], 2.5f / 3, 1e-6);
  EXPECT_NEAR(r.weights[1], 5.0f / 3, 1e-6);
}

TEST(MoeRouter, GroupLimitedTopKRanksGroupsByTheirTwoBestScores) {
  // 8 experts in 4 groups of 2, 2 groups kept, sigmoid scores:
  //   group 0: [.75, .75] sum 1.5    group 1: [.75, .5] sum 1.25
  //   group 2: [.25, .25] sum .5     group 3: [.9, .1]  sum 1.0 (best single expert)
  // Kept: groups 0 and 1. Top-2 among experts 0..3 = 0 and 1 (tie at .75 goes to the lower id),
  // though expert 6 (.9) is the best overall: a max-per-group rule would have kept group 3.
  MoeParams m{.n_expert = 8, .n_expert_used = 2, .n_ff_exp = 1, .n_group = 4, .n_group_used = 2};
  m.gating = ExpertGating::kSigmoid;
  const float l3 = std::log(3.0f), l9 = std::log(9.0f);
  const Routed grouped = route(m, {l3, l3, l3, 0, -l3, -l3, l9, -l9});
  EXPECT_EQ(grouped.ids, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(grouped.weights[0], 0.5f, 1e-6);
  EXPECT_NEAR(grouped.weights[1], 0.5f, 1e-6);

  m.n_group = 0;  // ungrouped: the best two overall
  const Routed flat = route(m, {l3, l3, l3, 0, -l3, -l3, l9, -l9});
  EXPECT_EQ(flat.ids, (std::vector<int32_t>{6, 0}));
  EXPECT_NEAR(flat.weights[0], 0.9f / 1.65f, 1e-6);
}

TEST(MoeRouter, GroupsUseTheBiasedScores) {
  // The bias lifts group 2 (experts 4, 5) from .5 to 1.9: kept with group 0 over group 1.
  MoeParams m{.n_expert = 8, .n_expert_used = 2, .n_ff_exp = 1, .n_group = 4, .n_group_used = 2};
  m.gating = ExpertGating::kSigmoid;
  const float l3 = std::log(3.0f), l9 = std::log(9.0f);
  const Routed r = route(m, {l3, l3, l3, 0, -l3, -l3, l9, -l9}, {0, 0, 0, 0, 0.7f, 0.7f, 0, 0});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{4, 5}));  // .95 each, above group 0's .75
  EXPECT_NEAR(r.weights[0], 0.5f, 1e-6);           // unbiased .25 and .25, normalised
}

TEST(MoeRouter, TiesGoToTheLowerExpertAndEveryExpertCanBeChosen) {
  const Routed r = route(mixtral(4, 4), {0, 0, 0, 0});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1, 2, 3}));
  for (float w : r.weights) EXPECT_FLOAT_EQ(w, 0.25f);
}

TEST(MoeRouter, NonFiniteLogitsStillGiveDistinctExperts) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const std::vector<float>& logits :
       {std::vector<float>{nan, nan, nan, nan, nan, nan}, std::vector<float>{inf, 0, inf, 0, 0, 0},
        std::vector<float>{-inf, -inf, -inf, -inf, -inf, 1}}) {
    const Routed r = route(mixtral(6, 3), logits);
    const std::set<int32_t> distinct(r.ids.begin(), r.ids.end());
    EXPECT_EQ(distinct.size(), 3u);
    for (int32_t id : r.ids) EXPECT_TRUE(id >= 0 && id < 6);
  }
}

}  // namespace
}  // namespace kvw
