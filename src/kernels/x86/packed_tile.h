// kernels/x86/packed_tile.h: the packed int8-dot GEMM of the x86 tables, Q8_0 / Q4_0 / Q4_1 /
// Q5_0 / Q5_1 / IQ4_NL / MXFP4 (layout and arithmetic in kernels/packed.cc). A tile is one group
// of 8 rows x C tokens: one __m256 float accumulator per token whose 8 lanes are the 8 rows, one
// __m256i exact int32 block sum per token. Per block and step, a 256-bit load holds 4 weights of
// each row and meets each token's 4 activation bytes broadcast to every lane: one dpbusd with
// VNNI; maddubs + madd on plain AVX2. One walk (packed_groups, tile_walk.h's order) and one tile
// (packed_tile) serve every type; a type brings only its block arithmetic: block_isums (the
// exact int32 sums), its scales' bytes and their conversion, and Q4_1 / Q5_1's min term. Batch
// invariance: the int32 block sums are exact and the float part is the same
// acc = fma(float(isum), d_w * d_x, acc) per lane in every tile width, so the tile shape, token
// block and thread split never change a result (and ref::matmul_packed gives the same bits).
// Header-only templates, instantiated per ISA with a Dot type of internal linkage:
//   Dot::kVnni, and when true Dot::dpbusd(acc, u8 weights, s8 activations).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gguf/quant_blocks.h"
#include "kernels/kernels_internal.h"
#include "kernels/x86/avx2_util.h"
#include "kernels/x86/packed_kquant_tile.h"
#include "kernels/x86/tile_walk.h"

namespace kvw::kernels::x86 {

struct PackedArgs {
  PackedGeometry g;
  const uint8_t* w;  // packed groups
  const uint8_t* x;  // [n_tokens] Q8_0 activation rows with their ActBlockExtra
  int64_t n_rows;
  int64_t n_tokens;
  float* y;  // [n_tokens][n_rows]
};

// 4 activation bytes in every 32-bit lane (vpbroadcastd from memory: a load, no ALU uop).
static KVW_INLINE __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Token c's activation block is at x + c * stride: one base register and the stride (not C
// pointers) keep a 12-token tile's addresses within the 15 general-purpose registers.
struct XBlock {
  const uint8_t* qs;     // token 0's 32 quants of this block
  const uint8_t* extra;  // token 0's ActBlockExtra of this block
  int64_t stride;        // bytes between tokens
  KVW_INLINE const int8_t* q(int c, int s) const {
    return reinterpret_cast<const int8_t*>(qs + c * stride + 4 * s);
  }
  KVW_INLINE const float* d(int c) const {
    return reinterpret_cast<const float*>(extra + c * stride + offsetof(ActBlockExtra, d));
  }
  KVW_INLINE const int32_t* neg128_at(int c) const {
    return reinterpret_cast<const int32_t*>(extra + c * stride + offsetof(ActBlockExtra, neg128));
  }
  // ActBlockExtra::neg128 in every lane, broadcast from memory (a load, no ALU uop).
  KVW_INLINE __m256i neg128(int c) const {
    return _mm256_castps_si256(_mm256_broadcast_ss(reinterpret_cast<const float*>(neg128_at(c))));
  }
};

// Independent dpbusd chains per token: 4 for one token, 2 for two or three, then one (enough
// tokens interleave to cover the latency).
constexpr int chains(int n_tokens) {
  return n_tokens == 1 ? 4 : (n_tokens <= 3 ? 2 : 1);
}

template <int K, int C>
KVW_INLINE void sum_chains(__m256i (&part)[K][C], __m256i* isum) {
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    __m256i t = part[0][c];
#pragma GCC unroll 4
    for (int k = 1; k < K; ++k) t = _mm256_add_epi32(t, part[k][c]);
    isum[c] = t;
  }
}

// -off x sum(x_c) in every lane, the exact correction of unsigned weights stored q + off with
// off = 2^(7 - kShift) (neg128 >> kShift); no offset (Q4_1 / Q5_1) when kShift < 0.
template <int kShift>
KVW_INLINE __m256i offset_correction(const XBlock& x, int c) {
  if constexpr (kShift < 0) {
    return _mm256_setzero_si256();
  } else {
    return _mm256_srai_epi32(x.neg128(c), kShift);
  }
}

// isum[c] lane r = sum_j q[r][j] * x_c[j] over block b (Q8_0: stored bytes are q + 128).
template <class Dot, int C>
KVW_INLINE void q8_0_isums(const uint8_t* q, const XBlock& x, __m256i* isum) {
  if constexpr (Dot::kVnni) {
    // sum((q + 128) x) - 128 sum(x): exact in int32 (|sum| < 2^20), so the steps may go to
    // kChains independent sums: decode's single token would otherwise wait out dpbusd's
    // 5-cycle latency 8 times per block.
    constexpr int kChains = chains(C);
    __m256i part[kChains][C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      part[0][c] = x.neg128(c);
#pragma GCC unroll 4
      for (int k = 1; k < kChains; ++k) part[k][c] = _mm256_setzero_si256();
    }
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * s));
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        part[s % kChains][c] = Dot::dpbusd(part[s % kChains][c], w, bcast4(x.q(c, s)));
      }
    }
    sum_chains<kChains, C>(part, isum);
  } else {
    // maddubs takes u8 x s8 with int16 pair sums: |q| x (x with q's sign) stays below
    // 2 x 128 x 127 < 2^15, where (q + 128) x x would saturate.
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i flip = _mm256_set1_epi8(-128);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      const __m256i w =
          _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * s)), flip);
      const __m256i wa = _mm256_abs_epi8(w);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        const __m256i p = _mm256_maddubs_epi16(wa, _mm256_sign_epi8(bcast4(x.q(c, s)), w));
        isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p, ones));
      }
    }
  }
}

// The VNNI form of a nibble block (Q4_0/Q4_1, IQ4_NL, MXFP4): isum[c] = init[c] + sum_j
// w_j x x_c[j], where `weights` maps the block's nibbles (as bytes 0..15) to unsigned weights
// (the nibbles themselves, or a vpshufb table's levels), by dpbusd in chains(C) chains.
template <class Dot, int C, class Weights>
KVW_INLINE void nibble_dpbusd_isums(const uint8_t* q, const XBlock& x, const __m256i* init,
                                    __m256i* isum, Weights weights) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  constexpr int kChains = chains(C);
  __m256i part[kChains][C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    part[0][c] = init[c];
#pragma GCC unroll 4
    for (int k = 1; k < kChains; ++k) part[k][c] = _mm256_setzero_si256();
  }
#pragma GCC unroll 4
  for (int s = 0; s < 4; ++s) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * s));
    const __m256i lo = weights(_mm256_and_si256(v, low4));
    const __m256i hi = weights(_mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
    __m256i(&p0)[C] = part[(2 * s) % kChains];
    __m256i(&p1)[C] = part[(2 * s + 1) % kChains];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      p0[c] = Dot::dpbusd(p0[c], lo, bcast4(x.q(c, s)));
      p1[c] = Dot::dpbusd(p1[c], hi, bcast4(x.q(c, s + 4)));
    }
  }
  sum_chains<kChains, C>(part, isum);
}

// Q4_0: stored nibbles n = q + 8 in 0..15; sum(n x) - 8 sum(x) (kShift 4). Q4_1: sum(n x)
// (kShift -1; its min is the tile's).
template <class Dot, int C, int kShift>
KVW_INLINE void q4_isums(const uint8_t* q, const XBlock& x, __m256i* isum) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  if constexpr (Dot::kVnni) {
    __m256i init[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) init[c] = offset_correction<kShift>(x, c);
    nibble_dpbusd_isums<Dot, C>(q, x, init, isum, [](__m256i n) { return n; });
  } else {
    // int16 lanes sum 8 maddubs pairs of at most 2 x 15 x 128: 30720 < 2^15, exact.
    __m256i h[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) h[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * s));
      const __m256i lo = _mm256_and_si256(v, low4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        h[c] = _mm256_add_epi16(h[c], _mm256_maddubs_epi16(lo, bcast4(x.q(c, s))));
        h[c] = _mm256_add_epi16(h[c], _mm256_maddubs_epi16(hi, bcast4(x.q(c, s + 4))));
      }
    }
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      isum[c] = _mm256_add_epi32(_mm256_madd_epi16(h[c], ones), offset_correction<kShift>(x, c));
    }
  }
}

// Q5_0: the nibbles as Q4_0 with each step's fifth bits (packed.cc) moved to bit 4, values
// n = q + 16 in 0..31; sum(n x) - 16 sum(x) (kShift 3). Q5_1: sum(n x) (kShift -1).
// Step s's 32 low and 32 high 5-bit weights of a Q5_0 block (q: its fifth-bit plane, then the
// nibbles). The 16-bit shifts move bit s (low half) or bit 4 + s (high half) of each fifth-bit
// byte to bit 4 without carrying a bit across bytes.
KVW_INLINE void q5_0_step(const uint8_t* q, __m256i fifth, int s, __m256i& lo, __m256i& hi) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i bit4 = _mm256_set1_epi8(0x10);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 + 32 * s));
  lo = _mm256_or_si256(_mm256_and_si256(v, low4),
                       _mm256_and_si256(_mm256_slli_epi16(fifth, 4 - s), bit4));
  hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), low4),
                       _mm256_and_si256(_mm256_srli_epi16(fifth, s), bit4));
}

template <class Dot, int C, int kShift>
KVW_INLINE void q5_isums(const uint8_t* q, const XBlock& x, __m256i* isum) {
  const __m256i fifth = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  if constexpr (Dot::kVnni) {
    constexpr int kChains = chains(C);
    __m256i part[kChains][C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      part[0][c] = offset_correction<kShift>(x, c);
#pragma GCC unroll 4
      for (int k = 1; k < kChains; ++k) part[k][c] = _mm256_setzero_si256();
    }
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      __m256i lo, hi;
      q5_0_step(q, fifth, s, lo, hi);
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
    // int16 lanes sum 4 maddubs pairs of at most 2 x 31 x 128 (31744 < 2^15, exact), so two
    // steps at a time before widening to int32.
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) isum[c] = offset_correction<kShift>(x, c);
#pragma GCC unroll 2
    for (int s2 = 0; s2 < 4; s2 += 2) {
      __m256i h[C];
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) h[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
      for (int s = s2; s < s2 + 2; ++s) {
        __m256i lo, hi;
        q5_0_step(q, fifth, s, lo, hi);
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
          h[c] = _mm256_add_epi16(h[c], _mm256_maddubs_epi16(lo, bcast4(x.q(c, s))));
          h[c] = _mm256_add_epi16(h[c], _mm256_maddubs_epi16(hi, bcast4(x.q(c, s + 4))));
        }
      }
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c)
        isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(h[c], ones));
    }
  }
}

// IQ4_NL: Q4_0's nibbles index kIq4NlValues (a vpshufb per half). VNNI: levels + 128 unsigned,
// sum((q + 128) x) - 128 sum(x); plain AVX2: the signed levels, |q| x sign(x, q) as Q8_0.
template <class Dot, int C>
KVW_INLINE void iq4_nl_isums(const uint8_t* q, const XBlock& x, __m256i* isum) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  alignas(16) int8_t levels[16];
  for (int i = 0; i < 16; ++i) levels[i] = (int8_t)(kIq4NlValues[i] + (Dot::kVnni ? 128 : 0));
  const __m256i table =
      _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(levels)));
  if constexpr (Dot::kVnni) {
    __m256i init[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) init[c] = x.neg128(c);
    nibble_dpbusd_isums<Dot, C>(q, x, init, isum,
                                [table](__m256i n) { return _mm256_shuffle_epi8(table, n); });
  } else {
    // |q| <= 127 against |x| <= 127: one maddubs pair stays below 2^15, so widen each.
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * s));
      const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low4));
      const __m256i hi =
          _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
      const __m256i lo_abs = _mm256_abs_epi8(lo), hi_abs = _mm256_abs_epi8(hi);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        const __m256i pl = _mm256_maddubs_epi16(lo_abs, _mm256_sign_epi8(bcast4(x.q(c, s)), lo));
        const __m256i ph =
            _mm256_maddubs_epi16(hi_abs, _mm256_sign_epi8(bcast4(x.q(c, s + 4)), hi));
        isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(pl, ones));
        isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(ph, ones));
      }
    }
  }
}

// MXFP4: Q4_0's nibbles looked up as level + 12 (0..24, unsigned for dpbusd / maddubs) by one
// vpshufb; the offset leaves exactly as 12 x sum(x) = 3 x (ActBlockExtra::neg128 >> 5).
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
    nibble_dpbusd_isums<Dot, C>(q, x, off, isum,
                                [table](__m256i n) { return _mm256_shuffle_epi8(table, n); });
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

// Measured on the 2-core Xeon (AVX512-VNNI), 5632x2048 decode with 4 dpbusd chains, GB/s at
// 1 thread: Q8_0 12.7 (512 B ahead), 13.6 (1 KiB), 13.4 (2 KiB), 18.2 (4 KiB) against 13-17 for
// the unpacked kernel; Q4_0 10.4 / 10.3 / 10.5 / 11.1 against 6.5 (noisy: a CI run shared it).
constexpr int kPrefetchBytes = 4096;

// Bytes per block of one group: the scales (fp16 d; Q4_1 / Q5_1: then fp16 m; MXFP4: an E8M0
// byte) and the quants.
template <GgmlType T>
constexpr int kGroupScaleBytes = T == GgmlType::kMXFP4 ? kPackRows
                                 : has_min_scale(T)    ? 4 * kPackRows
                                                       : 2 * kPackRows;
template <GgmlType T>
constexpr int kGroupQuantBytes = T == GgmlType::kQ8_0                           ? 256
                                 : T == GgmlType::kQ5_0 || T == GgmlType::kQ5_1 ? 160
                                                                                : 128;

// isum[c] lane r: the exact int32 block sum of row r with token c, offset corrected.
template <class Dot, GgmlType T, int C>
KVW_INLINE void block_isums(const uint8_t* q, const XBlock& x, __m256i* isum) {
  if constexpr (T == GgmlType::kQ8_0) {
    q8_0_isums<Dot, C>(q, x, isum);
  } else if constexpr (T == GgmlType::kQ4_0) {
    q4_isums<Dot, C, 4>(q, x, isum);
  } else if constexpr (T == GgmlType::kQ4_1) {
    q4_isums<Dot, C, -1>(q, x, isum);
  } else if constexpr (T == GgmlType::kQ5_0) {
    q5_isums<Dot, C, 3>(q, x, isum);
  } else if constexpr (T == GgmlType::kQ5_1) {
    q5_isums<Dot, C, -1>(q, x, isum);
  } else if constexpr (T == GgmlType::kMXFP4) {
    mxfp4_isums<Dot, C>(q, x, mxfp4_u8_table(), isum);  // the table is hoisted out of the loop
  } else {
    static_assert(T == GgmlType::kIQ4_NL);
    iq4_nl_isums<Dot, C>(q, x, isum);
  }
}

// Group `grp` (rows 8 grp .. 8 grp + 7) x tokens [t0, t0 + C).
template <class Dot, GgmlType T, int C>
KVW_INLINE void packed_tile(const PackedArgs& a, int64_t grp, int64_t t0) {
  constexpr int kScaleBytes = kGroupScaleBytes<T>;
  constexpr int kQuantBytes = kGroupQuantBytes<T>;
  const uint8_t* scales = a.w + grp * a.g.group_bytes;
  const uint8_t* quants = scales + a.g.nb * kScaleBytes;
  const uint8_t* x0 = a.x + t0 * a.g.x_row_bytes;
  XBlock x = {x0 + 2, x0 + a.g.extras_offset, a.g.x_row_bytes};
  __m256 acc[C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < a.g.nb; ++b) {
    if constexpr (C == 1) {
      // Decode streams each weight byte once: prefetch kPrefetchBytes ahead in the group's
      // (then the next group's) bytes. The distance advances by a block's share of the group,
      // scales included (144 bytes for Q4_0), so the prefetches cover the stream without gaps:
      // advancing by the quants alone (128) skipped 16 lines at every group boundary.
      constexpr int kBlockBytes = kQuantBytes + kScaleBytes;
      const uintptr_t ahead =
          reinterpret_cast<uintptr_t>(scales) + b * kBlockBytes + kPrefetchBytes;
#pragma GCC unroll 5
      for (int line = 0; line < kBlockBytes + 63; line += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + line), _MM_HINT_T0);
      }
    }
    __m256i isum[C];
    block_isums<Dot, T, C>(quants + b * kQuantBytes, x, isum);
    const uint8_t* sc = scales + kScaleBytes * b;
    __m256 dw;
    if constexpr (T == GgmlType::kMXFP4) {
      dw = mxfp4_scales(sc);
    } else {
      dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
    }
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const __m256 d = _mm256_mul_ps(dw, _mm256_broadcast_ss(x.d(c)));
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), d, acc[c]);
    }
    if constexpr (has_min_scale(T)) {
      // The min term, packed.cc's block_fma: (-m / 128) x (d_x x neg128).
      const __m256 mw =
          _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16))),
                        _mm256_set1_ps(-0x1p-7f));
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        const __m256 s =
            _mm256_mul_ps(_mm256_cvtepi32_ps(x.neg128(c)), _mm256_broadcast_ss(x.d(c)));
        acc[c] = _mm256_fmadd_ps(mw, s, acc[c]);
      }
    }
    x.qs += sizeof(BlockQ8_0);
    x.extra += sizeof(ActBlockExtra);
  }
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    _mm256_storeu_ps(a.y + (t0 + c) * a.n_rows + grp * kPackRows, acc[c]);
  }
}

// Groups [g_begin, g_end) for all tokens: decode streams the groups once with one token,
// batches take tiles of C tokens in tile_walk.h's order.
template <class Dot, GgmlType T, int C>
void packed_groups(const PackedArgs& a, int64_t g_begin, int64_t g_end) {
  if (a.n_tokens == 1) {
    for (int64_t grp = g_begin; grp < g_end; ++grp) packed_tile<Dot, T, 1>(a, grp, 0);
    return;
  }
  walk_token_blocks<C, 1>(
      a.g.x_row_bytes, a.n_tokens, g_begin, g_end, [&](int64_t grp, int, int64_t tb, int64_t te) {
        token_tiles<C>(
            tb, te, [&](auto n, int64_t t) { packed_tile<Dot, T, decltype(n)::value>(a, grp, t); });
      });
}

// KernelTable::matmul_packed for one AVX2 ISA: full groups here, rows past them in packed.cc;
// the float types go to the AVX2 float GEMM (packed_float_avx2.cc), the K-quants to
// packed_kquant_tile.h with KC-token tiles.
template <class Dot, int C, int KC>
void matmul_packed(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                   int64_t n_tokens, float* y, int ith, int nth, void* scratch) {
  if (is_float_type(wtype)) {
    return avx2::matmul_packed_float(wtype, w, n_rows, n_in, static_cast<const float*>(xq),
                                     n_tokens, y, ith, nth, scratch);
  }
  if (is_kquant_type(wtype)) {
    return matmul_packed_kquant<Dot, KC>(wtype, w, n_rows, n_in, xq, n_tokens, y, ith, nth);
  }
  const PackedGeometry g = packed_geometry(wtype, n_rows, n_in);
  const RowRange rows = split_range(n_rows, ith, nth, kRowAlign);
  if (rows.begin >= rows.end || n_tokens <= 0) return;
  const PackedArgs a = {
      g, static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(xq), n_rows, n_tokens, y};
  const int64_t full = g.n_groups * kPackRows;
  // Thread ranges start at multiples of kRowAlign (16), hence of a group.
  const int64_t g_begin = rows.begin / kPackRows;
  const int64_t g_end = (rows.end < full ? rows.end : full) / kPackRows;
  if (wtype == GgmlType::kQ8_0) {
    packed_groups<Dot, GgmlType::kQ8_0, C>(a, g_begin, g_end);
  } else if (wtype == GgmlType::kQ4_0) {
    packed_groups<Dot, GgmlType::kQ4_0, C>(a, g_begin, g_end);
  } else if (wtype == GgmlType::kQ5_0) {
    packed_groups<Dot, GgmlType::kQ5_0, C>(a, g_begin, g_end);
  } else if (wtype == GgmlType::kQ4_1) {
    packed_groups<Dot, GgmlType::kQ4_1, C>(a, g_begin, g_end);
  } else if (wtype == GgmlType::kQ5_1) {
    packed_groups<Dot, GgmlType::kQ5_1, C>(a, g_begin, g_end);
  } else if (wtype == GgmlType::kMXFP4) {
    // At most 4 tokens: the lookup table and mask take two more of the 16 ymm registers.
    packed_groups<Dot, GgmlType::kMXFP4, (C < 4 ? C : 4)>(a, g_begin, g_end);
  } else {
    packed_groups<Dot, GgmlType::kIQ4_NL, C>(a, g_begin, g_end);
  }
  if (rows.end > full) {
    matmul_packed_tail(wtype, w, n_rows, n_in, xq, n_tokens, y, rows.begin, rows.end);
  }
}

}  // namespace kvw::kernels::x86
