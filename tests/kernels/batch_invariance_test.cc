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
    case GgmlType::kQ8_0:
      return 544;  // 17 blocks: also exercises the odd-block tail of the AVX-512 path
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 516;  // n_in % 16 == 4: scalar tails
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

      for (int64_t batch = 1; batch <= kTokens; ++batch) {
        for (int nth = 1; nth <= 4; ++nth) {
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

}  // namespace
}  // namespace kvw::kernels
