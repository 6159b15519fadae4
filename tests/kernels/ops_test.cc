// tests/kernels/ops_test.cc: rmsnorm, silu_mul, gelu_tanh_mul and softcap of every table against
// ref, and the memory bandwidth probe's sanity.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/membw.h"
#include "kernels_test_util.h"

namespace kvw::kernels {
namespace {

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::fmax(m, std::fabs((double)a[i] - b[i]) / std::fmax(1e-30, std::fabs((double)b[i])));
  }
  return m;
}

TEST(KernelsOps, RmsnormMatchesRef) {
  for (int64_t n : {8, 45, 2048, 4096 + 13}) {
    const auto x = testing::random_floats(n, 61);
    const auto w = testing::random_floats(n, 62);
    std::vector<float> want(n);
    kernels_ref().rmsnorm(x.data(), w.data(), n, 1e-5f, want.data());
    // Output has unit RMS before the weight: check the ref itself on one element.
    double ss = 0.0;
    for (float v : x) ss += (double)v * v;
    EXPECT_NEAR(want[3], x[3] / std::sqrt(ss / n + 1e-5) * w[3], 1e-5);
    for (const KernelTable* t : available_kernel_tables()) {
      std::vector<float> got(n);
      t->rmsnorm(x.data(), w.data(), n, 1e-5f, got.data());
      EXPECT_LT(max_rel_diff(got, want), 2e-6) << t->isa << " n " << n;
    }
  }
}

TEST(KernelsOps, SiluMulMatchesRefIncludingSaturatedInputs) {
  const int64_t n = 1000 + 3;
  auto gate = testing::random_floats(n, 63, 4.0f);
  const auto up = testing::random_floats(n, 64);
  gate[0] = -100.0f;  // exp(100) overflows a naive float path
  gate[1] = 100.0f;
  gate[2] = 0.0f;
  gate[9] = -88.5f;
  std::vector<float> want(n);
  kernels_ref().silu_mul(gate.data(), up.data(), n, want.data());
  EXPECT_NEAR(want[1], 100.0f * up[1], 1e-4);
  EXPECT_NEAR(want[0], 0.0f, 1e-30);
  for (const KernelTable* t : available_kernel_tables()) {
    std::vector<float> got(n);
    t->silu_mul(gate.data(), up.data(), n, got.data());
    double max_abs = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      max_abs = std::fmax(max_abs, std::fabs((double)got[i] - want[i]) /
                                       std::fmax(1.0, std::fabs((double)want[i])));
    }
    EXPECT_LT(max_abs, 1e-6) << t->isa;
  }
}

// Absolute error against ref, scaled by max(1, |ref|): tanh's vector form is exact to ~1e-7 in
// absolute terms only (near 0 its 1 - t cancels), which is what GELU and soft-capping need.
double max_scaled_diff(const std::vector<float>& got, const std::vector<float>& want) {
  double m = 0.0;
  for (size_t i = 0; i < got.size(); ++i)
    m = std::fmax(m,
                  std::fabs((double)got[i] - want[i]) / std::fmax(1.0, std::fabs((double)want[i])));
  return m;
}

TEST(KernelsOps, GeluTanhMulMatchesRefIncludingSaturatedInputs) {
  const int64_t n = 6912 + 5;  // Gemma's FFN width and a partial last group
  auto gate = testing::random_floats(n, 65, 6.0f);
  const auto up = testing::random_floats(n, 66);
  gate[0] = -100.0f, gate[1] = 100.0f, gate[2] = 0.0f, gate[3] = 1e-6f, gate[n - 1] = -9.0f;
  std::vector<float> want(n);
  kernels_ref().gelu_tanh_mul(gate.data(), up.data(), n, want.data());
  EXPECT_NEAR(want[1], 100.0f * up[1], 1e-4);
  EXPECT_EQ(want[0], 0.0f * up[0]);
  for (const KernelTable* t : available_kernel_tables()) {
    std::vector<float> got(n);
    t->gelu_tanh_mul(gate.data(), up.data(), n, got.data());
    EXPECT_LT(max_scaled_diff(got, want), 1e-6) << t->isa;
    EXPECT_NEAR(got[0], 0.0f, 1e-30) << t->isa;
  }
}

TEST(KernelsOps, SoftcapMatchesRefAndEachElementIgnoresWhereTheRangeIsCut) {
  const int64_t n = 262144 + 3;
  auto x = testing::random_floats(n, 67, 60.0f);
  x[0] = 1e4f, x[1] = -1e4f, x[2] = 0.0f, x[n - 1] = 45.0f;
  std::vector<float> want = x;
  kernels_ref().softcap(want.data(), n, 30.0f);
  EXPECT_NEAR(want[0], 30.0f, 1e-5);
  EXPECT_NEAR(want[1], -30.0f, 1e-5);
  for (const KernelTable* t : available_kernel_tables()) {
    std::vector<float> whole = x;
    t->softcap(whole.data(), n, 30.0f);
    // tanh's absolute error, scaled by the cap that multiplies it.
    double tanh_err = 0.0;
    for (int64_t i = 0; i < n; ++i)
      tanh_err = std::fmax(tanh_err, std::fabs((double)whole[i] - want[i]) / 30.0);
    EXPECT_LT(tanh_err, 2e-7) << t->isa;
    // The engine splits a row across threads anywhere: cut at odd places, the same bits.
    std::vector<float> cut = x;
    const int64_t c1 = 13, c2 = n / 2 + 5;
    t->softcap(cut.data(), c1, 30.0f);
    t->softcap(cut.data() + c1, c2 - c1, 30.0f);
    t->softcap(cut.data() + c2, n - c2, 30.0f);
    EXPECT_EQ(0, std::memcmp(cut.data(), whole.data(), n * sizeof(float))) << t->isa;
  }
}

TEST(KernelsMemBw, ProbesReturnPlausiblePositiveBandwidth) {
  ThreadPool pool(2);
  const double triad = measure_memory_bandwidth_gbs(pool, 24 << 20);
  const double read = measure_read_bandwidth_gbs(pool, 16 << 20);
  EXPECT_GT(triad, 0.1);
  EXPECT_LT(triad, 10000.0);
  EXPECT_GT(read, 0.1);
  EXPECT_LT(read, 10000.0);
}

}  // namespace
}  // namespace kvw::kernels
