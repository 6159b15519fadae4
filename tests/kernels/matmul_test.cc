// tests/kernels/matmul_test.cc: quantize_act and matmul of every table and weight type against
// the scalar ref table, and the ref table against a float64 dot product of the dequantised
// operands (which pins down the block layouts).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <span>

#include "gguf/quant_blocks.h"
#include "kernels/kernels_internal.h"
#include "kernels_test_util.h"

namespace kvw::kernels {
namespace {

using testing::kWeightTypes;

struct Shape {
  int64_t n_rows;
  int64_t n_in;
  int64_t n_tokens;
};

const Shape kShapes[] = {{16, 256, 1}, {37, 512, 3}, {64, 768, 17}, {129, 256, 17}, {5, 1024, 1}};

// Activations in float as the kernel sees them (dequantised Q8_0/Q8_K, or the f32 copy).
std::vector<float> dequantize_act(GgmlType wtype, const std::vector<uint8_t>& xq, int64_t n_tokens,
                                  int64_t n_in) {
  std::vector<float> x(n_tokens * n_in);
  const int64_t rb = act_row_bytes(wtype, n_in);
  for (int64_t t = 0; t < n_tokens; ++t) {
    dequantize_row(act_type(wtype), xq.data() + t * rb, x.data() + t * n_in, n_in);
  }
  return x;
}

// How far each activation format may be from the f32 activations (NMSE).
double act_nmse_bound(GgmlType format) {
  if (format == GgmlType::kQ8_K) return 3e-4;
  if (format == GgmlType::kQ8_0) return 1e-4;
  return 0.0;  // f32 copy
}

TEST(KernelsMatmul, RefMatchesFloat64DotOfDequantisedOperands) {
  const KernelTable& ref = kernels_ref();
  for (GgmlType wtype : kWeightTypes) {
    for (const Shape& s : kShapes) {
      SCOPED_TRACE(testing::type_name(wtype) + " rows " + std::to_string(s.n_rows) + " n_in " +
                   std::to_string(s.n_in) + " tokens " + std::to_string(s.n_tokens));
      const auto w = testing::make_weights(wtype, s.n_rows, s.n_in, 1);
      const auto x = testing::random_floats(s.n_tokens * s.n_in, 2);
      const auto xq = testing::quantize_act(ref, wtype, x.data(), s.n_tokens, s.n_in);
      const auto y = testing::matmul(ref, wtype, w.data(), s.n_rows, s.n_in, xq.data(), s.n_tokens);

      const auto xd = dequantize_act(wtype, xq, s.n_tokens, s.n_in);
      std::vector<float> wd(s.n_in), expect(s.n_tokens * s.n_rows);
      const int64_t rb = (int64_t)*row_bytes(wtype, s.n_in);
      for (int64_t r = 0; r < s.n_rows; ++r) {
        dequantize_row(wtype, w.data() + r * rb, wd.data(), s.n_in);
        for (int64_t t = 0; t < s.n_tokens; ++t) {
          double sum = 0.0;
          for (int64_t i = 0; i < s.n_in; ++i) sum += (double)wd[i] * xd[t * s.n_in + i];
          expect[t * s.n_rows + r] = (float)sum;
        }
      }
      // Only float rounding separates the two (the integer block dots are exact).
      EXPECT_LT(testing::nmse(y, expect), 1e-10);
      // And the activation format loses little against the unquantised f32 activations
      // (Q8_K shares one scale over 256 elements, so an outlier costs it more than Q8_0).
      EXPECT_LE(testing::nmse(xd, x), act_nmse_bound(act_type(wtype)));
    }
  }
}

TEST(KernelsMatmul, QuantizeActIsBitIdenticalAcrossTables) {
  const int64_t n_tokens = 5, n_in = 768;
  auto x = testing::random_floats(n_tokens * n_in, 3);
  for (int64_t i = 0; i < 32; ++i) x[2 * n_in + i] = 0.0f;  // an all-zero Q8_0 block
  for (const KernelTable* t : available_kernel_tables()) {
    for (GgmlType wtype : kWeightTypes) {
      SCOPED_TRACE(std::string(t->isa) + " " + testing::type_name(wtype));
      const auto want = testing::quantize_act(kernels_ref(), wtype, x.data(), n_tokens, n_in);
      const auto got = testing::quantize_act(*t, wtype, x.data(), n_tokens, n_in, 2);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0);
    }
  }
}

TEST(KernelsMatmul, EveryTableMatchesRef) {
  for (const KernelTable* t : available_kernel_tables()) {
    for (GgmlType wtype : kWeightTypes) {
      for (const Shape& s : kShapes) {
        SCOPED_TRACE(std::string(t->isa) + " " + testing::type_name(wtype) + " rows " +
                     std::to_string(s.n_rows) + " n_in " + std::to_string(s.n_in) + " tokens " +
                     std::to_string(s.n_tokens));
        const auto w = testing::make_weights(wtype, s.n_rows, s.n_in, 4);
        const auto x = testing::random_floats(s.n_tokens * s.n_in, 5);
        const auto xq = testing::quantize_act(kernels_ref(), wtype, x.data(), s.n_tokens, s.n_in);
        const auto want = testing::matmul(kernels_ref(), wtype, w.data(), s.n_rows, s.n_in,
                                          xq.data(), s.n_tokens);
        const auto got =
            testing::matmul(*t, wtype, w.data(), s.n_rows, s.n_in, xq.data(), s.n_tokens, 2);
        // Same integer dots, different float summation order: errors ~1e-7 relative.
        EXPECT_LT(testing::nmse(got, want), 1e-10);
        double max_ref = 0.0;
        for (float v : want) max_ref = std::fmax(max_ref, std::fabs(v));
        EXPECT_LE(testing::max_abs_diff(got.data(), want.data(), (int64_t)want.size()),
                  1e-5 * max_ref);
      }
    }
  }
}

TEST(KernelsMatmul, FloatWeightsHandleNInThatIsNotAMultipleOfTheVectorWidth) {
  const int64_t n_rows = 21, n_in = 300, n_tokens = 4;  // 300 = 18 * 16 + 12
  for (const KernelTable* t : available_kernel_tables()) {
    for (GgmlType wtype : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16}) {
      SCOPED_TRACE(std::string(t->isa) + " " + testing::type_name(wtype));
      const auto w = testing::make_weights(wtype, n_rows, n_in, 6);
      const auto x = testing::random_floats(n_tokens * n_in, 7);
      const auto xq = testing::quantize_act(*t, wtype, x.data(), n_tokens, n_in);
      const auto want =
          testing::matmul(kernels_ref(), wtype, w.data(), n_rows, n_in, xq.data(), n_tokens);
      const auto got = testing::matmul(*t, wtype, w.data(), n_rows, n_in, xq.data(), n_tokens, 3);
      EXPECT_LT(testing::nmse(got, want), 1e-10);
    }
  }
}

TEST(KernelsMatmul, Q8_0HandlesAnOddNumberOfBlocks) {
  const int64_t n_rows = 19, n_in = 544, n_tokens = 3;  // 17 blocks: AVX-512 pairs + 1 tail
  for (const KernelTable* t : available_kernel_tables()) {
    for (GgmlType wtype : {GgmlType::kQ8_0, GgmlType::kQ4_0}) {
      SCOPED_TRACE(std::string(t->isa) + " " + testing::type_name(wtype));
      const auto w = testing::make_weights(wtype, n_rows, n_in, 8);
      const auto x = testing::random_floats(n_tokens * n_in, 9);
      const auto xq = testing::quantize_act(*t, wtype, x.data(), n_tokens, n_in);
      const auto want =
          testing::matmul(kernels_ref(), wtype, w.data(), n_rows, n_in, xq.data(), n_tokens);
      const auto got = testing::matmul(*t, wtype, w.data(), n_rows, n_in, xq.data(), n_tokens, 2);
      EXPECT_LT(testing::nmse(got, want), 1e-10);
    }
  }
}

// The dequantised types share one arithmetic across tables (matmul_dequant), so every table
// gives the ref table's bits, whatever the thread count. 32-element types at the row lengths
// llama-quantize gives them (896: Qwen2.5-0.5B's n_embd, 4864: its n_ff; neither a multiple of
// 256); the 256-element ones at whole, half and odd multiples of the 512-element chunk.
TEST(KernelsMatmul, DequantTypesAreBitIdenticalAcrossTablesAndThreads) {
  const Shape shapes32[] = {{35, 896, 5}, {17, 4864, 2}, {64, 288, 9}};
  const Shape shapes256[] = {{35, 768, 5}, {17, 2816, 2}, {64, 256, 9}};
  for (GgmlType wtype : testing::kDequantTypes) {
    const bool k256 = type_traits(wtype).block_elems == 256;
    const std::span<const Shape> shapes = k256 ? std::span<const Shape>(shapes256) : shapes32;
    EXPECT_FALSE(kernels_ref().packs(wtype, 64, 896)) << testing::type_name(wtype);
    EXPECT_EQ(act_type(wtype), GgmlType::kF32);
    for (const Shape& s : shapes) {
      const auto w = testing::make_weights(wtype, s.n_rows, s.n_in, 12);
      const auto x = testing::random_floats(s.n_tokens * s.n_in, 13);
      const auto xq = testing::quantize_act(kernels_ref(), wtype, x.data(), s.n_tokens, s.n_in);
      const auto want =
          testing::matmul(kernels_ref(), wtype, w.data(), s.n_rows, s.n_in, xq.data(), s.n_tokens);
      for (const KernelTable* t : available_kernel_tables()) {
        for (int nth : {1, 2, 3}) {
          SCOPED_TRACE(std::string(t->isa) + " " + testing::type_name(wtype) + " n_in " +
                       std::to_string(s.n_in) + " nth " + std::to_string(nth));
          EXPECT_EQ(t->packs(wtype, s.n_rows, s.n_in), false);
          const auto got =
              testing::matmul(*t, wtype, w.data(), s.n_rows, s.n_in, xq.data(), s.n_tokens, nth);
          ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
        }
      }
    }
  }
}

// One token x unpacked Q6_K (a tied output head): the avx512vnni table's GEMV must give the
// AVX2 tile's bits (every x86 table's unpacked K-quant arithmetic), also at the extremes: quants
// 0 and 63, scales -128 and 127, activations -128 and 127, and past the n_in it takes (16640:
// 65 super-blocks, the fallback), on thread splits that leave rows outside 16-row ranges.
TEST(KernelsMatmul, OneTokenUnpackedQ6_KGivesTheAvx2TileBitsInEveryX86Table) {
  const KernelTable* avx2 = nullptr;
  for (const KernelTable* t : available_kernel_tables()) {
    if (std::strcmp(t->isa, "avx2") == 0) avx2 = t;
  }
  if (avx2 == nullptr) GTEST_SKIP() << "no AVX2 on this CPU";
  const GgmlType wtype = GgmlType::kQ6_K;
  const Shape shapes[] = {{77, 1024, 1}, {40, 256, 1}, {19, 16640, 1}};
  for (const Shape& s : shapes) {
    for (bool extreme : {false, true}) {
      auto w = testing::make_weights(wtype, s.n_rows, s.n_in, 41);
      const auto x = testing::random_floats(s.n_in, 42);
      auto xq = testing::quantize_act(kernels_ref(), wtype, x.data(), 1, s.n_in);
      const int64_t nsb = s.n_in / kQK_K;
      if (extreme) {
        for (int64_t i = 0; i < s.n_rows * nsb; ++i) {
          auto* q = reinterpret_cast<BlockQ6_K*>(w.data()) + i;
          std::memset(q->ql, i % 2 ? 0xFF : 0xF0, sizeof(q->ql));
          std::memset(q->qh, i % 3 ? 0xFF : 0x00, sizeof(q->qh));
          for (int g = 0; g < 16; ++g) q->scales[g] = (int8_t)((g + i) % 3 == 0 ? -128 : 127);
        }
        for (int64_t b = 0; b < nsb; ++b) {
          auto& xb = reinterpret_cast<BlockQ8_K*>(xq.data())[b];
          for (int e = 0; e < kQK_K; ++e) xb.qs[e] = (int8_t)((e / 16 + b) % 3 ? -128 : 127);
          for (int g = 0; g < kQK_K / 16; ++g) xb.bsums[g] = (int16_t)(16 * xb.qs[16 * g]);
        }
      }
      const auto want = testing::matmul(*avx2, wtype, w.data(), s.n_rows, s.n_in, xq.data(), 1);
      for (const KernelTable* t : available_kernel_tables()) {
        if (std::strcmp(t->isa, "ref") == 0) continue;  // its own summation order
        for (int nth : {1, 2, 3}) {
          SCOPED_TRACE(std::string(t->isa) + " n_in " + std::to_string(s.n_in) + " extreme " +
                       std::to_string(extreme) + " nth " + std::to_string(nth));
          const auto got =
              testing::matmul(*t, wtype, w.data(), s.n_rows, s.n_in, xq.data(), 1, nth);
          ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
        }
      }
    }
  }
}

TEST(KernelsMatmul, ThreadsWriteOnlyTheirOwnRows) {
  const int64_t n_rows = 100, n_in = 256;
  const auto w = testing::make_weights(GgmlType::kQ8_0, n_rows, n_in, 10);
  const auto x = testing::random_floats(n_in, 11);
  for (const KernelTable* t : available_kernel_tables()) {
    const auto xq = testing::quantize_act(*t, GgmlType::kQ8_0, x.data(), 1, n_in);
    std::vector<float> y(n_rows, -1.0f);
    t->matmul(GgmlType::kQ8_0, w.data(), n_rows, n_in, xq.data(), 1, y.data(), 1, 3);
    // nth 3: chunks of 48 rows (34 rounded up to 16): thread 1 owns [48, 96).
    for (int64_t r = 0; r < n_rows; ++r) {
      EXPECT_EQ(y[r] == -1.0f, r < 48 || r >= 96) << t->isa << " row " << r;
    }
  }
}

TEST(KernelsMatmul, SplitRangeIsContiguousAlignedAndCovering) {
  for (int64_t n : {0, 1, 15, 16, 17, 100, 2048, 5632}) {
    for (int nth = 1; nth <= 5; ++nth) {
      int64_t next = 0;
      for (int ith = 0; ith < nth; ++ith) {
        const RowRange r = split_range(n, ith, nth, kRowAlign);
        EXPECT_EQ(r.begin, next);
        EXPECT_LE(r.begin, r.end);
        if (r.end < n) {
          EXPECT_EQ((r.end - r.begin) % kRowAlign, 0);
        }
        next = r.end;
      }
      EXPECT_EQ(next, n);
    }
  }
}

TEST(KernelsDispatch, TablesAreDistinctAndTheChosenOneIsAvailable) {
  const auto tables = available_kernel_tables();
  ASSERT_FALSE(tables.empty());
  EXPECT_STREQ(tables[0]->isa, "ref");
  bool found = false;
  for (const KernelTable* t : tables) found |= (t == &kernels());
  EXPECT_TRUE(found) << kernels().isa;
#if defined(__x86_64__)
  if (std::getenv("KVW_ISA") == nullptr && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma")) {
    EXPECT_GE(tables.size(), 2u);
    EXPECT_STRNE(kernels().isa, "ref");
  }
#endif
}

}  // namespace
}  // namespace kvw::kernels
