// tests/kernels/attention_split_test.cc: flash-decoding's split (kernels.h kAttnSegment) at a
// depth of several segments: segments computed separately, in any order (as threads would),
// and merged in position order give attention's bits exactly, for every table and KV dtype; and
// attention stays within float rounding of a float64 two-pass softmax there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "kernels_test_util.h"
#include "paged_kv_layer.h"

namespace kvw::kernels {
namespace {

constexpr int32_t kBlockSize = 16;
constexpr int32_t kKvHeads = 2;
constexpr int64_t kDepth = 1300;  // five segments of 256 and a partial sixth
static_assert(kDepth > 4 * kAttnSegment);

// One layer of paged K/V over kDepth positions.
struct DeepKv : testing::PagedKvLayer {
  DeepKv(KvDtype dtype, int32_t hd) : PagedKvLayer(dtype, hd, kDepth, kKvHeads, kBlockSize, 4) {}
};

// Float64 two-pass softmax of one query over [b, e), all heads, with AttnScores' variants.
std::vector<float> naive(const DeepKv& kv, const float* q, int32_t n_heads, int64_t b, int64_t e,
                         AttnScores sc) {
  const int32_t hd = kv.view.head_dim, group = n_heads / kKvHeads;
  std::vector<float> out(n_heads * hd), row(hd);
  std::vector<std::vector<float>> ks(e - b), vs(e - b);
  for (int32_t h = 0; h < n_heads; ++h) {
    std::vector<double> s(e - b);
    double mx = sc.sinks != nullptr ? sc.sinks[h] : -INFINITY, sum = 0.0;
    for (int64_t p = b; p < e; ++p) {
      kv_load_row(kv.view, false, kv.table, p, h / group, row.data());
      double dot = 0.0;
      for (int32_t i = 0; i < hd; ++i) dot += (double)q[h * hd + i] * row[i];
      double x = dot * sc.scale;
      if (sc.softcap > 0.0f) x = sc.softcap * std::tanh(x / sc.softcap);
      mx = std::fmax(mx, s[p - b] = x);
    }
    for (double& x : s) sum += (x = std::exp(x - mx));
    if (sc.sinks != nullptr) sum += std::exp(sc.sinks[h] - mx);
    std::vector<double> acc(hd, 0.0);
    for (int64_t p = b; p < e; ++p) {
      kv_load_row(kv.view, true, kv.table, p, h / group, row.data());
      for (int32_t i = 0; i < hd; ++i) acc[i] += s[p - b] * row[i];
    }
    for (int32_t i = 0; i < hd; ++i) out[h * hd + i] = (float)(acc[i] / sum);
  }
  return out;
}

TEST(KernelsAttentionSplit, SegmentsMergedInAnyComputeOrderEqualAttentionBitForBit) {
  for (const KernelTable* t : available_kernel_tables()) {
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8}) {
      for (int32_t hd : {64, 40}) {
        SCOPED_TRACE(std::string(t->isa) + " " + kv_dtype_name(dtype) + " hd " +
                     std::to_string(hd));
        const DeepKv kv(dtype, hd);
        const int32_t n_heads = 8;
        const auto q = testing::random_floats(n_heads * hd, 21, 3.0f);
        const float scale = 1.0f / std::sqrt((float)hd);
        // A full causal range, and a window that starts mid-segment.
        for (auto [b, e] : {std::pair<int64_t, int64_t>{0, kDepth}, {300, 1201}}) {
          std::vector<float> out(n_heads * hd, NAN), scratch(attention_scratch_floats(hd), NAN);
          const AttnQuery query = {q.data(), out.data(), b, e};
          t->attention({&query, 1}, n_heads, kv.view, kv.table, {scale}, scratch.data());
          EXPECT_EQ(testing::split(*t, kv, q.data(), n_heads, b, e, {scale}), out)
              << "[" << b << "," << e;
          const auto want = naive(kv, q.data(), n_heads, b, e, {scale});
          EXPECT_LE(testing::max_abs_diff(out.data(), want.data(), (int64_t)want.size()), 2e-5);
        }
      }
    }
  }
}

// The same with soft-capped scores and sinks (Gemma-2, gpt-oss): the split decode's segments,
// merged and finished with each head's sink, give attention's bits, and both stay within
// rounding of the float64 softmax with the variant.
TEST(KernelsAttentionSplit, SoftcapAndSinksSplitEqualsAttentionBitForBit) {
  const int32_t n_heads = 8;
  std::vector<float> sinks(n_heads);
  for (int32_t h = 0; h < n_heads; ++h) sinks[h] = 1.5f - 0.4f * (float)h;
  for (const KernelTable* t : available_kernel_tables()) {
    for (KvDtype dtype : {KvDtype::kF16, KvDtype::kInt8}) {
      const int32_t hd = 64;
      const DeepKv kv(dtype, hd);
      const auto q = testing::random_floats(n_heads * hd, 23, 3.0f);
      for (const AttnScores sc :
           {AttnScores{0.125f, 5.0f, nullptr}, AttnScores{0.125f, 0.0f, sinks.data()},
            AttnScores{0.125f, 5.0f, sinks.data()}}) {
        SCOPED_TRACE(std::string(t->isa) + " " + kv_dtype_name(dtype) + " softcap " +
                     std::to_string(sc.softcap) + (sc.sinks ? " sinks" : ""));
        for (auto [b, e] : {std::pair<int64_t, int64_t>{0, kDepth}, {300, 1201}, {7, 9}}) {
          std::vector<float> out(n_heads * hd, NAN), scratch(attention_scratch_floats(hd), NAN);
          const AttnQuery query = {q.data(), out.data(), b, e};
          t->attention({&query, 1}, n_heads, kv.view, kv.table, sc, scratch.data());
          EXPECT_EQ(testing::split(*t, kv, q.data(), n_heads, b, e, sc), out)
              << "[" << b << "," << e;
          const auto want = naive(kv, q.data(), n_heads, b, e, sc);
          EXPECT_LE(testing::max_abs_diff(out.data(), want.data(), (int64_t)want.size()), 2e-5);
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvw::kernels
