#include "model/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvw {
namespace {

RopeParams params(RopeScaling s, float factor) {
  RopeParams p;
  p.n_rot = 64;
  p.freq_base = 10000.0f;
  p.scaling = s;
  p.scale_factor = factor;
  p.orig_ctx = 4096;
  return p;
}

std::vector<float> cs_at(const RopeTable& t, int64_t pos) {
  std::vector<float> cs(t.n_rot());
  t.cos_sin(pos, cs.data());
  return cs;
}

TEST(Rope, RotationPreservesNormAndMatchesAngleFormula) {
  RopeTable t(params(RopeScaling::kNone, 1.0f));
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = std::sin(0.3f * i) + 0.1f;
  double n0 = 0;
  for (float v : x) n0 += v * v;
  auto cs = cs_at(t, 37);
  std::vector<float> y = x;
  t.apply(y.data(), 1, 64, cs.data());
  double n1 = 0;
  for (float v : y) n1 += v * v;
  EXPECT_NEAR(n0, n1, 1e-4 * n0);
  // pair 3 (dims 6, 7) rotates by 37 * base^(-6/64)
  const double th = 37.0 * std::pow(10000.0, -6.0 / 64);
  EXPECT_NEAR(y[6], x[6] * std::cos(th) - x[7] * std::sin(th), 1e-5);
  EXPECT_NEAR(y[7], x[6] * std::sin(th) + x[7] * std::cos(th), 1e-5);
}

TEST(Rope, NeoxStylePairsHalves) {
  RopeParams p = params(RopeScaling::kNone, 1.0f);
  p.style = RopeStyle::kNeox;
  RopeTable t(p);
  std::vector<float> x(64, 0.0f);
  x[1] = 1.0f;  // pair 1 is (1, 33)
  auto cs = cs_at(t, 5);
  t.apply(x.data(), 1, 64, cs.data());
  const double th = 5.0 * std::pow(10000.0, -2.0 / 64);
  EXPECT_NEAR(x[1], std::cos(th), 1e-6);
  EXPECT_NEAR(x[33], std::sin(th), 1e-6);
  EXPECT_EQ(x[2], 0.0f);
}

TEST(Rope, LinearScalingDividesPositions) {
  RopeTable scaled(params(RopeScaling::kLinear, 4.0f));
  RopeTable plain(params(RopeScaling::kNone, 1.0f));
  auto a = cs_at(scaled, 400), b = cs_at(plain, 100);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << i;
}

TEST(Rope, NtkKeepsHighestFrequencyAndInterpolatesLowest) {
  RopeTable ntk(params(RopeScaling::kNtk, 8.0f));
  RopeTable plain(params(RopeScaling::kNone, 1.0f));
  auto a = cs_at(ntk, 1000), b = cs_at(plain, 1000);
  EXPECT_NEAR(a[0], b[0], 1e-6);  // pair 0: frequency 1 in both
  EXPECT_NEAR(a[1], b[1], 1e-6);
  // The lowest-frequency pair turns about 8x slower.
  auto c = cs_at(plain, 125);
  EXPECT_NEAR(a[62], c[62], 2e-3);
  EXPECT_NEAR(a[63], c[63], 2e-3);
}

TEST(Rope, YarnExtrapolatesFastDimsInterpolatesSlowDimsAndScalesMagnitude) {
  RopeTable yarn(params(RopeScaling::kYarn, 4.0f));
  RopeTable plain(params(RopeScaling::kNone, 1.0f));
  const double mscale = 1.0 + 0.1 * std::log(4.0);
  auto a = cs_at(yarn, 300), fast = cs_at(plain, 300), slow = cs_at(plain, 75);
  EXPECT_NEAR(a[0], fast[0] * mscale, 1e-5);    // pair 0: extrapolated (unchanged angle)
  EXPECT_NEAR(a[62], slow[62] * mscale, 1e-5);  // last pair: interpolated (position / 4)
  EXPECT_NEAR(a[63], slow[63] * mscale, 1e-5);
}

}  // namespace
}  // namespace kvw
