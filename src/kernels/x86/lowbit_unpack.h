// kernels/x86/lowbit_unpack.h: a 32-element sub-block of a Q2_K, Q3_K or IQ4_XS row as
// 32 int8 levels, and the float scale (and Q2_K's min) of each 16-element half, for the AVX2 and
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

// Bytes per 32 elements (for prefetch distances; rounded down).
template <GgmlType T>
constexpr int64_t lowbit_bytes_per_32() {
  if constexpr (T == GgmlType::kQ2_K) return sizeof(BlockQ2_K) / 8;
  if constexpr (T == GgmlType::kQ3_K) return sizeof(BlockQ3_K) / 8;
  return sizeof(BlockIQ4_XS) / 8;
}

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

constexpr bool is_superblock_lowbit(GgmlType t) {
  return t == GgmlType::kQ2_K || t == GgmlType::kQ3_K || t == GgmlType::kIQ4_XS;
}

template <GgmlType T>
constexpr int64_t superblock_bytes() {
  if constexpr (T == GgmlType::kQ2_K) return sizeof(BlockQ2_K);
  if constexpr (T == GgmlType::kQ3_K) return sizeof(BlockQ3_K);
  return sizeof(BlockIQ4_XS);
}

// The float scale (and Q2_K min) of each 16-element half of a super-block, computed once per
// 256 elements rather than per 32: 4 decoded tokens of a Q3_K_M file on the AVX2 table took
// 1.41 G instructions in matmul_dequant before, 0.98 G after (callgrind; -30%).
struct LowbitScales {
  float d[16];  // half h = elements 16h..16h+15
  float m[16];  // Q2_K only
};

template <GgmlType T>
inline void lowbit_scales(const uint8_t* block, LowbitScales& s) {
  if constexpr (T == GgmlType::kQ2_K) {
    const auto& blk = *reinterpret_cast<const BlockQ2_K*>(block);
    const float d = lowbit_half_to_float(blk.d), dmin = lowbit_half_to_float(blk.dmin);
    for (int j = 0; j < 16; ++j) {
      s.d[j] = d * (blk.scales[j] & 0x0F);
      s.m[j] = dmin * (blk.scales[j] >> 4);
    }
  } else if constexpr (T == GgmlType::kQ3_K) {
    const auto& blk = *reinterpret_cast<const BlockQ3_K*>(block);
    const float d = lowbit_half_to_float(blk.d);
    for (int j = 0; j < 16; ++j) {
      const int low = j < 8 ? blk.scales[j] & 0x0F : blk.scales[j - 8] >> 4;
      const int high = (blk.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
      s.d[j] = d * static_cast<float>((low | (high << 4)) - 32);
    }
  } else {
    static_assert(T == GgmlType::kIQ4_XS);
    const auto& blk = *reinterpret_cast<const BlockIQ4_XS*>(block);
    const float d = lowbit_half_to_float(blk.d);
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = ((blk.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) |
                     (((blk.scales_h >> (2 * ib)) & 3) << 4);
      s.d[2 * ib] = s.d[2 * ib + 1] = d * static_cast<float>(ls - 32);
    }
  }
}

// The 32 int8 levels of sub-block c (elements 32c..32c+31) of a super-block.
template <GgmlType T>
inline __m256i lowbit_levels(const uint8_t* block, int c) {
  if constexpr (T == GgmlType::kQ2_K) {
    const auto& blk = *reinterpret_cast<const BlockQ2_K*>(block);
    return low2(blk.qs + 32 * (c / 4), 2 * (c % 4));
  } else if constexpr (T == GgmlType::kQ3_K) {
    const auto& blk = *reinterpret_cast<const BlockQ3_K*>(block);
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.hmask));
    const __m256i bit = _mm256_and_si256(hm, _mm256_set1_epi8(static_cast<char>(1 << c)));
    const __m256i minus4 =
        _mm256_and_si256(_mm256_cmpeq_epi8(bit, _mm256_setzero_si256()), _mm256_set1_epi8(4));
    return _mm256_sub_epi8(low2(blk.qs + 32 * (c / 4), 2 * (c % 4)), minus4);
  } else {
    static_assert(T == GgmlType::kIQ4_XS);
    const auto& blk = *reinterpret_cast<const BlockIQ4_XS*>(block);
    return table_nibbles(kIq4NlValues, blk.qs + 16 * c);
  }
}

}  // namespace
}  // namespace kvw::kernels::x86
