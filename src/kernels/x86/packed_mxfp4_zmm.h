// kernels/x86/packed_mxfp4_zmm.h: the avx512vnni table's MXFP4 prefill GEMM: two groups (16 rows)
// per tile in 512-bit registers, so one dpbusd does 16 rows x 4 elements where the 256-bit tile
// (packed_mxfp4_tile.h) does 8. Per lane the arithmetic is the 256-bit tile's (exact int32 block
// sum, then acc = fma(float(isum), 2^(e - 128) * d_x, acc)), so the bits are the scalar ref's.
// Include only from a translation unit compiled with AVX512-VNNI (x86/avx512vnni.cc).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "gguf/quant_blocks.h"
#include "kernels/kernels_internal.h"
#include "kernels/x86/packed_mxfp4_tile.h"
#include "kernels/x86/packed_tile.h"
#include "kernels/x86/tile_walk.h"

namespace kvw::kernels::x86 {

// 12 tokens: 12 int32 + 12 float accumulators, the table, the mask, the weights and their two
// lookups: 29 of 32 zmm registers.
constexpr int kMxfp4PairTokens = 12;

static KVW_INLINE __m512i bcast4_512(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Groups grp and grp + 1 (rows 8 grp .. 8 grp + 15) x tokens [t0, t0 + C).
template <int C>
KVW_INLINE void mxfp4_pair_tile(const PackedArgs& a, int64_t grp, int64_t t0) {
  const uint8_t* e0 = a.w + grp * a.g.group_bytes;
  const uint8_t* e1 = e0 + a.g.group_bytes;
  const uint8_t* q0 = e0 + a.g.nb * kPackRows;
  const uint8_t* q1 = e1 + a.g.nb * kPackRows;
  const uint8_t* x0 = a.x + t0 * a.g.x_row_bytes;
  XBlock x = {x0 + 2, x0 + a.g.extras_offset, a.g.x_row_bytes};
  const __m128i levels = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values));
  const __m512i table = _mm512_broadcast_i32x4(_mm_add_epi8(levels, _mm_set1_epi8(12)));
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i one = _mm512_set1_epi32(1);
  __m512 acc[C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < a.g.nb; ++b) {
    __m512i isum[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const int32_t n4 = *x.neg128_at(c) >> 5;  // -4 sum(x): exact (neg128 = -128 sum)
      isum[c] = _mm512_set1_epi32(3 * n4);
    }
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      const int64_t off = b * 128 + 32 * s;
      const __m512i v = _mm512_inserti64x4(
          _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q0 + off))),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q1 + off)), 1);
      const __m512i lo = _mm512_shuffle_epi8(table, _mm512_and_si512(v, low4));
      const __m512i hi =
          _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        isum[c] = _mm512_dpbusd_epi32(isum[c], lo, bcast4_512(x.q(c, s)));
        isum[c] = _mm512_dpbusd_epi32(isum[c], hi, bcast4_512(x.q(c, s + 4)));
      }
    }
    uint64_t e_lo, e_hi;
    std::memcpy(&e_lo, e0 + kPackRows * b, 8);
    std::memcpy(&e_hi, e1 + kPackRows * b, 8);
    const __m512i e = _mm512_cvtepu8_epi32(_mm_set_epi64x((int64_t)e_hi, (int64_t)e_lo));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, one), 23);
    const __m512i denormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __m512 dw = _mm512_castsi512_ps(
        _mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(e, one), denormal, normal));
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(*x.d(c)));
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), d, acc[c]);
    }
    x.qs += sizeof(BlockQ8_0);
    x.extra += sizeof(ActBlockExtra);
  }
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    _mm512_storeu_ps(a.y + (t0 + c) * a.n_rows + grp * kPackRows, acc[c]);
  }
}

// matmul_packed for MXFP4 with group pairs for batches (an odd last group and decode take the
// 256-bit tiles with Dot, the table's 256-bit dpbusd).
template <class Dot>
void matmul_packed_mxfp4_pairs(const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                               int64_t n_tokens, float* y, int ith, int nth) {
  if (n_tokens == 1) return matmul_packed_mxfp4<Dot, 1>(w, n_rows, n_in, xq, n_tokens, y, ith, nth);
  const PackedGeometry g = mxfp4_packed_geometry(n_rows, n_in);
  const RowRange rows = split_range(n_rows, ith, nth, kRowAlign);
  if (rows.begin >= rows.end || n_tokens <= 0) return;
  const PackedArgs a = {
      g, static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(xq), n_rows, n_tokens, y};
  const int64_t full = g.n_groups * kPackRows;
  const int64_t g_begin = rows.begin / kPackRows;
  const int64_t g_end = (rows.end < full ? rows.end : full) / kPackRows;
  constexpr int C = kMxfp4PairTokens;
  walk_token_blocks<C, 2>(g.x_row_bytes, n_tokens, g_begin, g_end,
                          [&](int64_t grp, int ng, int64_t tb, int64_t te) {
                            token_tiles<C>(tb, te, [&](auto n, int64_t t) {
                              if (ng == 2) {
                                mxfp4_pair_tile<decltype(n)::value>(a, grp, t);
                              } else {
                                mxfp4_tile<Dot, decltype(n)::value>(a, grp, t);
                              }
                            });
                          });
  if (rows.end > full) {
    matmul_packed_mxfp4_tail(w, n_rows, n_in, xq, n_tokens, y, rows.begin, rows.end);
  }
}

}  // namespace kvw::kernels::x86
