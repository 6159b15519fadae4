// The O(n_vocab) sampler against a reference that sorts the vocabulary (the textbook order:
// top-k -> softmax at temperature -> top-p -> min-p, in double): the empirical distribution of
// seeded draws must pass a chi-square test at alpha = 1e-6 (fixed seeds: the outcome is
// deterministic), tokens outside the truncated set must never be drawn, and the row passes must
// agree with their definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "model/sampling.h"
#include "model/sampling_rows.h"

namespace kvw {
namespace {

std::vector<double> reference_probs(const std::vector<float>& logits, const SamplingParams& p) {
  const int32_t n = (int32_t)logits.size();
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  size_t keep = (p.top_k > 0 && p.top_k < n) ? (size_t)p.top_k : (size_t)n;
  std::vector<double> w(keep);
  double z = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    w[i] = std::exp((double(logits[order[i]]) - logits[order[0]]) / p.temperature);
    z += w[i];
  }
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    for (size_t i = 0; i < keep; ++i) {
      cum += w[i] / z;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    size_t k = 1;
    while (k < keep && w[k] >= p.min_p * w[0]) ++k;
    keep = k;
  }
  std::vector<double> probs(n, 0.0);
  double kept = 0.0;
  for (size_t i = 0; i < keep; ++i) kept += w[i];
  for (size_t i = 0; i < keep; ++i) probs[order[i]] = w[i] / kept;
  return probs;
}

// Draws `num_draws` tokens and checks them against the reference: no draw outside its support,
// and Pearson's chi-square over categories of expected count >= 10 (small tokens pooled in rank
// order) under the Wilson-Hilferty quantile for alpha = 1e-6.
void expect_matches_reference(std::vector<float> logits, const SamplingParams& p, int num_draws) {
  const std::vector<double> ref = reference_probs(logits, p);
  Sampler s(p, (int32_t)logits.size());
  std::vector<int64_t> count(logits.size(), 0);
  for (int i = 0; i < num_draws; ++i) {
    const int32_t t = s.sample(logits.data(), {});
    ASSERT_GE(t, 0);
    ASSERT_LT(t, (int32_t)logits.size());
    ASSERT_GT(ref[t], 0.0) << "token " << t << " is outside the truncated set";
    ++count[t];
  }
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return ref[a] > ref[b]; });
  double chi2 = 0.0, expected = 0.0, observed = 0.0;
  int categories = 0;
  for (int32_t id : order) {
    if (ref[id] == 0.0) break;
    expected += ref[id] * num_draws;
    observed += (double)count[id];
    if (expected >= 10.0) {
      chi2 += (observed - expected) * (observed - expected) / expected;
      ++categories;
      expected = observed = 0.0;
    }
  }
  if (expected > 0.0) {  // a last small category
    chi2 += (observed - expected) * (observed - expected) / std::max(expected, 1e-9);
    ++categories;
  }
  if (categories < 2) return;  // one token holds all the mass: support checked above
  const double df = categories - 1, z = 4.753;  // upper 1e-6 point of the standard normal
  const double a = 2.0 / (9.0 * df);
  const double critical = df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
  EXPECT_LT(chi2, critical) << "chi-square over " << categories << " categories";
}

std::vector<float> normal_logits(int32_t n, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> l(n);
  for (float& x : l) x = d(rng);
  return l;
}

struct Case {
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
};

constexpr Case kCases[] = {
    {1.0f, 0, 1.0f, 0.0f},    {0.7f, 0, 1.0f, 0.0f}, {1.0f, 40, 1.0f, 0.0f},
    {1.0f, 0, 0.9f, 0.0f},    {0.8f, 0, 0.5f, 0.0f}, {1.0f, 0, 1.0f, 0.05f},
    {1.0f, 100, 0.8f, 0.02f}, {1.3f, 0, 0.3f, 0.1f}, {0.9f, 0, 0.95f, 0.01f},
};

SamplingParams params(const Case& c, uint64_t seed) {
  return SamplingParams{.temperature = c.temperature,
                        .top_k = c.top_k,
                        .top_p = c.top_p,
                        .min_p = c.min_p,
                        .seed = seed};
}

TEST(SamplerDistribution, MatchesSortedReferenceAtEveryKnobMix) {
  const std::vector<float> logits = normal_logits(1000, 2.0f, 11);
  uint64_t seed = 1;
  for (const Case& c : kCases) {
    SCOPED_TRACE(::testing::Message() << "T " << c.temperature << " top_k " << c.top_k << " top_p "
                                      << c.top_p << " min_p " << c.min_p);
    expect_matches_reference(logits, params(c, seed++), 40000);
  }
}

TEST(SamplerDistribution, MatchesReferenceAt262kVocabulary) {
  // Gemma's vocabulary size, with a peaked head (as trained models have) over a wide tail, so the
  // top_p and min_p boundaries fall among many tokens.
  std::vector<float> logits = normal_logits(262144, 1.0f, 5);
  for (int i = 0; i < 64; ++i) logits[(size_t)i * 4099 + 17] += 9.0f + 0.05f * (float)i;
  uint64_t seed = 100;
  for (const Case& c : {kCases[0], kCases[2], kCases[3], kCases[5], kCases[6]}) {
    SCOPED_TRACE(::testing::Message() << "T " << c.temperature << " top_k " << c.top_k << " top_p "
                                      << c.top_p << " min_p " << c.min_p);
    expect_matches_reference(logits, params(c, seed++), 4000);
  }
}

TEST(SamplerDistribution, TiesAtTheTopPBoundaryKeepTheLowerIds) {
  // Four equal tokens of 0.25 each: top_p 0.5 keeps ids 0 and 1 only (rank ties by lower id).
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  Sampler s({.temperature = 1.0f, .top_k = 0, .top_p = 0.5f, .min_p = 0.0f, .seed = 9}, 4);
  int n[4] = {};
  for (int i = 0; i < 4000; ++i) ++n[s.sample(logits.data(), {})];
  EXPECT_EQ(n[2] + n[3], 0);
  EXPECT_NEAR(n[0] / 4000.0, 0.5, 0.04);
}

TEST(SamplerDistribution, SameSeedSameTokensWhateverRanBeforeOnTheThread) {
  // Thread-local scratch is shared by every sampler on a thread: interleaving other samplers
  // (other vocabularies, other knobs) must not change a seeded sequence.
  const std::vector<float> big = normal_logits(151936, 1.5f, 3);
  std::vector<float> row = big;
  const SamplingParams p{.temperature = 0.8f, .top_k = 0, .top_p = 0.9f, .min_p = 0.0f, .seed = 77};
  Sampler alone(p, (int32_t)row.size());
  std::vector<int32_t> a;
  for (int i = 0; i < 50; ++i) a.push_back(alone.sample(row.data(), {}));
  Sampler again(p, (int32_t)row.size());
  Sampler other({.temperature = 1.0f, .top_k = 7, .seed = 1}, 1000);
  std::vector<float> small = normal_logits(1000, 1.0f, 4);
  std::vector<int32_t> b;
  for (int i = 0; i < 50; ++i) {
    other.sample(small.data(), {});
    b.push_back(again.sample(row.data(), {}));
  }
  EXPECT_EQ(a, b);
  EXPECT_EQ(row, big);
}

TEST(SamplerDistribution, AdjustmentsAreRestoredAndApplyOncePerToken) {
  std::vector<float> logits = {2.0f, 1.0f, -1.0f, 0.5f};
  const std::vector<float> before = logits;
  // Bias on 0, repeat penalty 2 over a window that names token 0 three times and token 2 once,
  // presence 1 on token 3 (generated twice, frequency 0.25 each).
  Sampler s({.temperature = 0.0f,
             .repeat_penalty = 2.0f,
             .repeat_last_n = 8,
             .presence_penalty = 1.0f,
             .frequency_penalty = 0.25f,
             .logit_bias = {{0, -0.5f}, {3, 3.0f}}},
            4);
  const std::vector<int32_t> history = {0, 0, 2, 0, 3, 3};
  const std::vector<int32_t> generated = {3, 3};
  // Token 0: (2 - 0.5) / 2 = 0.75; token 3: (0.5 + 3) / 2 - 1 - 0.5 = 0.25; token 1: 1.0 wins.
  EXPECT_EQ(s.sample(logits.data(), {.history = history, .generated = generated}), 1);
  EXPECT_EQ(logits, before);
}

TEST(SamplingRows, ExpIsAccurateAndExactAtZero) {
  EXPECT_EQ(sampling_rows::sample_exp(0.0f), 1.0f);
  EXPECT_EQ(sampling_rows::sample_exp(-90.0f), 0.0f);
  for (float x = -86.9f; x <= 0.0f; x += 0.0137f) {
    const double want = std::exp((double)x);
    EXPECT_NEAR(sampling_rows::sample_exp(x) / want, 1.0, 4e-7) << x;
  }
}

TEST(SamplingRows, MaskedBlockSumsAndDrawsFollowTheirDefinitions) {
  namespace sr = sampling_rows;
  std::vector<float> x = normal_logits(5000, 1.0f, 8);
  const float max = *std::max_element(x.begin(), x.end());
  const int64_t split = 2500;
  x[100] = x[4000] = x[split];  // ties: the lower id is ranked above, the higher one below
  auto w_of = [&](int64_t j) { return sr::sample_exp((x[j] - max) * 1.25f); };
  const float thr = w_of(split);
  std::vector<float> stored(5000);
  for (const bool from_stored : {false, true}) {
    const sr::WeightMask m{
        max, 1.25f, thr, split, std::nextafter(thr, 1e30f), from_stored ? stored.data() : nullptr};
    std::vector<double> blocks(sr::num_blocks(5000));
    double all = 0.0;
    const double total = sr::weight_block_sums(x.data(), 5000, m, blocks.data(), &all,
                                               from_stored ? nullptr : stored.data());
    double want = 0.0, want_all = 0.0;
    for (int64_t j = 0; j < 5000; ++j) {
      EXPECT_EQ(stored[j], w_of(j));
      const double w = std::exp((double(x[j]) - max) * 1.25);
      want_all += w;
      // ranked above token `split`: more probable, or as probable with a lower id
      if (w_of(j) > thr || (w_of(j) == thr && j < split)) want += w;
    }
    EXPECT_NEAR(total, want, 1e-6 * want);
    EXPECT_NEAR(all, want_all, 1e-5 * want_all);
    for (double u : {0.0, 0.3, 0.77, 0.999999}) {
      const int64_t j = sr::draw_from_blocks(x.data(), 5000, m, blocks.data(), u * total);
      EXPECT_TRUE(m.admits(j, w_of(j))) << u;
    }
  }
  EXPECT_EQ(sr::first_equal(x.data(), 5000, max), std::max_element(x.begin(), x.end()) - x.begin());
  std::vector<int32_t> ids(5000);
  const int64_t c = sampling_rows::collect_at_least(x.data(), 5000, 1.5f, ids.data());
  EXPECT_EQ(c, sampling_rows::count_at_least(x.data(), 5000, 1.5f));
  EXPECT_EQ(c, std::count_if(x.begin(), x.end(), [](float v) { return v >= 1.5f; }));
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.begin() + c));
}

TEST(SamplingRows, AllFiniteFindsAnyNanOrInfinityWherever) {
  const int64_t n = 5000;  // four full blocks and a partial one with a scalar tail
  std::vector<float> x = normal_logits(n, 1.0f, 9);
  x[7] = std::numeric_limits<float>::max();
  x[8] = -std::numeric_limits<float>::max();
  x[9] = std::numeric_limits<float>::denorm_min();
  EXPECT_TRUE(sampling_rows::all_finite(x.data(), n));
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity()}) {
    for (const int64_t at :
         {int64_t{0}, int64_t{17}, int64_t{1023}, int64_t{1024}, int64_t{4097}, n - 1}) {
      std::vector<float> y = x;
      y[at] = bad;
      EXPECT_FALSE(sampling_rows::all_finite(y.data(), n)) << bad << " at " << at;
      EXPECT_TRUE(sampling_rows::all_finite(y.data(), at)) << "before " << at;
    }
  }
}

TEST(SelectTopK, ReturnsTheKLargestBestFirstWithLowerIdsOnTies) {
  std::vector<float> x = normal_logits(70000, 1.0f, 2);
  x[5] = x[60000] = 100.0f;  // a tie at the top
  std::vector<int32_t> ids;
  select_top_k(x.data(), (int32_t)x.size(), 25, &ids);
  std::vector<int32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + 25, order.end(),
                    [&](int32_t a, int32_t b) { return x[a] != x[b] ? x[a] > x[b] : a < b; });
  order.resize(25);
  EXPECT_EQ(ids, order);
  std::vector<float> flat(300, 0.5f);  // all equal: the lowest ids
  select_top_k(flat.data(), 300, 3, &ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 2}));
}

}  // namespace
}  // namespace kvw
