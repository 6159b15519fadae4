// kernels/x86/lowbit_unpack.h: one 32-element sub-block of a Q2_K, Q3_K, IQ4_XS or MXFP4 row as
// 32 int8 levels plus the float scale (and Q2_K's min) of each 16-element half, for the AVX2 and
// AVX-512 matmul_dequant kernels (avx2_dequant.cc, avx512_dequant.cc).
// The scales are the scalar reference's float expressions (gguf/quant_k_low.cc,
// gguf/quant_nonlinear.cc), so weight = float(level) * d - m (no m: float(level) * d) gives its
// bits. Everything here has internal linkage: each ISA's translation unit keeps its own copy
// (kernels_internal.h: no inline function shared across differently compiled files).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "gguf/quant_blocks.h"
#include "gguf/tensor_types.h"

namespace kvw::kernels::x86 {
namespace {

constexpr bool is_lowbit_type(GgmlType t) {
  return t == GgmlType::kQ2_K || t == GgmlType::kQ3_K || t == GgmlType::kIQ4_XS ||
         t == GgmlType::kMXFP4;
}

// Bytes per 32 elements (for prefetch distances; rounded down).
template <GgmlType T>
constexpr int64_t lowbit_bytes_per_32() {
  if constexpr (T == GgmlType::kQ2_K) return sizeof(BlockQ2_K) / 8;
  if constexpr (T == GgmlType::kQ3_K) return sizeof(BlockQ3_K) / 8;
  if constexpr (T == GgmlType::kIQ4_XS) return sizeof(BlockIQ4_XS) / 8;
  return sizeof(BlockMXFP4);
}

struct LowbitSubBlock {
  __m256i q;   // 32 int8 levels in element order
  float d[2];  // scale of elements 0-15 and 16-31
  float m[2];  // Q2_K: min subtracted after the multiply; 0 for the others (not applied)
};

inline float lowbit_half_to_float(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// 32 bytes at q, each shifted right by `shift` bits (within the byte) and masked to 2 bits.
inline __m256i low2(const uint8_t* q, int shift) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8(3));
}

// 16 codes (j low nibble, j + 16 high) of qs looked up in a 16-entry int8 table.
inline __m256i table_nibbles(const int8_t* table, const uint8_t* qs) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(table));
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_shuffle_epi8(t, _mm_and_si128(v, m4));
  const __m128i hi = _mm_shuffle_epi8(t, _mm_and_si128(_mm_srli_epi16(v, 4), m4));
  return _mm256_set_m128i(hi, lo);
}

// Sub-block b (elements 32b..32b+31) of a row of type T.
template <GgmlType T>
inline LowbitSubBlock unpack_lowbit(const uint8_t* row, int64_t b) {
  LowbitSubBlock s;
  s.m[0] = s.m[1] = 0.0f;
  if constexpr (T == GgmlType::kQ2_K) {
    const auto& blk = reinterpret_cast<const BlockQ2_K*>(row)[b / 8];
    const int c = static_cast<int>(b % 8);
    s.q = low2(blk.qs + 32 * (c / 4), 2 * (c % 4));
    const float d = lowbit_half_to_float(blk.d), dmin = lowbit_half_to_float(blk.dmin);
    for (int h = 0; h < 2; ++h) {
      const uint8_t sc = blk.scales[2 * c + h];
      s.d[h] = d * (sc & 0x0F);
      s.m[h] = dmin * (sc >> 4);
    }
  } else if constexpr (T == GgmlType::kQ3_K) {
    const auto& blk = reinterpret_cast<const BlockQ3_K*>(row)[b / 8];
    const int c = static_cast<int>(b % 8);
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.hmask));
    const __m256i bit = _mm256_and_si256(hm, _mm256_set1_epi8(static_cast<char>(1 << c)));
    const __m256i minus4 =
        _mm256_and_si256(_mm256_cmpeq_epi8(bit, _mm256_setzero_si256()), _mm256_set1_epi8(4));
    s.q = _mm256_sub_epi8(low2(blk.qs + 32 * (c / 4), 2 * (c % 4)), minus4);
    const float d = lowbit_half_to_float(blk.d);
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * c + h;
      const int low = j < 8 ? blk.scales[j] & 0x0F : blk.scales[j - 8] >> 4;
      const int high = (blk.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
      s.d[h] = d * static_cast<float>((low | (high << 4)) - 32);
    }
  } else if constexpr (T == GgmlType::kIQ4_XS) {
    const auto& blk = reinterpret_cast<const BlockIQ4_XS*>(row)[b / 8];
    const int ib = static_cast<int>(b % 8);
    s.q = table_nibbles(kIq4NlValues, blk.qs + 16 * ib);
    const int ls =
        ((blk.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) | (((blk.scales_h >> (2 * ib)) & 3) << 4);
    s.d[0] = s.d[1] = lowbit_half_to_float(blk.d) * static_cast<float>(ls - 32);
  } else {
    static_assert(T == GgmlType::kMXFP4);
    const auto& blk = reinterpret_cast<const BlockMXFP4*>(row)[b];
    s.q = table_nibbles(kMxfp4Values, blk.qs);
    const uint32_t bits = blk.e < 2 ? 0x00200000u << blk.e : static_cast<uint32_t>(blk.e - 1) << 23;
    float d;
    __builtin_memcpy(&d, &bits, 4);
    s.d[0] = s.d[1] = d;
  }
  return s;
}

}  // namespace
}  // namespace kvw::kernels::x86
