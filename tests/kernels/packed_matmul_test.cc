// tests/kernels/packed_matmul_test.cc: the load-time packed GEMM of Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/
// IQ4_NL (kernels/packed.cc), of Q4_K/Q5_K/Q6_K (kernels/packed_kquants.cc) and of F32/F16/BF16
// (kernels/packed_float.cc). Every table's matmul_packed must equal ref::matmul_packed bit for bit
// (same exact int32 block sums and per-block fma, or the same serial fma chain), and stay within
// float rounding of the unpacked ref matmul.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "gguf/quant_blocks.h"
#include "kernels/kernels_internal.h"
#include "kernels_test_util.h"

namespace kvw::kernels {
namespace {

const GgmlType kPackedTypes[] = {
    GgmlType::kQ8_0,   GgmlType::kQ4_0,  GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
    GgmlType::kIQ4_NL, GgmlType::kMXFP4, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K,
    GgmlType::kF32,    GgmlType::kF16,   GgmlType::kBF16};
const GgmlType kKquantTypes[] = {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};
const GgmlType kFloatTypes[] = {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16};

struct Shape {
  int64_t n_rows;
  int64_t n_in;
  int64_t n_tokens;
};

// Rows past the last group of 8 or 16 (37, 129, 203, 33), n_rows not a multiple of 16 (8, 40,
// 200), odd block counts (544 = 17 blocks), token counts around every tile width (4, 6, 12);
// float types also take n_in that is no multiple of 4 (the unrolled loop's tail: 37, 3, 1).
// Long rows (2080 = 65 blocks) with several full 12-token tiles and a tail, on an odd last group
// (40 rows) and on pairs only (48 rows); rows of 8192 whose activations make 24-token L2 blocks.
const Shape kShapes[] = {{8, 32, 1},     {16, 256, 5},   {37, 512, 3},  {40, 544, 7},
                         {64, 768, 17},  {129, 256, 13}, {200, 544, 9}, {203, 64, 25},
                         {48, 2080, 33}, {40, 2080, 19}, {16, 8192, 30}};
// K-quants: n_in in 256-element super-blocks (1, 2, 3, 5), the same row and token edges, the
// AVX-512 12-token pair tiles with 1, 2 or 6 left (13, 14, 30) and 6-token single-group tiles,
// decode over several groups, super-blocks, an odd group and tail rows (37 x 512, 64 x 1280), and
// rows of 32 super-blocks whose 9 KiB Q8_K activations make L2 blocks of 24-27 tokens (a multiple
// of the tile), so 30 tokens walk two.
const Shape kKquantShapes[] = {{8, 256, 1},   {16, 512, 5},  {37, 256, 3},   {40, 768, 7},
                               {64, 256, 13}, {203, 512, 4}, {48, 1280, 25}, {24, 256, 12},
                               {40, 512, 8},  {56, 256, 14}, {37, 512, 1},   {64, 1280, 1},
                               {16, 8192, 30}};
// Float tiles take group pairs (32 rows) and a lone last group (48, 40 + 8 tail rows); rows of
// 8192 make 48-token blocks (the 4-tile minimum), so 50 tokens walk two with a 2-token tile.
const Shape kFloatShapes[] = {{48, 37, 13}, {33, 3, 2},   {16, 1, 12},
                              {32, 5, 1},   {64, 41, 14}, {48, 8192, 50}};

std::vector<uint8_t> packed(const KernelTable& t, GgmlType wtype, const std::vector<uint8_t>& w,
                            int64_t n_rows, int64_t n_in) {
  std::vector<uint8_t> out(w.size());
  t.pack(wtype, w.data(), out.data(), n_rows, n_in);
  return out;
}

// Each thread gets exactly packed_scratch_bytes of scratch followed by a guard that must stay
// as written: the bound the model's workspace is planned with holds for every table.
std::vector<float> matmul_packed(const KernelTable& t, GgmlType wtype, const uint8_t* w,
                                 int64_t n_rows, int64_t n_in, const uint8_t* xq, int64_t n_tokens,
                                 int nth) {
  constexpr size_t kGuard = 256;
  const size_t bytes = (size_t)packed_scratch_bytes(wtype, n_in, n_tokens);
  std::vector<float> y(n_tokens * n_rows, std::nanf(""));
  for (int ith = 0; ith < nth; ++ith) {
    std::vector<float> scratch((bytes + kGuard) / sizeof(float), -7.0f);
    t.matmul_packed(wtype, w, n_rows, n_in, xq, n_tokens, y.data(), ith, nth, scratch.data());
    for (size_t i = bytes / sizeof(float); i < scratch.size(); ++i) {
      if (scratch[i] != -7.0f) {
        ADD_FAILURE() << t.isa << " wrote past packed_scratch_bytes = " << bytes << " (type "
                      << (int)wtype << ", n_in " << n_in << ", " << n_tokens << " tokens)";
        break;
      }
    }
  }
  return y;
}

TEST(KernelsPackedMatmul, PacksQuantsAndFloatsWithAtLeastOneGroup) {
  for (const KernelTable* t : available_kernel_tables()) {
    EXPECT_TRUE(t->packs(GgmlType::kQ8_0, 8, 32)) << t->isa;
    EXPECT_TRUE(t->packs(GgmlType::kQ4_0, 13, 2048)) << t->isa;
    EXPECT_TRUE(t->packs(GgmlType::kQ5_0, 8, 1152)) << t->isa;  // Gemma-3-1B's n_embd
    EXPECT_FALSE(t->packs(GgmlType::kQ5_0, 7, 1152)) << t->isa;
    EXPECT_TRUE(t->packs(GgmlType::kIQ4_NL, 8, 896)) << t->isa;  // Qwen2.5-0.5B's n_embd
    EXPECT_TRUE(t->packs(GgmlType::kQ4_1, 8, 288)) << t->isa;
    EXPECT_TRUE(t->packs(GgmlType::kQ5_1, 8, 288)) << t->isa;
    EXPECT_FALSE(t->packs(GgmlType::kQ5_1, 7, 288)) << t->isa;
    EXPECT_FALSE(t->packs(GgmlType::kQ8_0, 7, 2048)) << t->isa;
    EXPECT_TRUE(t->packs(GgmlType::kMXFP4, 8, 2880)) << t->isa;  // gpt-oss's hidden size
    EXPECT_FALSE(t->packs(GgmlType::kMXFP4, 7, 2880)) << t->isa;
    for (GgmlType k : kKquantTypes) {
      EXPECT_TRUE(t->packs(k, 8, 256)) << t->isa;
      EXPECT_FALSE(t->packs(k, 7, 2048)) << t->isa;
      EXPECT_FALSE(t->packs(k, 64, 288)) << t->isa;  // not whole super-blocks
    }
    for (GgmlType f : kFloatTypes) {
      EXPECT_TRUE(t->packs(f, 16, 3)) << t->isa;
      EXPECT_TRUE(t->packs(f, 64, 2048)) << t->isa;
      EXPECT_FALSE(t->packs(f, 15, 2048)) << t->isa;
    }
  }
}

TEST(KernelsPackedMatmul, InPlacePackingEqualsOutOfPlaceAndKeepsTailRows) {
  for (GgmlType wtype : kPackedTypes) {
    const int64_t n_rows = 21, n_in = 256;  // 2 groups + 5 GGUF rows
    const auto w = testing::make_weights(wtype, n_rows, n_in, 31);
    const auto out = packed(kernels_ref(), wtype, w, n_rows, n_in);
    auto in_place = w;
    kernels_ref().pack(wtype, in_place.data(), in_place.data(), n_rows, n_in);
    EXPECT_EQ(in_place, out);
    const int64_t tail = 16 * (int64_t)*row_bytes(wtype, n_in);
    EXPECT_EQ(std::memcmp(out.data() + tail, w.data() + tail, w.size() - tail), 0);
    EXPECT_NE(std::memcmp(out.data(), w.data(), tail), 0);
  }
}

TEST(KernelsPackedMatmul, EveryTableMatchesPackedRefBitForBitAndUnpackedRefClosely) {
  // Tables that pack and quantise alike get the same reference: it is computed once per distinct
  // (packed weights, activations), the scalar reference being most of this test's time.
  std::map<std::string, std::vector<float>> refs;
  for (const KernelTable* t : testing::sweep_tables()) {
    for (GgmlType wtype : kPackedTypes) {
      std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
      if (is_kquant_type(wtype)) shapes.assign(std::begin(kKquantShapes), std::end(kKquantShapes));
      if (is_float_type(wtype))
        shapes.insert(shapes.end(), std::begin(kFloatShapes), std::end(kFloatShapes));
      for (const Shape& s : shapes) {
        if (!t->packs(wtype, s.n_rows, s.n_in)) continue;  // 8 float rows: no group
        SCOPED_TRACE(std::string(t->isa) + " " + testing::type_name(wtype) + " rows " +
                     std::to_string(s.n_rows) + " n_in " + std::to_string(s.n_in) + " tokens " +
                     std::to_string(s.n_tokens));
        // Weights, activations and both references once per shape; the thread counts must all
        // give the same activations and the same bits.
        const auto w = testing::make_weights(wtype, s.n_rows, s.n_in, 32);
        const auto wp = packed(*t, wtype, w, s.n_rows, s.n_in);
        const auto x = testing::random_floats(s.n_tokens * s.n_in, 33);
        const auto xq1 = testing::quantize_act(*t, wtype, x.data(), s.n_tokens, s.n_in, 1);
        std::string key = std::to_string((int)wtype) + "/" + std::to_string(s.n_rows) + "/" +
                          std::to_string(s.n_tokens) + "/";
        key.append((const char*)wp.data(), wp.size());
        key.append((const char*)xq1.data(), xq1.size());
        auto [it, fresh] = refs.try_emplace(std::move(key));
        std::vector<float>& want = it->second;
        if (fresh) {
          want.resize(s.n_tokens * s.n_rows);
          ref::matmul_packed(wtype, wp.data(), s.n_rows, s.n_in, xq1.data(), s.n_tokens,
                             want.data(), 0, 1);
          const auto unpacked = testing::matmul(kernels_ref(), wtype, w.data(), s.n_rows, s.n_in,
                                                xq1.data(), s.n_tokens);
          EXPECT_LT(testing::nmse(want, unpacked), 1e-10);
        }
        for (int nth : testing::sweep_threads(3)) {
          SCOPED_TRACE("nth " + std::to_string(nth));
          const auto xq = testing::quantize_act(*t, wtype, x.data(), s.n_tokens, s.n_in, nth);
          ASSERT_EQ(xq, xq1);
          const auto got =
              matmul_packed(*t, wtype, wp.data(), s.n_rows, s.n_in, xq.data(), s.n_tokens, nth);
          ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
        }
      }
    }
  }
}

// MXFP4: every code (levels +-12 the largest) under the extreme exponents (0 and 1: denormal
// scales; 254) and a typical one, against activations of +-127: each table equals the packed ref
// bit for bit (packed and unpacked), and the ref equals a float64 dot of gguf's dequantised
// weights with the activations.
TEST(KernelsPackedMatmul, Mxfp4ExtremesMatchTheDequantisedWeights) {
  const int64_t n_rows = 19, n_in = 96, n_tokens = 13;  // 2 groups + 3 tail rows; tile + tail
  const int64_t nb = n_in / 32;
  std::vector<uint8_t> w(n_rows * nb * sizeof(BlockMXFP4));
  const uint8_t exps[] = {0, 1, 127, 120, 254 - 40};
  for (int64_t i = 0; i < n_rows * nb; ++i) {
    auto* b = reinterpret_cast<BlockMXFP4*>(w.data()) + i;
    b->e = exps[i % 5];
    // Mostly +-12 (codes 7 and 15), the worst case for maddubs' int16 sums, and every code.
    for (int j = 0; j < 16; ++j) {
      b->qs[j] = (uint8_t)(i % 3 == 0 ? (j | ((15 - j) << 4)) : ((i + j) % 2 ? 0x7F : 0xF7));
    }
  }
  std::vector<float> x(n_tokens * n_in);
  // Integers with -127 in every block: Q8_0's scale is 1 and its quants are x, exactly.
  for (int64_t i = 0; i < (int64_t)x.size(); ++i)
    x[i] = i % 7 == 0 ? -127.0f : (float)(i % 11 * 25 - 125);
  const auto xq = testing::quantize_act(kernels_ref(), GgmlType::kMXFP4, x.data(), n_tokens, n_in);
  const auto wp = packed(kernels_ref(), GgmlType::kMXFP4, w, n_rows, n_in);
  const auto want = matmul_packed(kernels_ref(), GgmlType::kMXFP4, wp.data(), n_rows, n_in,
                                  xq.data(), n_tokens, 1);
  std::vector<float> wf(n_rows * n_in);
  dequantize_row(GgmlType::kMXFP4, w.data(), wf.data(), n_rows * n_in);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t r = 0; r < n_rows; ++r) {
      // Block by block: within a block every term shares the scale, so its double sum is exact
      // (a running sum would lose a 2^-8 block next to cancelling 2^86 terms).
      double dot = 0.0;
      for (int64_t b = 0; b < nb; ++b) {
        double block = 0.0;
        for (int64_t i = 32 * b; i < 32 * b + 32; ++i) {
          block += (double)wf[r * n_in + i] * x[t * n_in + i];
        }
        dot += block;
      }
      // The int32 block sums are exact; the one rounding is the float accumulation.
      EXPECT_NEAR(want[t * n_rows + r], dot, 1e-6 * std::fabs(dot) + 1e-30) << r << " " << t;
    }
  }
  for (const KernelTable* t : available_kernel_tables()) {
    SCOPED_TRACE(t->isa);
    const auto wpt = packed(*t, GgmlType::kMXFP4, w, n_rows, n_in);
    ASSERT_EQ(wpt, wp);
    for (int nth : {1, 2}) {
      const auto got =
          matmul_packed(*t, GgmlType::kMXFP4, wpt.data(), n_rows, n_in, xq.data(), n_tokens, nth);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
      const auto unpacked =
          testing::matmul(*t, GgmlType::kMXFP4, w.data(), n_rows, n_in, xq.data(), n_tokens);
      EXPECT_EQ(std::memcmp(unpacked.data(), want.data(), got.size() * sizeof(float)), 0);
    }
  }
}

// Extreme quants: weights -128 / 127 against activations of +-127. (q + 128) x x would saturate
// maddubs' int16 pairs; the int32 block sums must stay exact.
TEST(KernelsPackedMatmul, ExtremeQuantsDoNotSaturate) {
  const int64_t n_rows = 16, n_in = 64, n_tokens = 19;  // a full 12-token tile and a tail
  // Q4_1 / Q5_1 as Q4_0 / Q5_0 (their quants are the same unsigned values), mins as quantised.
  auto set_fifth_bits = [](const uint8_t* qs, uint8_t* qh_out) {
    uint32_t qh = 0;
    for (int j = 0; j < 32; ++j) {
      const int nibble = j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
      qh |= (uint32_t)(nibble == 0xF) << j;
    }
    std::memcpy(qh_out, &qh, 4);
  };
  for (GgmlType wtype : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                         GgmlType::kQ5_1, GgmlType::kIQ4_NL}) {
    auto w = testing::make_weights(wtype, n_rows, n_in, 34);
    const int64_t nb = n_in / 32;
    for (int64_t i = 0; i < n_rows * nb; ++i) {
      if (wtype == GgmlType::kQ8_0) {
        auto* b = reinterpret_cast<BlockQ8_0*>(w.data()) + i;
        for (int j = 0; j < 32; ++j) b->qs[j] = (int8_t)((i + j) % 3 == 0 ? -128 : 127);
      } else if (wtype == GgmlType::kQ5_0) {
        // q 15 (nibble 15, fifth bit 1) or -16 (0, 0): 4 maddubs pairs of 31 x 128 per int16.
        auto* b = reinterpret_cast<BlockQ5_0*>(w.data()) + i;
        for (int j = 0; j < 16; ++j) b->qs[j] = (uint8_t)((i + j) % 3 == 0 ? 0x0F : 0xF0);
        set_fifth_bits(b->qs, b->qh);
      } else if (wtype == GgmlType::kQ5_1) {  // q 31 or 0: 4 pairs of 31 x 128 per int16
        auto* b = reinterpret_cast<BlockQ5_1*>(w.data()) + i;
        for (int j = 0; j < 16; ++j) b->qs[j] = (uint8_t)((i + j) % 3 == 0 ? 0x0F : 0xF0);
        set_fifth_bits(b->qs, b->qh);
      } else if (wtype == GgmlType::kQ4_1) {
        auto* b = reinterpret_cast<BlockQ4_1*>(w.data()) + i;
        for (int j = 0; j < 16; ++j) b->qs[j] = (uint8_t)((i + j) % 3 == 0 ? 0x0F : 0xF0);
      } else if (wtype == GgmlType::kIQ4_NL) {
        // Levels -127 (index 0) and 113 (15): |q| x sign(x, q) pairs near 2^15 without VNNI.
        auto* b = reinterpret_cast<BlockIQ4_NL*>(w.data()) + i;
        for (int j = 0; j < 16; ++j) b->qs[j] = (uint8_t)((i + j) % 3 == 0 ? 0x0F : 0xF0);
      } else {
        auto* b = reinterpret_cast<BlockQ4_0*>(w.data()) + i;
        for (int j = 0; j < 16; ++j) b->qs[j] = (uint8_t)((i + j) % 3 == 0 ? 0x0F : 0xF0);
      }
    }
    std::vector<float> x(n_tokens * n_in);
    for (int64_t i = 0; i < (int64_t)x.size(); ++i) x[i] = (i % 5 == 0) ? -1.0f : 1.0f;
    for (const KernelTable* t : available_kernel_tables()) {
      SCOPED_TRACE(std::string(t->isa) + " " + testing::type_name(wtype));
      const auto wp = packed(*t, wtype, w, n_rows, n_in);
      const auto xq = testing::quantize_act(*t, wtype, x.data(), n_tokens, n_in);
      const auto got = matmul_packed(*t, wtype, wp.data(), n_rows, n_in, xq.data(), n_tokens, 1);
      const auto want =
          testing::matmul(kernels_ref(), wtype, w.data(), n_rows, n_in, xq.data(), n_tokens);
      EXPECT_LT(testing::nmse(got, want), 1e-12);
    }
  }
}

// Q5_0, IQ4_NL, Q4_1 and Q5_1 against an independent oracle: gguf's reference dequantisation of the
// weights and of the Q8_0 activations, multiplied in double (a lost or misplaced fifth bit or level
// moves this far beyond rounding), on Gemma-3-1B's 1152-wide rows with a tail row past the groups.
// The GGUF-layout matmul of every table (matrices too small to pack) gives the packed bits exactly,
// so a matrix's result does not depend on whether it was packed.
void expect_matches_dequantised_and_unpacked(GgmlType wtype) {
  const int64_t n_rows = 17, n_in = 1152, n_tokens = 13;
  const auto w = testing::make_weights(wtype, n_rows, n_in, 38);
  const auto x = testing::random_floats(n_tokens * n_in, 39);
  std::vector<float> wf(n_rows * n_in);
  dequantize_row(wtype, w.data(), wf.data(), n_rows * n_in);
  for (const KernelTable* t : available_kernel_tables()) {
    SCOPED_TRACE(std::string(t->isa) + " " + testing::type_name(wtype));
    const auto xq = testing::quantize_act(*t, wtype, x.data(), n_tokens, n_in);
    const int64_t xrb = act_row_bytes(wtype, n_in);
    std::vector<float> oracle(n_tokens * n_rows);
    for (int64_t tok = 0; tok < n_tokens; ++tok) {
      std::vector<float> xf(n_in);
      dequantize_row(GgmlType::kQ8_0, xq.data() + tok * xrb, xf.data(), n_in);
      for (int64_t r = 0; r < n_rows; ++r) {
        double sum = 0.0;
        for (int64_t i = 0; i < n_in; ++i) sum += (double)wf[r * n_in + i] * xf[i];
        oracle[tok * n_rows + r] = (float)sum;
      }
    }
    const auto wp = packed(*t, wtype, w, n_rows, n_in);
    const auto got = matmul_packed(*t, wtype, wp.data(), n_rows, n_in, xq.data(), n_tokens, 2);
    EXPECT_LT(testing::nmse(got, oracle), 1e-12);
    // Slices of at most 4 GGUF rows: too few to pack, so matmul reads them unpacked.
    const int64_t rb = (int64_t)*row_bytes(wtype, n_in);
    for (int64_t r = 0; r < n_rows; r += 4) {
      const int64_t n = std::min<int64_t>(4, n_rows - r);
      ASSERT_FALSE(t->packs(wtype, n, n_in));
      const auto part = testing::matmul(*t, wtype, w.data() + r * rb, n, n_in, xq.data(), n_tokens);
      for (int64_t tok = 0; tok < n_tokens; ++tok) {
        ASSERT_EQ(
            std::memcmp(part.data() + tok * n, got.data() + tok * n_rows + r, n * sizeof(float)), 0)
            << "rows " << r << " token " << tok;
      }
    }
  }
}

TEST(KernelsPackedMatmul, Q5_0MatchesDequantisedWeightsAndItsUnpackedFormExactly) {
  expect_matches_dequantised_and_unpacked(GgmlType::kQ5_0);
}

TEST(KernelsPackedMatmul, Iq4NlMatchesDequantisedWeightsAndItsUnpackedFormExactly) {
  expect_matches_dequantised_and_unpacked(GgmlType::kIQ4_NL);
}

// Q4_1 / Q5_1 (x = d q + m): the min term meets the activations' block sums, so a lost or
// misread min, or a sum taken from the wrong block, moves the result far from the oracle.
TEST(KernelsPackedMatmul, Q4_1MatchesDequantisedWeightsAndItsUnpackedFormExactly) {
  expect_matches_dequantised_and_unpacked(GgmlType::kQ4_1);
}

TEST(KernelsPackedMatmul, Q5_1MatchesDequantisedWeightsAndItsUnpackedFormExactly) {
  expect_matches_dequantised_and_unpacked(GgmlType::kQ5_1);
}

// K-quant extremes: the largest quants (15, 31, 63) under varied 6-bit scales and mins (0, 1, 62,
// 63 in every position, so swapped scales and mins or sub-blocks would show; Q6_K -128 and 127)
// against hand-built Q8_K activations of -128 and +127 in whole sub-blocks (the worst case for
// the int16 maddubs sums), in a full tile and a tail, on 1 and 2 threads: every table must equal
// the packed ref bit for bit and the GGUF rows closely.
// Eight 6-bit (scale, min) pairs into a Q4_K/Q5_K block's 12 bytes (ggml's get_scale_min_k4
// read backwards).
void pack_scales(const uint8_t* sc, const uint8_t* m, uint8_t* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    q[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

TEST(KernelsPackedMatmul, KquantExtremesStayExact) {
  const int64_t n_rows = 24, n_in = 512, n_tokens = 15, nsb = n_in / kQK_K;
  const uint8_t k6[] = {0, 1, 62, 63, 63, 62, 1, 0, 63, 0, 62, 1, 1, 63, 0, 62};
  for (GgmlType wtype : kKquantTypes) {
    auto w = testing::make_weights(wtype, n_rows, n_in, 37);
    const int64_t block = (int64_t)*row_bytes(wtype, kQK_K);
    for (int64_t i = 0; i < n_rows * nsb; ++i) {
      uint8_t* b = w.data() + i * block;
      if (wtype == GgmlType::kQ6_K) {
        auto* q = reinterpret_cast<BlockQ6_K*>(b);
        std::memset(q->ql, i % 2 ? 0xFF : 0xF0, sizeof(q->ql));
        std::memset(q->qh, 0xFF, sizeof(q->qh));
        for (int g = 0; g < 16; ++g) q->scales[g] = (int8_t)((g + i) % 3 == 0 ? -128 : 127);
      } else {
        auto* q = reinterpret_cast<BlockQ4_K*>(b);
        uint8_t sc[8], m[8];
        for (int j = 0; j < 8; ++j) {
          sc[j] = k6[(j + i) % 16];
          m[j] = k6[(j + 3 * i + 5) % 16];
        }
        pack_scales(sc, m, q->scales);
        uint8_t* qs = wtype == GgmlType::kQ5_K ? reinterpret_cast<BlockQ5_K*>(b)->qs : q->qs;
        std::memset(qs, i % 3 ? 0xFF : 0x0F, kQK_K / 2);
        if (wtype == GgmlType::kQ5_K) {
          std::memset(reinterpret_cast<BlockQ5_K*>(b)->qh, i % 2 ? 0xFF : 0x5A, kQK_K / 8);
        }
      }
    }
    // Token t, sub-block j: all -128 or all +127 (bsums to match), d = 1 / (t + 1).
    std::vector<BlockQ8_K> xq(n_tokens * nsb);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t b = 0; b < nsb; ++b) {
        BlockQ8_K& x = xq[t * nsb + b];
        x.d = 1.0f / (float)(t + 1);
        for (int e = 0; e < kQK_K; ++e) x.qs[e] = (int8_t)(((e / 32 + t + b) % 3) ? 127 : -128);
        for (int g = 0; g < kQK_K / 16; ++g) x.bsums[g] = (int16_t)(16 * x.qs[16 * g]);
      }
    }
    const auto* x8 = reinterpret_cast<const uint8_t*>(xq.data());
    for (const KernelTable* t : available_kernel_tables()) {
      const auto wp = packed(*t, wtype, w, n_rows, n_in);
      std::vector<float> want(n_tokens * n_rows);
      ref::matmul_packed(wtype, wp.data(), n_rows, n_in, x8, n_tokens, want.data(), 0, 1);
      const auto unpacked =
          testing::matmul(kernels_ref(), wtype, w.data(), n_rows, n_in, x8, n_tokens);
      for (int nth = 1; nth <= 2; ++nth) {
        SCOPED_TRACE(std::string(t->isa) + " " + testing::type_name(wtype) + " nth " +
                     std::to_string(nth));
        const auto got = matmul_packed(*t, wtype, wp.data(), n_rows, n_in, x8, n_tokens, nth);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
        EXPECT_LT(testing::nmse(got, unpacked), 1e-10);
      }
      // Token 0 alone: the one-token (GEMV) path.
      const auto one = matmul_packed(*t, wtype, wp.data(), n_rows, n_in, x8, 1, 2);
      ASSERT_EQ(std::memcmp(one.data(), want.data(), one.size() * sizeof(float)), 0) << t->isa;
    }
  }
}

// Float extremes: F16's largest normals and subnormals, BF16's and F32's wide range (kept below
// overflow) in the weights and a subnormal activation must come out of every table exactly as
// the serial ref computes them: no flush-to-zero, no reordering of the chain.
TEST(KernelsPackedMatmul, FloatExtremesMatchTheSerialRefExactly) {
  const int64_t n_rows = 32, n_in = 23, n_tokens = 13;
  for (GgmlType wtype : kFloatTypes) {
    auto w = testing::make_weights(wtype, n_rows, n_in, 35);
    const int64_t n = n_rows * n_in;
    for (int64_t i = 0; i < n; i += 7) {
      if (wtype == GgmlType::kF32) {
        const float v[] = {1.0e36f, -1.0e-42f, 1.0e-38f, -2.5e35f};
        std::memcpy(w.data() + 4 * i, &v[(i / 7) % 4], 4);
      } else {
        // F16: 65504, the smallest subnormal, -65504, 1.0; BF16: 1.1e36, a subnormal, -1e-38,
        // -2.1e35.
        const uint16_t f16[] = {0x7BFF, 0x0001, 0xFBFF, 0x3C00};
        const uint16_t bf16[] = {0x7B54, 0x0001, 0x8080, 0xFA22};
        const uint16_t v = wtype == GgmlType::kF16 ? f16[(i / 7) % 4] : bf16[(i / 7) % 4];
        std::memcpy(w.data() + 2 * i, &v, 2);
      }
    }
    auto x = testing::random_floats(n_tokens * n_in, 36);
    x[5] = 1.0e-40f;  // a subnormal activation
    x[n_in + 2] = 0.0f;
    for (const KernelTable* t : available_kernel_tables()) {
      SCOPED_TRACE(std::string(t->isa) + " " + testing::type_name(wtype));
      const auto wp = packed(*t, wtype, w, n_rows, n_in);
      const auto xq = testing::quantize_act(*t, wtype, x.data(), n_tokens, n_in);
      for (int64_t batch : {(int64_t)1, n_tokens}) {
        const auto got = matmul_packed(*t, wtype, wp.data(), n_rows, n_in, xq.data(), batch, 1);
        std::vector<float> want(got.size());
        ref::matmul_packed(wtype, wp.data(), n_rows, n_in, xq.data(), batch, want.data(), 0, 1);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << "batch " << batch;
      }
    }
  }
}

}  // namespace
}  // namespace kvw::kernels
