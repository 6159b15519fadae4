// tests/kernels/batch_invariance_test.cc: the property the engine's determinism rests on. The
// matmul output row of token t must be bit-identical (memcmp) whether t is computed alone or in
// a batch of 2..16 tokens at any offset, and whatever the thread count (1..4, each ith run in
// turn).
#include <gtest/gtest.h>

#include <cstring>

#include "kernels_test_util.h"

namespace kvw::kernels {
namespace {

using testing::kWeightTypes;

// Odd row count so that tiles of 4 (and 2) rows leave tails, and a token count that leaves
// token-tile tails for every tile width.
constexpr int64_t kRows = 77;
constexpr int64_t kTokens = 16;

int64_t n_in_for(GgmlType wtype) {
  switch (wtype) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kIQ4_NL:
    case GgmlType::kQ8_0:
    case GgmlType::kMXFP4:
      return 544;  // 17 blocks: also exercises the odd-block tail of the AVX-512 path
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 516;  // n_in % 16 == 4: scalar tails
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kIQ4_XS:
      return 768;  // a 512-element chunk and a 256-element one
    default:
      return 512;
  }
}

TEST(KernelsBatchInvariance, MatmulRowsAreBitIdenticalAloneInBatchesAndAcrossThreadCounts) {
  for (const KernelTable* t : available_kernel_tables()) {
    for (GgmlType wtype : kWeightTypes) {
      SCOPED_TRACE(std::string(t->isa) + " " + testing::type_name(wtype));
      const int64_t n_in = n_in_for(wtype);
      const auto w = testing::make_weights(wtype, kRows, n_in, 21);
      const auto x = testing::random_floats(kTokens * n_in, 22);

      // Each token alone, one thread.
      std::vector<float> alone(kTokens * kRows);
      for (int64_t tok = 0; tok < kTokens; ++tok) {
        const auto xq = testing::quantize_act(*t, wtype, x.data() + tok * n_in, 1, n_in);
        const auto y = testing::matmul(*t, wtype, w.data(), kRows, n_in, xq.data(), 1);
        std::memcpy(alone.data() + tok * kRows, y.data(), kRows * sizeof(float));
      }

      std::vector<int64_t> batches;
      for (int64_t b = 1; b <= kTokens; ++b) batches.push_back(b);
      for (int64_t batch : testing::sweep_batches(batches)) {
        for (int nth : testing::sweep_threads(4)) {
          // Batches start at a few offsets so each token lands in different tile positions.
          for (int64_t first : {(int64_t)0, kTokens - batch, (kTokens - batch) / 2}) {
            const float* xb = x.data() + first * n_in;
            const auto xq = testing::quantize_act(*t, wtype, xb, batch, n_in, nth);
            const auto y = testing::matmul(*t, wtype, w.data(), kRows, n_in, xq.data(), batch, nth);
            for (int64_t i = 0; i < batch; ++i) {
              ASSERT_EQ(std::memcmp(y.data() + i * kRows, alone.data() + (first + i) * kRows,
                                    kRows * sizeof(float)),
                        0)
                  << "batch " << batch << " first " << first << " token " << i << " nth " << nth;
            }
          }
        }
      }
    }
  }
}

// Decode-size shapes take the kRows x 1 path, prefill-size ones the token-blocked path; a row
// count > 256 KiB of activations also crosses a token-block boundary for f32 activations.
TEST(KernelsBatchInvariance, LargeBatchCrossesTokenBlocksWithoutChangingRows) {
  const int64_t n_rows = 40, n_in = 2048, n_tokens = 40;  // 40 x 8 KiB f32 rows > 256 KiB
  for (const KernelTable* t : available_kernel_tables()) {
    for (GgmlType wtype : {GgmlType::kF16, GgmlType::kQ8_0}) {
      SCOPED_TRACE(std::string(t->isa) + " " + testing::type_name(wtype));
      const auto w = testing::make_weights(wtype, n_rows, n_in, 23);
      const auto x = testing::random_floats(n_tokens * n_in, 24);
      const auto xq = testing::quantize_act(*t, wtype, x.data(), n_tokens, n_in);
      const auto y = testing::matmul(*t, wtype, w.data(), n_rows, n_in, xq.data(), n_tokens, 2);
      for (int64_t tok = 0; tok < n_tokens; ++tok) {
        const auto xq1 = testing::quantize_act(*t, wtype, x.data() + tok * n_in, 1, n_in);
        const auto y1 = testing::matmul(*t, wtype, w.data(), n_rows, n_in, xq1.data(), 1);
        ASSERT_EQ(std::memcmp(y.data() + tok * n_rows, y1.data(), n_rows * sizeof(float)), 0)
            << "token " << tok;
      }
    }
  }
}

// Packed Q8_0/Q4_0/Q5_0/IQ4_NL weights: 200 rows = 25 groups (not a multiple of 16, so a thread
// range ends mid-pair of groups) and 205 = 25 groups + 5 GGUF rows; 16 tokens cover every tile
// width (4, 6, 12) with tails; n_in 8192 makes the token block (256 KiB / 10.5 KiB rows) 24 tokens,
// which 40 tokens cross. Packed F32/F16/BF16: 200 rows = 12 groups of 16 + 8 GGUF rows, and
// n_in 8192 gives 30-token blocks on AVX2 (1 MiB / 32 KiB rows, whole 6-token tiles) and 48 on
// AVX-512 (at least 4 tiles of 12; packed_matmul_test crosses that one). Threads run one after
// another here, so they share one scratch of packed_scratch_bytes.
std::vector<float> packed_matmul(const KernelTable& t, GgmlType wtype, const uint8_t* w,
                                 int64_t n_rows, int64_t n_in, const uint8_t* xq, int64_t n_tokens,
                                 int nth) {
  std::vector<float> y(n_tokens * n_rows, std::nanf(""));
  std::vector<float> scratch(packed_scratch_bytes(wtype, n_in, n_tokens) / sizeof(float));
  for (int ith = 0; ith < nth; ++ith)
    t.matmul_packed(wtype, w, n_rows, n_in, xq, n_tokens, y.data(), ith, nth, scratch.data());
  return y;
}

// Where a batch starts in the tokens: first, last and middle; under the sanitizers only the
// middle (an offset start that is neither edge), as the other sweeps are reduced.
std::vector<int64_t> batch_starts(int64_t n_tokens, int64_t batch) {
  if (testing::reduced_sweep()) return {(n_tokens - batch) / 2};
  return {0, n_tokens - batch, (n_tokens - batch) / 2};
}

TEST(KernelsBatchInvariance, PackedMatmulRowsAreBitIdenticalAloneInBatchesAndAcrossThreads) {
  struct Case {
    int64_t n_rows, n_in, n_tokens;
    std::vector<int64_t> batches;
  };
  const Case cases[] = {{200, 544, 16, {1, 2, 3, 4, 5, 6, 7, 11, 12, 13, 16}},
                        {205, 256, 16, {1, 3, 9, 12, 15, 16}},
                        {40, 8192, 40, {25, 37, 40}}};
  for (const KernelTable* t : testing::sweep_tables()) {
    for (GgmlType wtype :
         {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
          GgmlType::kIQ4_NL, GgmlType::kMXFP4, GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16}) {
      for (const Case& c : cases) {
        // Q4_1/Q5_0/Q5_1/IQ4_NL/MXFP4 differ from Q4_0 only inside a block (the token walk is
        // shared): under the sanitizers, where CI's time is short, their first case is enough.
        const bool nibble_variant = wtype == GgmlType::kQ4_1 || wtype == GgmlType::kQ5_0 ||
                                    wtype == GgmlType::kQ5_1 || wtype == GgmlType::kIQ4_NL ||
                                    wtype == GgmlType::kMXFP4;
        if (testing::reduced_sweep() && nibble_variant && &c != &cases[0]) continue;
        SCOPED_TRACE(std::string(t->isa) + " " + testing::type_name(wtype) + " rows " +
                     std::to_string(c.n_rows) + " n_in " + std::to_string(c.n_in));
        auto w = testing::make_weights(wtype, c.n_rows, c.n_in, 25);
        t->pack(wtype, w.data(), w.data(), c.n_rows, c.n_in);
        const auto x = testing::random_floats(c.n_tokens * c.n_in, 26);
        std::vector<float> alone(c.n_tokens * c.n_rows);
        for (int64_t tok = 0; tok < c.n_tokens; ++tok) {
          const auto xq = testing::quantize_act(*t, wtype, x.data() + tok * c.n_in, 1, c.n_in);
          const auto y = packed_matmul(*t, wtype, w.data(), c.n_rows, c.n_in, xq.data(), 1, 1);
          std::memcpy(alone.data() + tok * c.n_rows, y.data(), c.n_rows * sizeof(float));
        }
        for (int64_t batch : testing::sweep_batches(c.batches)) {
          for (int nth : testing::sweep_threads(3)) {
            for (int64_t first : batch_starts(c.n_tokens, batch)) {
              const float* xb = x.data() + first * c.n_in;
              const auto xq = testing::quantize_act(*t, wtype, xb, batch, c.n_in, nth);
              const auto y =
                  packed_matmul(*t, wtype, w.data(), c.n_rows, c.n_in, xq.data(), batch, nth);
              for (int64_t i = 0; i < batch; ++i) {
                ASSERT_EQ(
                    std::memcmp(y.data() + i * c.n_rows, alone.data() + (first + i) * c.n_rows,
                                c.n_rows * sizeof(float)),
                    0)
                    << "batch " << batch << " first " << first << " token " << i << " nth " << nth;
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvw::kernels
