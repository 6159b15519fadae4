// kernels/x86/packed_mxfp4_tile.h: the packed MXFP4 GEMM of the x86 tables (layout and
// arithmetic in kernels/packed_mxfp4.cc), Q4_0's tiles (packed_tile.h) with a lookup: each
// nibble becomes level + 12 (0..24, unsigned for dpbusd / maddubs) by one vpshufb, and the
// offset leaves exactly as 12 x sum(x) = 3 x (ActBlockExtra::neg128 >> 5). A tile is one group
// of 8 rows x C tokens: one __m256 float accumulator per token (lanes = rows), fed
// acc = fma(float(isum), 2^(e - 128) * d_x, acc) per block, as the scalar kernel.
// Header-only templates, instantiated per ISA with that ISA's Dot type (packed_tile.h).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "gguf/quant_blocks.h"
#include "kernels/kernels_internal.h"
#include "kernels/x86/packed_tile.h"

namespace kvw::kernels::x86 {

// kMxfp4Values + 12 in both 128-bit lanes (vpshufb looks up within a lane).
static KVW_INLINE __m256i mxfp4_u8_table() {
  const __m128i levels = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values));
  return _mm256_broadcastsi128_si256(_mm_add_epi8(levels, _mm_set1_epi8(12)));
}

// The 8 rows' E8M0 exponents of a block as floats 2^(e - 128) (mxfp4_block_scale's bits).
static KVW_INLINE __m256 mxfp4_scales(const uint8_t* e8) {
  const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e8)));
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, one), 23);
  const __m256i denormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(denormal, normal, _mm256_cmpgt_epi32(e, one)));
}

// isum[c] lane r = sum_j level[r][j] * x_c[j] over one block (exact int32).
template <class Dot, int C>
KVW_INLINE void mxfp4_isums(const uint8_t* q, const XBlock& x, __m256i table, __m256i* isum) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256i off[C];  // -12 x sum(x_c)
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    const __m256i n4 = _mm256_srai_epi32(x.neg128(c), 5);
    off[c] = _mm256_add_epi32(_mm256_add_epi32(n4, n4), n4);
  }
  if constexpr (Dot::kVnni) {
    constexpr int kChains = chains(C);
    __m256i part[kChains][C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      part[0][c] = off[c];
#pragma GCC unroll 4
      for (int k = 1; k < kChains; ++k) part[k][c] = _mm256_setzero_si256();
    }
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * s));
      const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low4));
      const __m256i hi =
          _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
      __m256i(&p0)[C] = part[(2 * s) % kChains];
      __m256i(&p1)[C] = part[(2 * s + 1) % kChains];
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        p0[c] = Dot::dpbusd(p0[c], lo, bcast4(x.q(c, s)));
        p1[c] = Dot::dpbusd(p1[c], hi, bcast4(x.q(c, s + 4)));
      }
    }
    sum_chains<kChains, C>(part, isum);
  } else {
    // int16 lanes: low and high halves apart, 4 maddubs pairs of at most 2 x 24 x 128 each:
    // 24576 < 2^15, exact (one sum of all 8 would reach 49152 and saturate).
    __m256i hl[C], hh[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) hl[c] = hh[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * s));
      const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low4));
      const __m256i hi =
          _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        hl[c] = _mm256_add_epi16(hl[c], _mm256_maddubs_epi16(lo, bcast4(x.q(c, s))));
        hh[c] = _mm256_add_epi16(hh[c], _mm256_maddubs_epi16(hi, bcast4(x.q(c, s + 4))));
      }
    }
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const __m256i sum =
          _mm256_add_epi32(_mm256_madd_epi16(hl[c], ones), _mm256_madd_epi16(hh[c], ones));
      isum[c] = _mm256_add_epi32(sum, off[c]);
    }
  }
}

// Group `grp` (rows 8 grp .. 8 grp + 7) x tokens [t0, t0 + C).
template <class Dot, int C>
KVW_INLINE void mxfp4_tile(const PackedArgs& a, int64_t grp, int64_t t0) {
  const uint8_t* exps = a.w + grp * a.g.group_bytes;
  const uint8_t* quants = exps + a.g.nb * kPackRows;
  const uint8_t* x0 = a.x + t0 * a.g.x_row_bytes;
  XBlock x = {x0 + 2, x0 + a.g.extras_offset, a.g.x_row_bytes};
  const __m256i table = mxfp4_u8_table();
  __m256 acc[C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < a.g.nb; ++b) {
    if constexpr (C == 1) {
      // Decode streams each weight byte once (as packed_tile: a block's share of the group,
      // 136 bytes, kPrefetchBytes ahead).
      constexpr int kBlockBytes = 128 + kPackRows;
      const uintptr_t ahead = reinterpret_cast<uintptr_t>(exps) + b * kBlockBytes + kPrefetchBytes;
#pragma GCC unroll 4
      for (int line = 0; line < kBlockBytes + 63; line += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + line), _MM_HINT_T0);
      }
    }
    __m256i isum[C];
    mxfp4_isums<Dot, C>(quants + b * 128, x, table, isum);
    const __m256 dw = mxfp4_scales(exps + kPackRows * b);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const __m256 d = _mm256_mul_ps(dw, _mm256_broadcast_ss(x.d(c)));
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), d, acc[c]);
    }
    x.qs += sizeof(BlockQ8_0);
    x.extra += sizeof(ActBlockExtra);
  }
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    _mm256_storeu_ps(a.y + (t0 + c) * a.n_rows + grp * kPackRows, acc[c]);
  }
}

// KernelTable::matmul_packed for MXFP4 on one ISA: full groups in tiles of C tokens walked in
// tile_walk.h's order (decode: one token, groups streamed once), rows past them in scalar code.
template <class Dot, int C>
void matmul_packed_mxfp4(const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                         int64_t n_tokens, float* y, int ith, int nth) {
  const PackedGeometry g = mxfp4_packed_geometry(n_rows, n_in);
  const RowRange rows = split_range(n_rows, ith, nth, kRowAlign);
  if (rows.begin >= rows.end || n_tokens <= 0) return;
  const PackedArgs a = {
      g, static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(xq), n_rows, n_tokens, y};
  const int64_t full = g.n_groups * kPackRows;
  const int64_t g_begin = rows.begin / kPackRows;
  const int64_t g_end = (rows.end < full ? rows.end : full) / kPackRows;
  if (n_tokens == 1) {
    for (int64_t grp = g_begin; grp < g_end; ++grp) mxfp4_tile<Dot, 1>(a, grp, 0);
  } else {
    walk_token_blocks<C, 1>(
        g.x_row_bytes, n_tokens, g_begin, g_end, [&](int64_t grp, int, int64_t tb, int64_t te) {
          token_tiles<C>(
              tb, te, [&](auto n, int64_t t) { mxfp4_tile<Dot, decltype(n)::value>(a, grp, t); });
        });
  }
  if (rows.end > full) {
    matmul_packed_mxfp4_tail(w, n_rows, n_in, xq, n_tokens, y, rows.begin, rows.end);
  }
}

}  // namespace kvw::kernels::x86
