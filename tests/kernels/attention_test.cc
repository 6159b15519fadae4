// tests/kernels/attention_test.cc: paged attention of every table against a naive two-pass
// softmax in float64 (every KV dtype, GQA ratios 1/2/4, block_size 16, scattered block ids,
// full ranges and windows), tiles of queries against each query alone (bit for bit), and
// kv_store of every table against ref byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/half.h"
#include "kernels_test_util.h"
#include "paged_kv_layer.h"

namespace kvw::kernels {
namespace {

constexpr int32_t kBlockSize = 16;
constexpr int32_t kNumBlocks = 12;
constexpr int32_t kKvHeads = 2;
// Positions 0..95 live in these arena blocks, deliberately out of order.
const std::vector<uint32_t> kBlockTable = {7, 2, 9, 0, 11, 4};

// One layer's paged K/V and a view of it.
struct KvArena {
  KvArena(KvDtype dtype, int32_t head_dim)
      : view(testing::paged_kv_view(dtype, head_dim, kKvHeads, kBlockSize, kNumBlocks, &buf)),
        elem(kv_elem_bytes(dtype)) {}
  // K (value false) or V rows [pos_begin, pos_end) of one KV head, decoded to float.
  std::vector<float> rows(bool value, int64_t pos_begin, int64_t pos_end, int32_t kv_head) const {
    std::vector<float> out((pos_end - pos_begin) * view.head_dim);
    for (int64_t p = pos_begin; p < pos_end; ++p) {
      kv_load_row(view, value, kBlockTable, p, kv_head,
                  out.data() + (p - pos_begin) * view.head_dim);
    }
    return out;
  }
  std::vector<uint8_t> buf;  // declared first: the view points into it
  KvLayerView view;
  int64_t elem;
};

void fill(const KernelTable& t, KvArena& arena, int64_t n_pos, uint32_t seed) {
  const int32_t hd = arena.view.head_dim;
  const auto k = testing::random_floats(n_pos * kKvHeads * hd, seed);
  const auto v = testing::random_floats(n_pos * kKvHeads * hd, seed + 1);
  for (int64_t p = 0; p < n_pos; ++p) {
    t.kv_store(arena.view, kBlockTable, p, k.data() + p * kKvHeads * hd,
               v.data() + p * kKvHeads * hd);
  }
}

// Two-pass softmax over the stored (possibly f16-rounded) K/V, float64, with the variants of
// AttnScores: soft-capped logits, and a sink logit per head in the denominator.
std::vector<float> naive_attention(const KvArena& a, const std::vector<float>& q, int32_t n_heads,
                                   int64_t pos_begin, int64_t pos_end, AttnScores sc) {
  const int32_t hd = a.view.head_dim;
  const int32_t group = n_heads / kKvHeads;
  std::vector<float> out(n_heads * hd);
  // Rows decoded once per KV head: decoding a whole row per element read made this oracle
  // hd times slower, most of the attention tests' minute under ASan.
  std::vector<std::vector<float>> k(kKvHeads), v(kKvHeads);
  for (int32_t g = 0; g < kKvHeads; ++g) {
    k[g] = a.rows(false, pos_begin, pos_end, g);
    v[g] = a.rows(true, pos_begin, pos_end, g);
  }
  for (int32_t h = 0; h < n_heads; ++h) {
    const float* kh = k[h / group].data();
    const float* vh = v[h / group].data();
    std::vector<double> s;
    for (int64_t p = pos_begin; p < pos_end; ++p) {
      double dot = 0.0;
      for (int32_t i = 0; i < hd; ++i) dot += (double)q[h * hd + i] * kh[(p - pos_begin) * hd + i];
      double x = dot * sc.scale;
      if (sc.softcap > 0.0f) x = sc.softcap * std::tanh(x / sc.softcap);
      s.push_back(x);
    }
    double mx = sc.sinks != nullptr ? sc.sinks[h] : -INFINITY, sum = 0.0;
    for (double x : s) mx = std::fmax(mx, x);
    for (double& x : s) sum += (x = std::exp(x - mx));
    if (sc.sinks != nullptr) sum += std::exp(sc.sinks[h] - mx);
    for (int32_t i = 0; i < hd; ++i) {
      double acc = 0.0;
      for (int64_t p = pos_begin; p < pos_end; ++p)
        acc += s[p - pos_begin] * vh[(p - pos_begin) * hd + i];
      out[h * hd + i] = (float)(acc / sum);
    }
  }
  return out;
}

struct Case {
  KvDtype dtype;
  int32_t gqa;  // query heads per KV head
  int32_t head_dim;
  int64_t pos_begin;
  int64_t pos_end;
};

TEST(KernelsAttention, MatchesTwoPassSoftmaxForEveryTable) {
  std::vector<Case> cases;
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8}) {
    // 7: a run of four pairs and a remainder of three; 8: one run of eight (TinyLlama's group,
    // whose decode accumulates V for all eight pairs at once and runs the 8-row softmax).
    for (int32_t gqa : {1, 2, 4, 7, 8}) {
      cases.push_back({dtype, gqa, 64, 0, 96});   // all six blocks
      cases.push_back({dtype, gqa, 64, 0, 1});    // first token only
      cases.push_back({dtype, gqa, 64, 23, 71});  // sliding window, starts mid-block
      cases.push_back({dtype, gqa, 40, 5, 50});   // head_dim with a non-multiple-of-16 tail
    }
  }
  for (const KernelTable* t : available_kernel_tables()) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(t->isa) + " " + std::string(kv_dtype_name(c.dtype)) + " gqa " +
                   std::to_string(c.gqa) + " hd " + std::to_string(c.head_dim) + " [" +
                   std::to_string(c.pos_begin) + "," + std::to_string(c.pos_end) + ")");
      KvArena arena(c.dtype, c.head_dim);
      fill(kernels_ref(), arena, 96, 31);
      const int32_t n_heads = kKvHeads * c.gqa;
      // Scale q up so that the softmax is peaked and the running max really moves.
      const auto q = testing::random_floats(n_heads * c.head_dim, 33, 3.0f);
      const float scale = 1.0f / std::sqrt((float)c.head_dim);
      std::vector<float> out(n_heads * c.head_dim, NAN);
      std::vector<float> scratch(attention_scratch_floats(c.head_dim), NAN);
      const AttnQuery query = {q.data(), out.data(), c.pos_begin, c.pos_end};
      t->attention({&query, 1}, n_heads, arena.view, kBlockTable, {scale}, scratch.data());
      const auto want = naive_attention(arena, q, n_heads, c.pos_begin, c.pos_end, {scale});
      EXPECT_LE(testing::max_abs_diff(out.data(), want.data(), (int64_t)want.size()), 2e-5);
    }
  }
}

TEST(KernelsAttention, SingleHeadGqaGroupsEqualHeadsComputedSeparately) {
  // A query head's result must not depend on its siblings in the GQA group.
  const int32_t hd = 64, gqa = 4, n_heads = kKvHeads * gqa;
  for (const KernelTable* t : available_kernel_tables()) {
    KvArena arena(KvDtype::kF16, hd);
    fill(*t, arena, 80, 41);
    const auto q = testing::random_floats(n_heads * hd, 43);
    std::vector<float> all(n_heads * hd), scratch(attention_scratch_floats(hd));
    const AttnQuery query = {q.data(), all.data(), 0, 80};
    t->attention({&query, 1}, n_heads, arena.view, kBlockTable, {0.125f}, scratch.data());
    // Same query repeated in every head of the group: all rows of a group must be equal bits.
    std::vector<float> q_same(q);
    for (int32_t h = 0; h < n_heads; ++h) {
      std::memcpy(q_same.data() + h * hd, q.data() + (h / gqa) * gqa * hd, hd * sizeof(float));
    }
    std::vector<float> same(n_heads * hd);
    const AttnQuery query_same = {q_same.data(), same.data(), 0, 80};
    t->attention({&query_same, 1}, n_heads, arena.view, kBlockTable, {0.125f}, scratch.data());
    for (int32_t h = 0; h < n_heads; ++h) {
      EXPECT_EQ(std::memcmp(same.data() + h * hd, all.data() + (h / gqa) * gqa * hd, hd * 4), 0)
          << t->isa << " head " << h;
    }
  }
}

// A tile of consecutive query tokens (prefill) must give each query the same bits as attending
// alone (decode), for every KV dtype, causal and sliding-window ranges, tiles that cross chunk
// and block boundaries, more queries than one pass takes, and head_dims with 8- and 1-wide tails.
TEST(KernelsAttention, TileOfQueriesEqualsEachQueryAloneBitForBit) {
  for (const KernelTable* t : available_kernel_tables()) {
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8}) {
      for (int32_t hd : {64, 40, 44}) {
        // gqa 1: the pairs grouped are different queries; 6: four heads and then two; 8: a
        // decode of eight pairs (one V pass, 8-row softmax) against tiles of 16-pair batches.
        for (auto [window, gqa] :
             {std::pair<int64_t, int32_t>{0, 2}, {21, 2}, {0, 1}, {21, 6}, {0, 8}}) {
          SCOPED_TRACE(std::string(t->isa) + " " + std::string(kv_dtype_name(dtype)) + " hd " +
                       std::to_string(hd) + " window " + std::to_string(window) + " gqa " +
                       std::to_string(gqa));
          KvArena arena(dtype, hd);
          fill(kernels_ref(), arena, 96, 61);
          const int32_t n_heads = kKvHeads * gqa;
          const int64_t first = 29, n_q = 37;  // positions 29..65
          const auto q = testing::random_floats(n_q * n_heads * hd, 63, 3.0f);
          std::vector<float> tiled(n_q * n_heads * hd, NAN), alone(n_q * n_heads * hd, NAN);
          std::vector<AttnQuery> queries;
          for (int64_t i = 0; i < n_q; ++i) {
            const int64_t pos = first + i;
            const int64_t begin = window > 0 ? std::max<int64_t>(0, pos + 1 - window) : 0;
            queries.push_back(
                {q.data() + i * n_heads * hd, tiled.data() + i * n_heads * hd, begin, pos + 1});
          }
          std::vector<float> scratch(attention_scratch_floats(hd), NAN);
          const float scale = 1.0f / std::sqrt((float)hd);
          t->attention(queries, n_heads, arena.view, kBlockTable, {scale}, scratch.data());
          for (int64_t i = 0; i < n_q; ++i) {
            AttnQuery one = queries[i];
            one.out = alone.data() + i * n_heads * hd;
            t->attention({&one, 1}, n_heads, arena.view, kBlockTable, {scale}, scratch.data());
            const auto want =
                naive_attention(arena, std::vector<float>(one.q, one.q + n_heads * hd), n_heads,
                                one.pos_begin, one.pos_end, {scale});
            EXPECT_LE(testing::max_abs_diff(one.out, want.data(), n_heads * hd), 2e-5)
                << "query at " << first + i;
          }
          EXPECT_EQ(std::memcmp(tiled.data(), alone.data(), tiled.size() * sizeof(float)), 0);
        }
      }
    }
  }
}

// A prefill tile deep in its context as the model calls it (16 queries x a KV head's 8 query
// heads): the chunks every query attends in full, which the AVX-512 table scores and accumulates
// several at a time, must give each query the same bits as attending alone (one chunk at a time),
// with and without a softcap or a window (whose tile has both kinds of chunk), and stay within
// rounding of the float64 oracle.
TEST(KernelsAttention, DeepPrefillTileEqualsEachQueryAloneBitForBit) {
  const int32_t hd = 64, gqa = 8, n_heads = kKvHeads * gqa;
  const int64_t first = 80, n_q = 16;  // positions 80..95: chunks 0..63 attended by all
  for (const KernelTable* t : available_kernel_tables()) {
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8}) {
      for (auto [softcap, window] : {std::pair<float, int64_t>{0.0f, 0}, {5.0f, 0}, {0.0f, 60}}) {
        SCOPED_TRACE(std::string(t->isa) + " " + std::string(kv_dtype_name(dtype)) + " softcap " +
                     std::to_string(softcap) + " window " + std::to_string(window));
        KvArena arena(dtype, hd);
        fill(kernels_ref(), arena, 96, 81);
        const auto q = testing::random_floats(n_q * n_heads * hd, 83, 3.0f);
        std::vector<float> tiled(n_q * n_heads * hd, NAN), alone(n_q * n_heads * hd, NAN);
        std::vector<AttnQuery> queries;
        for (int64_t i = 0; i < n_q; ++i) {
          const int64_t begin = window > 0 ? first + i + 1 - window : 0;
          queries.push_back(
              {q.data() + i * n_heads * hd, tiled.data() + i * n_heads * hd, begin, first + i + 1});
        }
        std::vector<float> scratch(attention_scratch_floats(hd), NAN);
        const AttnScores sc = {1.0f / std::sqrt((float)hd), softcap};
        t->attention(queries, n_heads, arena.view, kBlockTable, sc, scratch.data());
        for (int64_t i = 0; i < n_q; ++i) {
          AttnQuery one = queries[i];
          one.out = alone.data() + i * n_heads * hd;
          t->attention({&one, 1}, n_heads, arena.view, kBlockTable, sc, scratch.data());
          if (i != 0 && i != n_q - 1) continue;
          const auto want = naive_attention(arena, std::vector<float>(one.q, one.q + n_heads * hd),
                                            n_heads, one.pos_begin, one.pos_end, sc);
          EXPECT_LE(testing::max_abs_diff(one.out, want.data(), n_heads * hd), 2e-5) << i;
        }
        EXPECT_EQ(std::memcmp(tiled.data(), alone.data(), tiled.size() * sizeof(float)), 0);
      }
    }
  }
}

// Gemma-2's soft-capped scores and gpt-oss's sinks in every table: within float rounding of the
// float64 two-pass softmax with the same variant, far from the plain softmax (so the variant is
// really applied), and a tile of queries equal to each query alone bit for bit (prefill tiles,
// chunked prefill and decode agree). Sinks are large enough to take a real share of the mass,
// a cap small enough (5) that tanh bends the scores q x 3 gives.
TEST(KernelsAttention, SoftcapAndSinksMatchTwoPassSoftmaxAndTilesEqualAlone) {
  const int32_t gqa = 4, n_heads = kKvHeads * gqa;
  std::vector<float> sinks(n_heads);
  for (int32_t h = 0; h < n_heads; ++h) sinks[h] = 0.5f * (float)h - 1.0f;
  for (const KernelTable* t : available_kernel_tables()) {
    for (KvDtype dtype : {KvDtype::kF16, KvDtype::kInt8}) {
      // 64 and 128: the AVX-512 decode's compile-time head_dims; 48 its run-time one.
      for (int32_t hd : {64, 128, 48, 40}) {
        for (int variant = 0; variant < 3; ++variant) {
          const float scale = 1.0f / std::sqrt((float)hd);
          const AttnScores sc = {scale, variant != 1 ? 5.0f : 0.0f,
                                 variant != 0 ? sinks.data() : nullptr};
          SCOPED_TRACE(std::string(t->isa) + " " + kv_dtype_name(dtype) + " hd " +
                       std::to_string(hd) + " softcap " + std::to_string(sc.softcap) +
                       (sc.sinks ? " sinks" : ""));
          KvArena arena(dtype, hd);
          fill(kernels_ref(), arena, 96, 71);
          const int64_t first = 40, n_q = 9;  // positions 40..48; odd ones windowed (21, mid-chunk)
          const auto q = testing::random_floats(n_q * n_heads * hd, 73, 3.0f);
          std::vector<float> tiled(n_q * n_heads * hd, NAN), alone(n_q * n_heads * hd, NAN);
          std::vector<AttnQuery> queries;
          for (int64_t i = 0; i < n_q; ++i) {
            const int64_t begin = i % 2 ? std::max<int64_t>(0, first + i + 1 - 21) : 0;
            queries.push_back({q.data() + i * n_heads * hd, tiled.data() + i * n_heads * hd, begin,
                               first + i + 1});
          }
          std::vector<float> scratch(attention_scratch_floats(hd), NAN);
          t->attention(queries, n_heads, arena.view, kBlockTable, sc, scratch.data());
          double moved = 0.0;
          for (int64_t i = 0; i < n_q; ++i) {
            AttnQuery one = queries[i];
            one.out = alone.data() + i * n_heads * hd;
            t->attention({&one, 1}, n_heads, arena.view, kBlockTable, sc, scratch.data());
            const std::vector<float> qi(one.q, one.q + n_heads * hd);
            const auto want = naive_attention(arena, qi, n_heads, one.pos_begin, one.pos_end, sc);
            EXPECT_LE(testing::max_abs_diff(one.out, want.data(), n_heads * hd), 2e-5) << i;
            if (i > 1) continue;
            const auto plain =
                naive_attention(arena, qi, n_heads, one.pos_begin, one.pos_end, {scale});
            moved = std::max(moved, testing::max_abs_diff(one.out, plain.data(), n_heads * hd));
          }
          EXPECT_GT(moved, 1e-2) << "the variant did not change the result";
          EXPECT_EQ(std::memcmp(tiled.data(), alone.data(), tiled.size() * sizeof(float)), 0);
        }
      }
    }
  }
}

TEST(KernelsKvStore, EveryTableWritesTheSameBytesAsRefAndOnlyTheSlot) {
  for (const KernelTable* t : available_kernel_tables()) {
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8}) {
      for (int32_t hd : {64, 44}) {
        SCOPED_TRACE(std::string(t->isa) + " hd " + std::to_string(hd));
        KvArena want(dtype, hd), got(dtype, hd);
        fill(kernels_ref(), want, 50, 51);
        fill(*t, got, 50, 51);
        EXPECT_EQ(want.buf, got.buf);
        // Position 50 was never written: its slot still holds the fill pattern.
        EXPECT_EQ(got.buf[kBlockTable[50 / kBlockSize] * got.view.block_stride +
                          (50 % kBlockSize) * hd * got.elem],
                  0xAB);
      }
    }
  }
}

}  // namespace
}  // namespace kvw::kernels
