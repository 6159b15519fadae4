// tests/kernels/attention_bf16_test.cc: AttnScores::bf16_dot (q.k from bf16 operands) in the
// tables that implement it (attention_bf16_dot_supported; skipped on CPUs without AVX512_BF16):
// within a bound derived from bf16's 8-bit significand of a float64 softmax, and as batch
// invariant as the f32 path: a tile of queries (prefill, chunked prefill) and the split
// segments (flash-decoding, any thread) give each query its alone (decode) bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "kernels_test_util.h"
#include "paged_kv_layer.h"

namespace kvw::kernels {
namespace {

constexpr int32_t kBlockSize = 16;
constexpr int32_t kKvHeads = 2;
constexpr int64_t kDepth = 1100;  // four segments of 256 and a partial fifth

// One layer of paged K/V over kDepth positions.
struct Kv : testing::PagedKvLayer {
  Kv(KvDtype dtype, int32_t hd) : PagedKvLayer(dtype, hd, kDepth, kKvHeads, kBlockSize, 5) {}
};

// x rounded to bf16, nearest even (finite x), as vcvtneps2bf16.
double bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// Float64 softmax of one query over [b, e) from the stored K/V and the f32 q (with
// bf16_operands: q and K rounded to bf16 first, which leaves bf16_dot only the f32 path's own
// rounding, so attention_test's 2e-5 holds), and per head the bound bf16_dot must meet against
// the unrounded operands. Rounding q and k to bf16 (unit roundoff u = 2^-8) moves a product by
// at most (2u + u^2)|q_d k_d|, and f32 sums of hd terms add hd 2^-24 of the sum of |q_d k_d|
// (generous: vdpbf16ps rounds twice per pair), so each logit moves by at most
// delta = scale (2^-7 + 2^-16 + hd 2^-24) max_p sum_d |q_d k_d|; then every softmax weight moves by
// a factor within e^(+-2 delta), and each output element by at most (e^(2 delta) - 1) max |v|.
// 2e-5 on top: the f32 path's own rounding (attention_test's tolerance).
struct Reference {
  std::vector<float> out;
  std::vector<double> tol;  // [n_heads]
};

Reference reference(const Kv& kv, const float* q, int32_t n_heads, int64_t b, int64_t e,
                    float scale, bool bf16_operands) {
  const auto op = [bf16_operands](float x) { return bf16_operands ? bf16(x) : (double)x; };
  // INT8 K rows with head_dim % 16 == 0 enter as their integers (exact in bf16), the row's scale
  // applied after, as in the f32 path; other INT8 rows are decoded (scaled) first.
  const bool k_exact = kv.view.dtype == KvDtype::kInt8 && kv.view.head_dim % 16 == 0;
  const int32_t hd = kv.view.head_dim, group = n_heads / kKvHeads;
  Reference r{std::vector<float>(n_heads * hd), std::vector<double>(n_heads)};
  // Rows decoded once per KV head, not once per query head (up to 16x the decoding under ASan).
  std::vector<std::vector<float>> ks(kKvHeads), vs(kKvHeads);
  for (int32_t g = 0; g < kKvHeads; ++g) {
    ks[g].resize((e - b) * hd);
    vs[g].resize((e - b) * hd);
    for (int64_t p = b; p < e; ++p) {
      kv_load_row(kv.view, false, kv.table, p, g, ks[g].data() + (p - b) * hd);
      kv_load_row(kv.view, true, kv.table, p, g, vs[g].data() + (p - b) * hd);
    }
  }
  for (int32_t h = 0; h < n_heads; ++h) {
    std::vector<double> s(e - b);
    double mx = -INFINITY, sum = 0.0, abs_dot_max = 0.0, v_max = 0.0;
    for (int64_t p = b; p < e; ++p) {
      const float* row = ks[h / group].data() + (p - b) * hd;
      double dot = 0.0, abs_dot = 0.0;
      for (int32_t i = 0; i < hd; ++i) {
        dot += op(q[h * hd + i]) * (k_exact ? (double)row[i] : op(row[i]));
        abs_dot += std::fabs((double)q[h * hd + i] * row[i]);
      }
      abs_dot_max = std::max(abs_dot_max, abs_dot);
      mx = std::fmax(mx, s[p - b] = dot * scale);
    }
    for (double& x : s) sum += (x = std::exp(x - mx));
    std::vector<double> acc(hd, 0.0);
    for (int64_t p = b; p < e; ++p) {
      const float* row = vs[h / group].data() + (p - b) * hd;
      for (int32_t i = 0; i < hd; ++i) {
        acc[i] += s[p - b] * row[i];
        v_max = std::max(v_max, std::fabs((double)row[i]));
      }
    }
    for (int32_t i = 0; i < hd; ++i) r.out[h * hd + i] = (float)(acc[i] / sum);
    const double delta = scale *
                         (std::ldexp(1.0, -7) + std::ldexp(1.0, -16) + hd * std::ldexp(1.0, -24)) *
                         abs_dot_max;
    r.tol[h] = std::expm1(2.0 * delta) * v_max + 2e-5;
  }
  return r;
}

std::vector<const KernelTable*> bf16_tables() {
  std::vector<const KernelTable*> out;
  for (const KernelTable* t : available_kernel_tables()) {
    if (attention_bf16_dot_supported(*t)) out.push_back(t);
  }
  return out;
}

// For every KV dtype, decode-tile group sizes (2, 8) and a group past a decode tile (16), head
// dims with and without a 16-element tail, causal and windowed ranges: a tile of 20 queries equals
// each query alone, the split equals attention, all bit for bit; each is within f32 rounding of
// float64 on bf16-rounded operands and within the bf16 bound of float64 on the stored ones, and
// differs from the f32 path (the products really are bf16).
TEST(KernelsAttentionBf16, TilesAndSplitEqualAloneAndStayWithinTheBf16Bound) {
  const auto tables = bf16_tables();
  if (tables.empty()) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  for (const KernelTable* t : tables) {
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8}) {
      for (int32_t hd : {64, 128, 40}) {
        for (auto [gqa, window] : {std::pair<int32_t, int64_t>{8, 0}, {2, 300}, {16, 0}}) {
          SCOPED_TRACE(std::string(t->isa) + " " + std::string(kv_dtype_name(dtype)) + " hd " +
                       std::to_string(hd) + " gqa " + std::to_string(gqa) + " window " +
                       std::to_string(window));
          const Kv kv(dtype, hd);
          const int32_t n_heads = kKvHeads * gqa;
          const int64_t n_q = 20, first = kDepth - n_q;
          const auto q = testing::random_floats(n_q * n_heads * hd, 13, 3.0f);
          const float scale = 1.0f / std::sqrt((float)hd);
          const AttnScores bf16 = {scale, 0.0f, nullptr, true};
          std::vector<float> tiled(n_q * n_heads * hd, NAN), alone(tiled), f32(tiled);
          std::vector<AttnQuery> queries;
          for (int64_t i = 0; i < n_q; ++i) {
            const int64_t pos = first + i;
            queries.push_back({q.data() + i * n_heads * hd, tiled.data() + i * n_heads * hd,
                               window > 0 ? pos + 1 - window : 0, pos + 1});
          }
          std::vector<float> scratch(attention_scratch_floats(hd), NAN);
          t->attention(queries, n_heads, kv.view, kv.table, bf16, scratch.data());
          for (int64_t i = 0; i < n_q; ++i) {
            AttnQuery one = queries[i];
            one.out = alone.data() + i * n_heads * hd;
            t->attention({&one, 1}, n_heads, kv.view, kv.table, bf16, scratch.data());
            if (i != 0 && i != n_q - 1) continue;
            const auto parts =
                testing::split(*t, kv, one.q, n_heads, one.pos_begin, one.pos_end, bf16);
            EXPECT_EQ(std::memcmp(parts.data(), one.out, parts.size() * sizeof(float)), 0) << i;
            const Reference want =
                reference(kv, one.q, n_heads, one.pos_begin, one.pos_end, scale, false);
            const Reference rounded =
                reference(kv, one.q, n_heads, one.pos_begin, one.pos_end, scale, true);
            EXPECT_LE(testing::max_abs_diff(one.out, rounded.out.data(), n_heads * hd), 2e-5) << i;
            for (int32_t h = 0; h < n_heads; ++h) {
              EXPECT_LE(testing::max_abs_diff(one.out + h * hd, want.out.data() + h * hd, hd),
                        want.tol[h])
                  << "query " << i << " head " << h;
            }
          }
          EXPECT_EQ(std::memcmp(tiled.data(), alone.data(), tiled.size() * sizeof(float)), 0);
          t->attention(queries, n_heads, kv.view, kv.table, {scale}, scratch.data());
          EXPECT_NE(std::memcmp(tiled.data(), alone.data(), tiled.size() * sizeof(float)), 0);
        }
      }
    }
  }
}

// The f32 path is the default; ref and the AVX2 tables do not claim bf16_dot, and a table
// without it (ref) ignores the flag: the same bits either way.
TEST(KernelsAttentionBf16, DefaultIsF32AndTablesWithoutItIgnoreTheFlag) {
  EXPECT_FALSE(AttnScores{0.125f}.bf16_dot);
  EXPECT_FALSE(attention_bf16_dot_supported(kernels_ref()));
  for (const KernelTable* t : available_kernel_tables()) {
    if (std::string(t->isa).rfind("avx2", 0) == 0) {
      EXPECT_FALSE(attention_bf16_dot_supported(*t));
    }
  }
  const int32_t hd = 64, n_heads = kKvHeads * 4;
  const Kv kv(KvDtype::kF16, hd);
  const auto q = testing::random_floats(n_heads * hd, 17, 3.0f);
  std::vector<float> a(n_heads * hd, NAN), b(n_heads * hd, NAN);
  std::vector<float> scratch(attention_scratch_floats(hd), NAN);
  const AttnQuery qa = {q.data(), a.data(), 0, kDepth}, qb = {q.data(), b.data(), 0, kDepth};
  kernels_ref().attention({&qa, 1}, n_heads, kv.view, kv.table, {0.125f}, scratch.data());
  kernels_ref().attention({&qb, 1}, n_heads, kv.view, kv.table, {0.125f, 0.0f, nullptr, true},
                          scratch.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace kvw::kernels
