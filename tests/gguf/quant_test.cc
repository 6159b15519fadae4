// Tests for gguf/tensor_types: traits, known-answer dequantisation of hand-built blocks (the
// expected values are derived here from the ggml layout, independently of the implementation),
// and quantise->dequantise round trips with explicit error bounds.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "gguf/quant_blocks.h"
#include "gguf/tensor_types.h"

namespace kvw {
namespace {

const GgmlType kAllTypes[] = {GgmlType::kF32,   GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ4_0,
                              GgmlType::kQ8_0,  GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K,
                              GgmlType::kQ8_K,  GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,
                              GgmlType::kIQ4_NL};

std::vector<float> gaussian(int64_t n, uint32_t seed, float mean = 0.0f, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<uint8_t> quantize(GgmlType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(*row_bytes(t, static_cast<int64_t>(x.size())));
  quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

std::vector<float> dequantize(GgmlType t, const void* q, int64_t n) {
  std::vector<float> y(n);
  dequantize_row(t, q, y.data(), n);
  return y;
}

double relative_rms_error(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    ref += double(x[i]) * x[i];
  }
  return std::sqrt(err / ref);
}

TEST(TensorTypes, TraitsMatchGgml) {
  struct Want {
    GgmlType t;
    uint32_t raw;
    const char* name;
    int64_t elems, bytes;
  };
  const Want wants[] = {
      {GgmlType::kF32, 0, "f32", 1, 4},         {GgmlType::kF16, 1, "f16", 1, 2},
      {GgmlType::kQ4_0, 2, "q4_0", 32, 18},     {GgmlType::kQ8_0, 8, "q8_0", 32, 34},
      {GgmlType::kQ4_K, 12, "q4_K", 256, 144},  {GgmlType::kQ5_K, 13, "q5_K", 256, 176},
      {GgmlType::kQ6_K, 14, "q6_K", 256, 210},  {GgmlType::kQ8_K, 15, "q8_K", 256, 292},
      {GgmlType::kBF16, 30, "bf16", 1, 2},      {GgmlType::kQ4_1, 3, "q4_1", 32, 20},
      {GgmlType::kQ5_0, 6, "q5_0", 32, 22},     {GgmlType::kQ5_1, 7, "q5_1", 32, 24},
      {GgmlType::kIQ4_NL, 20, "iq4_nl", 32, 18}};
  for (const Want& w : wants) {
    const TypeTraits& tr = type_traits(w.t);
    EXPECT_EQ(tr.name, w.name);
    EXPECT_EQ(tr.block_elems, w.elems) << w.name;
    EXPECT_EQ(tr.block_bytes, w.bytes) << w.name;
    EXPECT_EQ(ggml_type_from_raw(w.raw), w.t) << w.name;
    EXPECT_EQ(ggml_type_from_name(w.name), w.t) << w.name;
  }
  EXPECT_EQ(ggml_type_from_name("Q4_K"), GgmlType::kQ4_K);
  EXPECT_EQ(ggml_type_from_name("F16"), GgmlType::kF16);
  EXPECT_EQ(ggml_type_from_name("Q5_0"), GgmlType::kQ5_0);
  EXPECT_EQ(ggml_type_from_name("IQ4_NL"), GgmlType::kIQ4_NL);
  EXPECT_EQ(ggml_type_from_name("iq2_xxs"), std::nullopt);
  EXPECT_EQ(ggml_type_from_name(""), std::nullopt);
  // Q8_1, IQ2_XXS, IQ3_S, IQ2_S, F64, IQ1_M, TQ1_0, ... are not supported (yet).
  for (uint32_t raw : {4u, 5u, 9u, 16u, 21u, 22u, 28u, 29u, 31u, 34u, 99u, 0xffffffffu}) {
    EXPECT_EQ(ggml_type_from_raw(raw), std::nullopt) << raw;
  }
}

TEST(TensorTypes, RowBytesRejectsPartialBlocks) {
  EXPECT_EQ(row_bytes(GgmlType::kF32, 7), 28u);
  EXPECT_EQ(row_bytes(GgmlType::kBF16, 3), 6u);
  EXPECT_EQ(row_bytes(GgmlType::kQ8_0, 64), 68u);
  EXPECT_EQ(row_bytes(GgmlType::kQ4_K, 512), 288u);
  EXPECT_EQ(row_bytes(GgmlType::kQ6_K, 0), 0u);
  EXPECT_EQ(row_bytes(GgmlType::kQ4_0, 48), std::nullopt);
  EXPECT_EQ(row_bytes(GgmlType::kQ5_K, 128), std::nullopt);
  EXPECT_EQ(row_bytes(GgmlType::kF16, -2), std::nullopt);
  // Qwen2.5-0.5B's 896-wide rows: 28 blocks of the fallback types.
  EXPECT_EQ(row_bytes(GgmlType::kQ5_0, 896), 28u * 22);
  EXPECT_EQ(row_bytes(GgmlType::kQ4_1, 896), 28u * 20);
  EXPECT_EQ(row_bytes(GgmlType::kQ5_1, 896), 28u * 24);
  EXPECT_EQ(row_bytes(GgmlType::kIQ4_NL, 896), 28u * 18);
  EXPECT_EQ(row_bytes(GgmlType::kQ5_0, 80), std::nullopt);
}

TEST(Dequantize, Q4_0KnownAnswer) {
  BlockQ4_0 b;
  b.d = f32_to_f16(2.0f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::vector<float> y = dequantize(GgmlType::kQ4_0, &b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 2.0f) << j;       // low nibbles: first half
    EXPECT_EQ(y[j + 16], (7 - j) * 2.0f) << j;  // high nibbles: second half
  }
}

TEST(Dequantize, Q8_0KnownAnswer) {
  BlockQ8_0 b[2];
  b[0].d = f32_to_f16(0.25f);
  b[1].d = f32_to_f16(-3.0f);
  for (int j = 0; j < 32; ++j) {
    b[0].qs[j] = static_cast<int8_t>(j * 8 - 128);
    b[1].qs[j] = static_cast<int8_t>(j - 16);
  }
  const std::vector<float> y = dequantize(GgmlType::kQ8_0, b, 64);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(y[j], (j * 8 - 128) * 0.25f);
    EXPECT_EQ(y[32 + j], (j - 16) * -3.0f);
  }
}

// The fifth bit of element e of a Q5_0/Q5_1 block is bit e of the little-endian qh word.
int q5_fifth_bit(const uint8_t qh[4], int e) {
  return (qh[e / 8] >> (e % 8)) & 1;
}

TEST(Dequantize, Q4_1KnownAnswer) {
  BlockQ4_1 b;
  b.d = f32_to_f16(0.5f);
  b.m = f32_to_f16(-3.0f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::vector<float> y = dequantize(GgmlType::kQ4_1, &b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], j * 0.5f - 3.0f) << j;
    EXPECT_EQ(y[j + 16], (15 - j) * 0.5f - 3.0f) << j;
  }
}

TEST(Dequantize, Q5_0KnownAnswer) {
  BlockQ5_0 b;
  b.d = f32_to_f16(2.0f);
  const uint8_t qh[4] = {0xA5, 0x01, 0x80, 0xFF};  // bits 0,2,5,7,8,23,24..31
  std::memcpy(b.qh, qh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(((j * 3) & 15) | ((15 - j) << 4));
  const std::vector<float> y = dequantize(GgmlType::kQ5_0, &b, 32);
  for (int e = 0; e < 32; ++e) {
    const int low = e < 16 ? (e * 3) & 15 : 15 - (e - 16);
    EXPECT_EQ(y[e], ((low | (q5_fifth_bit(qh, e) << 4)) - 16) * 2.0f) << e;
  }
  EXPECT_EQ(y[0], 0.0f);    // 0 | 16 -> 0
  EXPECT_EQ(y[1], -26.0f);  // 3 - 16
  EXPECT_EQ(y[16], -2.0f);  // 15 - 16 (bit 16 clear)
  EXPECT_EQ(y[31], 0.0f);   // 0 | 16
}

TEST(Dequantize, Q5_1KnownAnswer) {
  BlockQ5_1 b;
  b.d = f32_to_f16(0.25f);
  b.m = f32_to_f16(-4.0f);
  const uint8_t qh[4] = {0x0F, 0xF0, 0x33, 0xCC};
  std::memcpy(b.qh, qh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>((j * 5 + 1) & 0xFF);
  const std::vector<float> y = dequantize(GgmlType::kQ5_1, &b, 32);
  for (int e = 0; e < 32; ++e) {
    const uint8_t byte = b.qs[e % 16];
    const int low = e < 16 ? (byte & 15) : (byte >> 4);
    EXPECT_EQ(y[e], (low | (q5_fifth_bit(qh, e) << 4)) * 0.25f - 4.0f) << e;
  }
}

TEST(Dequantize, IQ4_NLKnownAnswer) {
  const int kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                           1,    13,   25,  38,  53,  69,  89,  113};  // ggml's kvalues_iq4nl
  BlockIQ4_NL b;
  b.d = f32_to_f16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::vector<float> y = dequantize(GgmlType::kIQ4_NL, &b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * kLevels[j]) << j;
    EXPECT_EQ(y[j + 16], 0.5f * kLevels[15 - j]) << j;
  }
}

// ggml's Q5_0 reference on x = (j - 16) / 2: the largest magnitude (-8, element 0) sets
// d = -8 / -16 = 0.5, and element j lands exactly on level j (x / d + 16.5 = j + 0.5).
TEST(Quantize, Q5_0MatchesGgmlReferenceOnAKnownBlock) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = (j - 16) * 0.5f;
  const std::vector<uint8_t> q = quantize(GgmlType::kQ5_0, x);
  const auto* b = reinterpret_cast<const BlockQ5_0*>(q.data());
  EXPECT_EQ(f16_to_f32(b->d), 0.5f);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b->qs[j], (j & 15) | (((j + 16) & 15) << 4)) << j;
  const uint8_t want_qh[4] = {0x00, 0x00, 0xFF, 0xFF};  // elements 16..31 have the fifth bit
  EXPECT_EQ(std::memcmp(b->qh, want_qh, 4), 0);
  EXPECT_EQ(dequantize(GgmlType::kQ5_0, q.data(), 32), x);
}

// ggml's Q4_1 / Q5_1 references: d = (max - min) / (levels - 1), m = min, round half up.
TEST(Quantize, Q4_1AndQ5_1MatchGgmlReferenceOnAKnownBlock) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = 1.0f + (j % 16) * 0.25f;  // min 1, max 4.75
  const std::vector<uint8_t> q4 = quantize(GgmlType::kQ4_1, x);
  const auto* b4 = reinterpret_cast<const BlockQ4_1*>(q4.data());
  EXPECT_EQ(f16_to_f32(b4->d), 0.25f);
  EXPECT_EQ(f16_to_f32(b4->m), 1.0f);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b4->qs[j], j | (j << 4)) << j;
  EXPECT_EQ(dequantize(GgmlType::kQ4_1, q4.data(), 32), x);

  for (int j = 0; j < 32; ++j) x[j] = -2.0f + j * 0.125f;  // min -2, max 1.875 = -2 + 31 / 8
  const std::vector<uint8_t> q5 = quantize(GgmlType::kQ5_1, x);
  const auto* b5 = reinterpret_cast<const BlockQ5_1*>(q5.data());
  EXPECT_EQ(f16_to_f32(b5->d), 0.125f);
  EXPECT_EQ(f16_to_f32(b5->m), -2.0f);
  const uint8_t want_qh[4] = {0x00, 0x00, 0xFF, 0xFF};
  EXPECT_EQ(std::memcmp(b5->qh, want_qh, 4), 0);
  EXPECT_EQ(dequantize(GgmlType::kQ5_1, q5.data(), 32), x);
}

// Sub-block (scale, min) pairs of the hand-built K blocks; 4..7 need the 2 high bits.
constexpr int kSc[8] = {1, 2, 3, 4, 17, 33, 49, 63};
constexpr int kMin[8] = {0, 1, 2, 3, 16, 32, 48, 5};
// ggml layout written out by hand for kSc/kMin: bytes 0-3 = sc0-3 | (sc4-7 >> 4) << 6,
// bytes 4-7 = m0-3 | (m4-7 >> 4) << 6, bytes 8-11 = (sc4-7 & 15) | (m4-7 & 15) << 4.
constexpr uint8_t kPackedScales[12] = {0x41, 0x82, 0xC3, 0xC4, 0x40, 0x81,
                                       0xC2, 0x03, 0x01, 0x01, 0x01, 0x5F};

// 4-bit level of element e in a Q4_K/Q5_K qs array: 64-element chunks, first 32 in low nibbles.
int k_low_nibble(const uint8_t* qs, int e) {
  const int chunk = e / 64, r = e % 64;
  const uint8_t byte = qs[chunk * 32 + r % 32];
  return r < 32 ? (byte & 15) : (byte >> 4);
}

TEST(Dequantize, Q4_KKnownAnswer) {
  BlockQ4_K b;
  b.d = f32_to_f16(1.0f);
  b.dmin = f32_to_f16(0.5f);
  std::memcpy(b.scales, kPackedScales, 12);
  for (int k = 0; k < 128; ++k) b.qs[k] = static_cast<uint8_t>((k % 16) | ((15 - k % 16) << 4));
  const std::vector<float> y = dequantize(GgmlType::kQ4_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    const int sb = e / 32;
    EXPECT_EQ(y[e], kSc[sb] * k_low_nibble(b.qs, e) - 0.5f * kMin[sb]) << e;
  }
  // Spot values worked out by hand.
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[32], 29.5f);    // sb1: 2 * 15 - 0.5 * 1
  EXPECT_EQ(y[128], -8.0f);   // sb4: 17 * 0 - 0.5 * 16
  EXPECT_EQ(y[160], 479.0f);  // sb5: 33 * 15 - 0.5 * 32
  EXPECT_EQ(y[224], 942.5f);  // sb7: 63 * 15 - 0.5 * 5
  EXPECT_EQ(y[255], -2.5f);
}

TEST(Dequantize, Q5_KKnownAnswer) {
  BlockQ5_K b;
  b.d = f32_to_f16(0.5f);
  b.dmin = f32_to_f16(0.25f);
  std::memcpy(b.scales, kPackedScales, 12);
  for (int k = 0; k < 128; ++k) b.qs[k] = static_cast<uint8_t>((k * 7) & 0xFF);
  for (int k = 0; k < 32; ++k) b.qh[k] = static_cast<uint8_t>(k * 37 + 11);
  const std::vector<float> y = dequantize(GgmlType::kQ5_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    const int sb = e / 32, r = e % 64;
    // The 5th bit of element e lives in qh[e % 32], bit 2 * chunk + (second half of chunk).
    const int bit = 2 * (e / 64) + (r >= 32 ? 1 : 0);
    const int q = k_low_nibble(b.qs, e) + (((b.qh[r % 32] >> bit) & 1) << 4);
    EXPECT_EQ(y[e], 0.5f * kSc[sb] * q - 0.25f * kMin[sb]) << e;
  }
  // qh[0] = 11 = 0b1011: element 0 (bit 0) and element 32 (bit 1) and 96 (bit 3) get +16.
  EXPECT_EQ(y[0], 0.5f * 1 * 16 - 0.0f);
  EXPECT_EQ(y[32], 0.5f * 2 * (0 + 16) - 0.25f * 1);
  EXPECT_EQ(y[64], 0.5f * 3 * ((32 * 7) & 15) - 0.25f * 2);  // bit 2 clear
}

TEST(Dequantize, Q6_KKnownAnswer) {
  BlockQ6_K b;
  b.d = f32_to_f16(0.5f);
  for (int k = 0; k < 128; ++k) b.ql[k] = static_cast<uint8_t>(k * 13 + 5);
  for (int k = 0; k < 64; ++k) b.qh[k] = static_cast<uint8_t>(k * 29 + 3);
  const int8_t scales[16] = {1, -1, 2, -2, 3, 5, -7, 11, 127, -128, 0, 64, -64, 9, 10, -3};
  std::memcpy(b.scales, scales, 16);
  const std::vector<float> y = dequantize(GgmlType::kQ6_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    // 128-element halves; 32-element groups g: ql byte (g odd: +32), nibble (g >= 2: high),
    // qh 2-bit field g of byte l.
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    const uint8_t lb = b.ql[h * 64 + (g % 2) * 32 + l];
    const int lo = g >= 2 ? (lb >> 4) : (lb & 15);
    const int hi = (b.qh[h * 32 + l] >> (2 * g)) & 3;
    const int q = (lo | (hi << 4)) - 32;
    EXPECT_EQ(y[e], 0.5f * scales[e / 16] * q) << e;
  }
  // Element 0: ql[0] = 5, qh[0] = 3 -> q = (5 | 48) - 32 = 21, scale 1.
  EXPECT_EQ(y[0], 10.5f);
}

TEST(Dequantize, Q8_KKnownAnswer) {
  BlockQ8_K b{};
  b.d = 0.125f;
  for (int k = 0; k < 256; ++k) b.qs[k] = static_cast<int8_t>(k - 128);
  const std::vector<float> y = dequantize(GgmlType::kQ8_K, &b, 256);
  for (int k = 0; k < 256; ++k) EXPECT_EQ(y[k], (k - 128) * 0.125f);
}

TEST(Dequantize, HalfTypesAreExactConversions) {
  const uint16_t h[4] = {0x3C00, 0xC000, 0x7BFF, 0x0001};  // 1, -2, 65504, 2^-24 as fp16
  const std::vector<float> f = dequantize(GgmlType::kF16, h, 4);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.0f);
  EXPECT_EQ(f[2], 65504.0f);
  EXPECT_EQ(f[3], std::ldexp(1.0f, -24));
  const uint16_t bf[2] = {0x3F80, 0xC0A0};  // 1, -5 as bf16
  const std::vector<float> g = dequantize(GgmlType::kBF16, bf, 2);
  EXPECT_EQ(g[0], 1.0f);
  EXPECT_EQ(g[1], -5.0f);
}

struct Bound {
  GgmlType type;
  double max_rel_rms;
};

// Bounds for N(0,1) data, ~15-40% above the measured errors printed below. Q4_0's bound is
// looser than Q4_K's because ggml's Q4_0 reference (max / -8, no search) measures ~8.7%.
const Bound kBounds[] = {
    {GgmlType::kF32, 0.0},     {GgmlType::kF16, 1e-3},   {GgmlType::kBF16, 5e-3},
    {GgmlType::kQ8_0, 0.01},   {GgmlType::kQ8_K, 0.01},  {GgmlType::kQ6_K, 0.02},
    {GgmlType::kQ5_K, 0.04},   {GgmlType::kQ4_K, 0.08},  {GgmlType::kQ4_0, 0.10},
    {GgmlType::kQ4_1, 0.09},   {GgmlType::kQ5_0, 0.055}, {GgmlType::kQ5_1, 0.045},
    {GgmlType::kIQ4_NL, 0.095}};

TEST(RoundTrip, ErrorWithinBoundsForEveryType) {
  for (const Bound& b : kBounds) {
    for (float mean : {0.0f, 0.7f}) {
      const std::vector<float> x = gaussian(4096, 42, mean);
      const std::vector<uint8_t> q = quantize(b.type, x);
      const double err = relative_rms_error(x, dequantize(b.type, q.data(), 4096));
      EXPECT_LE(err, b.max_rel_rms) << type_traits(b.type).name << " mean " << mean;
      if (b.type != GgmlType::kF32) {
        EXPECT_GT(err, 0.0) << type_traits(b.type).name;
      }
      std::printf("%-5s mean %.1f: relative RMS error %.5f\n", type_traits(b.type).name.data(),
                  mean, err);
    }
  }
}

TEST(RoundTrip, ScaleInvariantAcrossMagnitudes) {
  // Quantisers must not depend on the data being O(1): tiny and huge rows behave the same.
  for (GgmlType t : kAllTypes) {
    if (t == GgmlType::kF16 || t == GgmlType::kF32) continue;  // fp16 range is the point there
    for (float scale : {1e-3f, 300.0f}) {
      const std::vector<float> x = gaussian(1024, 7, 0.0f, scale);
      const std::vector<uint8_t> q = quantize(t, x);
      EXPECT_LE(relative_rms_error(x, dequantize(t, q.data(), 1024)), 0.11)
          << type_traits(t).name << " scale " << scale;
    }
  }
}

TEST(RoundTrip, ZeroAndConstantRows) {
  for (GgmlType t : kAllTypes) {
    const std::vector<float> zeros(512, 0.0f);
    const std::vector<uint8_t> q = quantize(t, zeros);
    for (float v : dequantize(t, q.data(), 512)) ASSERT_EQ(v, 0.0f) << type_traits(t).name;
    const std::vector<float> ones(512, -1.5f);
    const std::vector<uint8_t> q1 = quantize(t, ones);
    for (float v : dequantize(t, q1.data(), 512)) {
      ASSERT_NEAR(v, -1.5f, 0.02f) << type_traits(t).name;
    }
  }
}

TEST(RoundTrip, RequantisingDequantisedDataIsStable) {
  const std::vector<float> x = gaussian(2048, 3);
  // Simple scale types reproduce their own bytes exactly.
  for (GgmlType t :
       {GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ5_0}) {
    const std::vector<uint8_t> q = quantize(t, x);
    const std::vector<uint8_t> q2 = quantize(t, dequantize(t, q.data(), 2048));
    EXPECT_EQ(q, q2) << type_traits(t).name;
  }
  // K-quants re-fit their scales (and Q8_K's fp32 scale does not survive 127 * d exactly),
  // so require only that a second pass adds little error.
  // Q4_1/Q5_1 recompute (max - min) / levels in float; IQ4_NL refits its scale.
  for (GgmlType t : {GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K, GgmlType::kQ8_K,
                     GgmlType::kQ4_1, GgmlType::kQ5_1, GgmlType::kIQ4_NL}) {
    const std::vector<uint8_t> q = quantize(t, x);
    const std::vector<float> y = dequantize(t, q.data(), 2048);
    const std::vector<uint8_t> q2 = quantize(t, y);
    const double first = relative_rms_error(x, y);
    const double second = relative_rms_error(y, dequantize(t, q2.data(), 2048));
    EXPECT_LT(second, 0.5 * first) << type_traits(t).name;
  }
}

TEST(RoundTrip, Q8_KBlockSumsMatchQuants) {
  const std::vector<float> x = gaussian(512, 11);
  const std::vector<uint8_t> q = quantize(GgmlType::kQ8_K, x);
  const auto* b = reinterpret_cast<const BlockQ8_K*>(q.data());
  for (int i = 0; i < 2; ++i) {
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += b[i].qs[16 * g + l];
      EXPECT_EQ(b[i].bsums[g], sum);
    }
  }
}

TEST(RoundTrip, K4ScalesUseFullSixBitRange) {
  // The sub-block with the largest scale should quantise it to 63, so precision isn't wasted.
  const std::vector<float> x = gaussian(256, 5);
  const std::vector<uint8_t> q = quantize(GgmlType::kQ4_K, x);
  const auto* b = reinterpret_cast<const BlockQ4_K*>(q.data());
  int max_sc = 0;
  for (int j = 0; j < 4; ++j) max_sc = std::max(max_sc, b->scales[j] & 63);
  for (int j = 4; j < 8; ++j) {
    max_sc = std::max(max_sc, (b->scales[j + 4] & 15) | ((b->scales[j - 4] >> 6) << 4));
  }
  EXPECT_EQ(max_sc, 63);
}

}  // namespace
}  // namespace kvw
