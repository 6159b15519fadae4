// tests/kernels/attention_bf16_test.cc: AttnScores::bf16_dot (q.k and PV from bf16 operands) in
// the tables that implement it (attention_bf16_dot_supported; skipped on CPUs without AVX512_BF16):
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

// Float64 softmax of one query over [b, e) from the stored K/V and the f32 q, with the operands
// rounded to bf16 first (Operands), and per head the bound bf16_dot must meet against it (u =
// 2^-8, bf16's unit roundoff; 2e-5 on top everywhere: the f32 path's own rounding, attention_test's
// tolerance).
// - kBf16 (q, k and V rounded): left to bf16_dot are the f32 path's rounding and the weights' own
//   rounding to bf16 (relative to the running max, so not reproducible here), which moves each
//   weight by a factor within 1 +- u while the sum l stays f32: an output element moves by at
//   most u sum_p w_p |v_p| / sum_p w_p.
// - kStored: rounding q and k moves a product by at most (2u + u^2)|q_d k_d|, and f32 sums of hd
//   terms add hd 2^-24 of the sum of |q_d k_d| (generous: vdpbf16ps rounds twice per pair), so
//   each logit moves by at most delta = scale (2^-7 + 2^-16 + hd 2^-24) max_p sum_d |q_d k_d|;
//   then every normalised weight moves by a factor within e^(+-2 delta), and its rounding and V's
//   by (1 +- u)^2 more: each output element by at most (e^(2 delta) (1 + u)^2 - 1) max |v|.
// - kBf16Qk (q and k rounded, V stored): what bf16_dot computed before its PV was bf16; it stays
//   within 2e-5 of the f32 path's own arithmetic, which the test uses to show that PV changed.
enum class Operands { kStored, kBf16, kBf16Qk };
struct Reference {
  std::vector<float> out;
  std::vector<double> tol;  // [n_heads]
};

Reference reference(const Kv& kv, const float* q, int32_t n_heads, int64_t b, int64_t e,
                    float scale, Operands ops) {
  const auto op = [ops](float x) { return ops != Operands::kStored ? bf16(x) : (double)x; };
  // INT8 K rows with head_dim % 16 == 0 enter as their integers (exact in bf16), the row's scale
  // applied after, as in the f32 path; other INT8 rows are decoded (scaled) first. INT8 V rows
  // always enter as their integers, their scale in the weight (rounded with it).
  const bool k_exact = kv.view.dtype == KvDtype::kInt8 && kv.view.head_dim % 16 == 0;
  const bool v_exact = kv.view.dtype == KvDtype::kInt8 || ops != Operands::kBf16;
  const double u = std::ldexp(1.0, -8);
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
    std::vector<double> acc(hd, 0.0), abs_acc(hd, 0.0);
    for (int64_t p = b; p < e; ++p) {
      const float* row = vs[h / group].data() + (p - b) * hd;
      for (int32_t i = 0; i < hd; ++i) {
        const double v = v_exact ? (double)row[i] : bf16(row[i]);
        acc[i] += s[p - b] * v;
        abs_acc[i] += s[p - b] * std::fabs(v);
        v_max = std::max(v_max, std::fabs((double)row[i]));
      }
    }
    for (int32_t i = 0; i < hd; ++i) r.out[h * hd + i] = (float)(acc[i] / sum);
    const double delta = scale *
                         (std::ldexp(1.0, -7) + std::ldexp(1.0, -16) + hd * std::ldexp(1.0, -24)) *
                         abs_dot_max;
    const double weighted_abs_v = *std::max_element(abs_acc.begin(), abs_acc.end()) / sum;
    r.tol[h] = ops == Operands::kStored ? (std::exp(2.0 * delta) * (1 + u) * (1 + u) - 1) * v_max
               : ops == Operands::kBf16 ? u * weighted_abs_v
                                        : 0.0;
    r.tol[h] += 2e-5;
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
// dims with and without a 16-element tail, causal and windowed ranges (odd starts and ends: a
// position pairs with one the query does not attend): a tile of 20 queries equals each query
// alone, the split equals attention, all bit for bit; each is within the weights' bf16 rounding
// of float64 on bf16-rounded operands and within the bf16 bound of float64 on the stored ones,
// and differs from the f32 path and from bf16 q.k with f32 PV (the products really are bf16).
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
            const auto ref = [&](Operands ops) {
              return reference(kv, one.q, n_heads, one.pos_begin, one.pos_end, scale, ops);
            };
            const Reference want = ref(Operands::kStored), rounded = ref(Operands::kBf16);
            for (int32_t h = 0; h < n_heads; ++h) {
              EXPECT_LE(testing::max_abs_diff(one.out + h * hd, rounded.out.data() + h * hd, hd),
                        rounded.tol[h])
                  << "query " << i << " head " << h;
              EXPECT_LE(testing::max_abs_diff(one.out + h * hd, want.out.data() + h * hd, hd),
                        want.tol[h])
                  << "query " << i << " head " << h;
            }
            EXPECT_GT(
                testing::max_abs_diff(one.out, ref(Operands::kBf16Qk).out.data(), n_heads * hd),
                2e-5)
                << "PV is not bf16, query " << i;
          }
          EXPECT_EQ(std::memcmp(tiled.data(), alone.data(), tiled.size() * sizeof(float)), 0);
          t->attention(queries, n_heads, kv.view, kv.table, {scale}, scratch.data());
          EXPECT_NE(std::memcmp(tiled.data(), alone.data(), tiled.size() * sizeof(float)), 0);
        }
      }
    }
  }
}

// PV pairs positions (2j, 2j + 1); a query that attends only one of them must get nothing from
// the other, even an inf V row that a prefill tile loaded for another query. Queries 0..3 at
// positions p0..p0 + 3 (p0 even) with a window of 301 (first positions s..s + 3, s even): an inf
// V element at s reaches only query 0 and one at p0 + 3 only query 3; query 1 starts at s + 1
// (paired with s) and query 2 ends at p0 + 2 (paired with p0 + 3). Both stay finite, in the tile
// as alone.
TEST(KernelsAttentionBf16, PairedPositionOutsideTheRangeAddsNothingEvenInf) {
  const auto tables = bf16_tables();
  if (tables.empty()) GTEST_SKIP() << "no AVX512_BF16 on this CPU";
  const int32_t hd = 64, gqa = 8, n_heads = kKvHeads * gqa;
  const int64_t p0 = 1000, window = 301, s = p0 + 1 - window;
  ASSERT_EQ(p0 % 2, 0);
  ASSERT_EQ(s % 2, 0);
  for (const KernelTable* t : tables) {
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16}) {
      SCOPED_TRACE(std::string(t->isa) + " " + std::string(kv_dtype_name(dtype)));
      Kv kv(dtype, hd);
      std::vector<float> k(kKvHeads * hd, 0.5f), v(kKvHeads * hd, 1.0f);
      v[3] = INFINITY;  // KV head 0, element 3
      for (int64_t p : {s, p0 + 3})
        kernels_ref().kv_store(kv.view, kv.table, p, k.data(), v.data());
      const auto q = testing::random_floats(4 * n_heads * hd, 21, 3.0f);
      std::vector<float> tiled(4 * n_heads * hd, NAN), alone(tiled);
      std::vector<AttnQuery> queries;
      for (int64_t i = 0; i < 4; ++i) {
        queries.push_back(
            {q.data() + i * n_heads * hd, tiled.data() + i * n_heads * hd, s + i, p0 + i + 1});
      }
      std::vector<float> scratch(attention_scratch_floats(hd), NAN);
      const AttnScores bf16 = {1.0f / 8, 0.0f, nullptr, true};
      t->attention(queries, n_heads, kv.view, kv.table, bf16, scratch.data());
      for (int64_t i = 1; i <= 2; ++i) {
        AttnQuery one = queries[i];
        one.out = alone.data() + i * n_heads * hd;
        t->attention({&one, 1}, n_heads, kv.view, kv.table, bf16, scratch.data());
        const float* got = tiled.data() + i * n_heads * hd;
        EXPECT_TRUE(std::all_of(got, got + n_heads * hd, [](float x) { return std::isfinite(x); }))
            << "query " << i << " in the tile";
        EXPECT_TRUE(
            std::all_of(one.out, one.out + n_heads * hd, [](float x) { return std::isfinite(x); }))
            << "query " << i << " alone";
        EXPECT_EQ(std::memcmp(got, one.out, n_heads * hd * sizeof(float)), 0) << "query " << i;
      }
      EXPECT_FALSE(std::isfinite(tiled[3])) << "query 0 attends the inf at s";
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
