// kernels/x86/packed_kquant_tile.h: the packed Q4_K / Q5_K / Q6_K GEMM of the x86 tables (layout
// and arithmetic in kernels/packed_kquants.cc). A tile is one group of 8 rows x C tokens; the 8
// lanes of every vector are the 8 rows. Per step a 256-bit load holds 4 quants of each row for
// both halves of a 64-element chunk (low / high nibble), which meet each token's 4 activation
// bytes broadcast to every lane. The per-row scales of a super-block are unpacked once per tile
// into vectors that every token of the tile reuses.
//
// Dot::kVnni: dpbusd sums a whole sub-block in int32, then one mullo applies its scale, and
// dpwssd takes the mins x bsums pairs (madd + add in one instruction).
// Otherwise: maddubs pairs summed in int16 for as many steps as cannot overflow (kFlush), then
// madd with the scale in both int16 halves of each lane. Both are exact, so the int32 sums, and
// the float steps after them, equal ref::matmul_packed_kquant's bit for bit.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "gguf/quant_blocks.h"
#include "kernels/kernels_internal.h"
#include "kernels/x86/avx2_util.h"
#include "kernels/x86/tile_walk.h"

namespace kvw::kernels::x86 {

struct KPackedArgs {
  KquantPackedGeometry g;
  const uint8_t* w;  // packed groups
  const uint8_t* x;  // [n_tokens] Q8_K activation rows
  int64_t n_rows;
  int64_t n_tokens;
  float* y;  // [n_tokens][n_rows]
};

static KVW_INLINE __m256i kq_bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

static KVW_INLINE __m256i kq_load8_u8_to_i32(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// Per super-block of a tile: one vector per scale index (sub-block j of Q4_K/Q5_K, group g of
// Q6_K): int32 scales for mullo (VNNI) or (sc, sc) int16 pairs for madd; and the 8 vectors of
// int16 pairs that meet the activation's bsums pairs: (m_j, m_j) for Q4_K/Q5_K, (sc_2i, sc_2i+1)
// for Q6_K.
struct KScales {
  __m256i sc[16];
  __m256i bs[8];
};

template <bool kVnni, GgmlType T>
static KVW_INLINE void kq_unpack_scales(const uint8_t* sb, KScales& k) {
  if constexpr (T == GgmlType::kQ6_K) {
    const uint8_t* s = sb + kq::kQ6Scales;
#pragma GCC unroll 16
    for (int g = 0; g < 16; ++g) {
      const __m256i v =
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 8 * g)));
      k.sc[g] = kVnni ? v
                      : _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xFFFF)),
                                        _mm256_slli_epi32(v, 16));
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 16 * i));
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 16 * i + 8));
      k.bs[i] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b));
    }
  } else {
    const __m256i m15 = _mm256_set1_epi32(15), m3 = _mm256_set1_epi32(3);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m256i lo = kq_load8_u8_to_i32(sb + kq::kScLow + 8 * j);
      const __m256i hi =
          _mm256_srli_epi32(kq_load8_u8_to_i32(sb + kq::kScHigh + 8 * (j % 4)), (j / 4) * 4);
      const __m256i sc = _mm256_or_si256(_mm256_and_si256(lo, m15),
                                         _mm256_slli_epi32(_mm256_and_si256(hi, m3), 4));
      const __m256i m =
          _mm256_or_si256(_mm256_srli_epi32(lo, 4),
                          _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hi, 2), m3), 4));
      k.sc[j] = kVnni ? sc : _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16));
      k.bs[j] = _mm256_or_si256(m, _mm256_slli_epi32(m, 16));
    }
  }
}

// Steps summed before a scale is applied: a whole scale index with dpbusd; with maddubs as many
// as keep int16 exact (pairs of at most 2 x q_max x 128: Q4_K 8 x 3840, Q5_K 4 x 7936, Q6_K 2 x
// 16128, all < 2^15).
template <bool kVnni, GgmlType T>
constexpr int kq_flush() {
  if constexpr (T == GgmlType::kQ6_K) return kVnni ? 4 : 2;
  if constexpr (T == GgmlType::kQ5_K) return kVnni ? 8 : 4;
  return 8;
}

// Fifth bit s of each byte as 0x10 (Q5_K).
static KVW_INLINE __m256i kq_bit_to_16(__m256i bits, int s) {
  const __m256i mask = _mm256_set1_epi8((char)(1 << s));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bits, mask), mask),
                          _mm256_set1_epi8(0x10));
}

// Top 2 bits at bits 2 (s % 4) of each byte, moved to bits 4..5 (Q6_K).
static KVW_INLINE __m256i kq_high2(__m256i bits, int s) {
  const __m256i m = _mm256_set1_epi8(0x30);
  switch (s % 4) {
    case 0:
      return _mm256_and_si256(_mm256_slli_epi16(bits, 4), m);
    case 1:
      return _mm256_and_si256(_mm256_slli_epi16(bits, 2), m);
    case 2:
      return _mm256_and_si256(bits, m);
    default:
      return _mm256_and_si256(_mm256_srli_epi16(bits, 2), m);
  }
}

// Decode's prefetch distance in the packed stream. Busy 2-vCPU EPYC, kernels_bench 5632x2048
// at 1 thread, CPU-time medians of two sittings: Q4_K 391 / 329 us one super-block ahead (1152
// bytes), 291 / 267 at 4 KiB, 314 / 305 at 6 KiB; Q6_K (1680) 531 / 442, 438 / 390, 460 / 428.
// packed_tile.h's Q4_0 / Q8_0 decode found the same 4 KiB.
constexpr int64_t kKquantPrefetchBytes = 4096;

// Group `grp` x tokens [t0, t0 + C).
template <class Dot, GgmlType T, int C>
KVW_INLINE void kquant_tile(const KPackedArgs& a, int64_t grp, int64_t t0) {
  constexpr bool kVnni = Dot::kVnni;
  constexpr int kFlush = kq_flush<kVnni, T>();
  const uint8_t* group = a.w + grp * a.g.group_bytes;
  const uint8_t* x0 = a.x + t0 * a.g.x_row_bytes;
  const int64_t xs = a.g.x_row_bytes;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  __m256 acc[C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < a.g.nsb; ++b) {
    const uint8_t* sb = group + b * a.g.sb_bytes;
    const uint8_t* quants = sb + a.g.quants;
    const uint8_t* xb = x0 + b * (int64_t)sizeof(BlockQ8_K);  // token 0's block b
    if constexpr (C == 1) {
      // Decode streams the weights once (groups and their super-blocks are contiguous):
      // prefetch this super-block's bytes kKquantPrefetchBytes ahead (past the matrix: an
      // address a prefetch never faults on).
      const uintptr_t next = reinterpret_cast<uintptr_t>(sb) + kKquantPrefetchBytes;
#pragma GCC unroll 32
      for (int64_t line = 0; line < a.g.sb_bytes + 63; line += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(next + line), _MM_HINT_T0);
      }
    }
    KScales k;
    kq_unpack_scales<kVnni, T>(sb, k);
    __m256i isum[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int ch = 0; ch < 4; ++ch) {
      __m256i fifth_lo = _mm256_setzero_si256(), fifth_hi = _mm256_setzero_si256();
      if constexpr (T == GgmlType::kQ5_K) {
        fifth_lo = load_i8x32(sb + kq::kQ5Fifth + 64 * ch);
        fifth_hi = load_i8x32(sb + kq::kQ5Fifth + 64 * ch + 32);
      }
      __m256i dl[C], dh[C];
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        if (s % kFlush == 0) {
#pragma GCC unroll 16
          for (int c = 0; c < C; ++c) dl[c] = dh[c] = _mm256_setzero_si256();
        }
        const __m256i v = load_i8x32(quants + 256 * ch + 32 * s);
        __m256i lo = _mm256_and_si256(v, low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        if constexpr (T == GgmlType::kQ5_K) {
          lo = _mm256_or_si256(lo, kq_bit_to_16(fifth_lo, s));
          hi = _mm256_or_si256(hi, kq_bit_to_16(fifth_hi, s));
        }
        if constexpr (T == GgmlType::kQ6_K) {
          const uint8_t* h2 = sb + kq::kQ6High + 128 * ch;
          lo = _mm256_or_si256(lo, kq_high2(load_i8x32(h2 + 32 * (s / 4)), s));
          hi = _mm256_or_si256(hi, kq_high2(load_i8x32(h2 + 32 * (2 + s / 4)), s));
        }
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
          const int8_t* q = reinterpret_cast<const int8_t*>(xb + c * xs + 4) + 64 * ch + 4 * s;
          if constexpr (kVnni) {
            dl[c] = Dot::dpbusd(dl[c], lo, kq_bcast4(q));
            dh[c] = Dot::dpbusd(dh[c], hi, kq_bcast4(q + 32));
          } else {
            dl[c] = _mm256_add_epi16(dl[c], _mm256_maddubs_epi16(lo, kq_bcast4(q)));
            dh[c] = _mm256_add_epi16(dh[c], _mm256_maddubs_epi16(hi, kq_bcast4(q + 32)));
          }
        }
        if ((s + 1) % kFlush == 0) {
          // Scale index of the low / high half's elements of this step.
          const int jl = T == GgmlType::kQ6_K ? 4 * ch + s / 4 : 2 * ch;
          const int jh = T == GgmlType::kQ6_K ? 4 * ch + 2 + s / 4 : 2 * ch + 1;
#pragma GCC unroll 16
          for (int c = 0; c < C; ++c) {
            if constexpr (kVnni) {
              isum[c] = _mm256_add_epi32(isum[c], _mm256_mullo_epi32(dl[c], k.sc[jl]));
              isum[c] = _mm256_add_epi32(isum[c], _mm256_mullo_epi32(dh[c], k.sc[jh]));
            } else {
              isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(dl[c], k.sc[jl]));
              isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(dh[c], k.sc[jh]));
            }
          }
        }
      }
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb)));
    // Q4_K/Q5_K only (Q6_K's bytes there are scales).
    [[maybe_unused]] const __m256 dmin =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + kq::kDmin)));
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const auto* xk = reinterpret_cast<const BlockQ8_K*>(xb + c * xs);
      // Sum over the 8 bsums pairs of (scale or min pair) x (bsums[2i], bsums[2i + 1]).
      __m256i bsum = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        int32_t pair;
        std::memcpy(&pair, xk->bsums + 2 * i, 4);
        if constexpr (kVnni) {
          bsum = Dot::dpwssd(bsum, k.bs[i], _mm256_set1_epi32(pair));  // madd + add in one
        } else {
          bsum = _mm256_add_epi32(bsum, _mm256_madd_epi16(k.bs[i], _mm256_set1_epi32(pair)));
        }
      }
      const __m256 dx = _mm256_broadcast_ss(&xk->d);
      if constexpr (T == GgmlType::kQ6_K) {
        const __m256i total = _mm256_sub_epi32(isum[c], _mm256_slli_epi32(bsum, 5));
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), _mm256_mul_ps(dw, dx), acc[c]);
      } else {
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(dw, dx), acc[c]);
        acc[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(bsum), _mm256_mul_ps(dmin, dx), acc[c]);
      }
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    _mm256_storeu_ps(a.y + (t0 + c) * a.n_rows + grp * kPackRows, acc[c]);
  }
}

// Groups [g_begin, g_end) for all tokens, in tile_walk.h's order (as x86::packed_groups).
template <class Dot, GgmlType T, int C>
void kquant_groups(const KPackedArgs& a, int64_t g_begin, int64_t g_end) {
  if (a.n_tokens == 1) {
    for (int64_t grp = g_begin; grp < g_end; ++grp) kquant_tile<Dot, T, 1>(a, grp, 0);
    return;
  }
  walk_token_blocks<C, 1>(
      a.g.x_row_bytes, a.n_tokens, g_begin, g_end, [&](int64_t grp, int, int64_t tb, int64_t te) {
        token_tiles<C>(
            tb, te, [&](auto n, int64_t t) { kquant_tile<Dot, T, decltype(n)::value>(a, grp, t); });
      });
}

// KernelTable::matmul_packed for the K-quants: full groups through Groups::run<T>(a, g_begin,
// g_end), rows past them in packed_kquants.cc.
template <class Groups>
void matmul_packed_kquant_by(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in,
                             const void* xq, int64_t n_tokens, float* y, int ith, int nth) {
  const KquantPackedGeometry g = kquant_packed_geometry(wtype, n_rows, n_in);
  const RowRange rows = split_range(n_rows, ith, nth, kRowAlign);
  if (rows.begin >= rows.end || n_tokens <= 0) return;
  const KPackedArgs a = {
      g, static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(xq), n_rows, n_tokens, y};
  const int64_t full = g.n_groups * kPackRows;
  const int64_t g_begin = rows.begin / kPackRows;
  const int64_t g_end = (rows.end < full ? rows.end : full) / kPackRows;
  switch (wtype) {
    case GgmlType::kQ4_K:
      Groups::template run<GgmlType::kQ4_K>(a, g_begin, g_end);
      break;
    case GgmlType::kQ5_K:
      Groups::template run<GgmlType::kQ5_K>(a, g_begin, g_end);
      break;
    default:
      Groups::template run<GgmlType::kQ6_K>(a, g_begin, g_end);
      break;
  }
  if (rows.end > full) {
    matmul_packed_kquant_tail(wtype, w, n_rows, n_in, xq, n_tokens, y, rows.begin, rows.end);
  }
}

template <class Dot, int C>
struct KquantGroups {
  template <GgmlType T>
  static void run(const KPackedArgs& a, int64_t g_begin, int64_t g_end) {
    kquant_groups<Dot, T, C>(a, g_begin, g_end);
  }
};

// With C-token tiles of 8 rows.
template <class Dot, int C>
void matmul_packed_kquant(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in,
                          const void* xq, int64_t n_tokens, float* y, int ith, int nth) {
  matmul_packed_kquant_by<KquantGroups<Dot, C>>(wtype, w, n_rows, n_in, xq, n_tokens, y, ith, nth);
}

}  // namespace kvw::kernels::x86
