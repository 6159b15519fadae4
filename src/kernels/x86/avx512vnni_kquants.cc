// kernels/x86/avx512vnni_kquants.cc: the avx512vnni table's packed Q4_K / Q5_K / Q6_K GEMM.
// Prefill tiles take two groups (16 rows, one zmm per token: lanes 0-7 the first group's rows,
// 8-15 the second's) with per lane exactly the arithmetic of x86::kquant_tile, so a row gives
// the same bits in a pair tile, a single-group tile (an odd last group) or decode. Compiled with
// the AVX-512 + AVX512-VNNI flags; nothing here runs unless dispatch.cc saw them in CPUID.
#include <cstring>

#include "gguf/quant_blocks.h"
#include "kernels/kernels_internal.h"
#include "kernels/x86/packed_kquant_tile.h"

namespace kvw::kernels::avx512vnni {
namespace {

struct DotAvx512Vnni {
  static constexpr bool kVnni = true;
  static KVW_INLINE __m256i dpbusd(__m256i acc, __m256i u8, __m256i s8) {
    return _mm256_dpbusd_epi32(acc, u8, s8);
  }
  static KVW_INLINE __m256i dpwssd(__m256i acc, __m256i a, __m256i b) {
    return _mm256_dpwssd_epi32(acc, a, b);
  }
};

using x86::KPackedArgs;

KVW_INLINE __m512i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// The 32 bytes at p and at p + group_bytes (the same place in the next group) as one zmm.
KVW_INLINE __m512i load_pair(const uint8_t* p, int64_t group_bytes) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + group_bytes));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// The 8 bytes at p and at p + group_bytes as one xmm.
KVW_INLINE __m128i load8_pair(const uint8_t* p, int64_t group_bytes) {
  return _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)),
                            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + group_bytes)));
}

struct KScales16 {
  __m512i sc[16];  // int32 scale per lane (row), per scale index
  // int16 pairs meeting the activation's sums: Q6_K (sc_2i, sc_2i+1) x (bsums[2i], bsums[2i + 1])
  // as x86::KScales; Q4_K/Q5_K (m_2i, m_2i+1) x the sub-block sums (bs_2i, bs_2i+1), i < 4
  // (bs_j = bsums[2j] + bsums[2j + 1]: half the multiply-adds of (m_j, m_j) x the bsums pairs).
  __m512i bs[8];
};

template <GgmlType T>
KVW_INLINE void unpack_scales(const uint8_t* sb, int64_t gb, KScales16& k) {
  if constexpr (T == GgmlType::kQ6_K) {
    const uint8_t* s = sb + kq::kQ6Scales;
#pragma GCC unroll 16
    for (int g = 0; g < 16; ++g) k.sc[g] = _mm512_cvtepi8_epi32(load8_pair(s + 8 * g, gb));
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      const __m128i g0 =
          _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 16 * i)),
                            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 16 * i + 8)));
      const __m128i g1 =
          _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + gb + 16 * i)),
                            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + gb + 16 * i + 8)));
      k.bs[i] = _mm512_cvtepi8_epi16(_mm256_set_m128i(g1, g0));
    }
  } else {
    const __m512i m15 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi32(3);
    __m512i mins[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m512i lo = _mm512_cvtepu8_epi32(load8_pair(sb + kq::kScLow + 8 * j, gb));
      const __m512i hi = _mm512_srli_epi32(
          _mm512_cvtepu8_epi32(load8_pair(sb + kq::kScHigh + 8 * (j % 4), gb)), (j / 4) * 4);
      k.sc[j] = _mm512_or_si512(_mm512_and_si512(lo, m15),
                                _mm512_slli_epi32(_mm512_and_si512(hi, m3), 4));
      mins[j] =
          _mm512_or_si512(_mm512_srli_epi32(lo, 4),
                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hi, 2), m3), 4));
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      k.bs[i] = _mm512_or_si512(mins[2 * i], _mm512_slli_epi32(mins[2 * i + 1], 16));
    }
  }
}

KVW_INLINE __m512i bit_to_16(__m512i bits, int s) {
  const __mmask64 set = _mm512_test_epi8_mask(bits, _mm512_set1_epi8((char)(1 << s)));
  return _mm512_maskz_mov_epi8(set, _mm512_set1_epi8(0x10));
}

KVW_INLINE __m512i high2(__m512i bits, int s) {
  const __m512i m = _mm512_set1_epi8(0x30);
  switch (s % 4) {
    case 0:
      return _mm512_and_si512(_mm512_slli_epi16(bits, 4), m);
    case 1:
      return _mm512_and_si512(_mm512_slli_epi16(bits, 2), m);
    case 2:
      return _mm512_and_si512(bits, m);
    default:
      return _mm512_and_si512(_mm512_srli_epi16(bits, 2), m);
  }
}

// Groups grp and grp + 1 x tokens [t0, t0 + C): x86::kquant_tile in 16 lanes. A step's load
// holds both halves of a chunk (two scale indices, low and high nibbles); the tile walks the
// chunk's steps once per half, so each token keeps one running sub-block dot (not two) and the
// tile fits twice the tokens of a two-dot tile: the weight decode and scale unpack, paid per tile,
// spread over 12 tokens. The dots are exact int32 sums as in x86::kquant_tile, so the order of
// the halves changes no bit.
template <GgmlType T, int C>
KVW_INLINE void pair_tile(const KPackedArgs& a, int64_t grp, int64_t t0) {
  const int64_t gb = a.g.group_bytes;
  const uint8_t* group = a.w + grp * gb;
  const uint8_t* x0 = a.x + t0 * a.g.x_row_bytes;
  const int64_t xs = a.g.x_row_bytes;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  // Scales' steps: a whole sub-block (32 elements) for Q4_K/Q5_K, a Q6_K group (16).
  constexpr int kFlush = T == GgmlType::kQ6_K ? 4 : 8;
  // Touched once per super-block: left to memory, the registers go to the dots and sums.
  __m512 acc[C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < a.g.nsb; ++b) {
    const uint8_t* sb = group + b * a.g.sb_bytes;
    const uint8_t* quants = sb + a.g.quants;
    const uint8_t* xb = x0 + b * (int64_t)sizeof(BlockQ8_K);
    KScales16 k;
    unpack_scales<T>(sb, gb, k);
    __m512i isum[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) isum[c] = _mm512_setzero_si512();
#pragma GCC unroll 1
    for (int hc = 0; hc < 8; ++hc) {
      // Half-chunk hc = 2 chunk + half, in a loop that is not unrolled: one half's 12 dots and
      // the 12 sums fill the registers (unrolled, the compiler interleaved both halves' dots and
      // spilled).
      const __m128i shift = _mm_cvtsi32_si128(4 * (hc % 2));  // low or high nibbles
      const uint8_t* qv = quants + 256 * (hc / 2);
      __m512i fifth = _mm512_setzero_si512();
      if constexpr (T == GgmlType::kQ5_K) fifth = load_pair(sb + kq::kQ5Fifth + 32 * hc, gb);
      __m512i d[C];
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        if (s % kFlush == 0) {
#pragma GCC unroll 16
          for (int c = 0; c < C; ++c) d[c] = _mm512_setzero_si512();
        }
        __m512i w = _mm512_and_si512(_mm512_srl_epi16(load_pair(qv + 32 * s, gb), shift), low4);
        if constexpr (T == GgmlType::kQ5_K) w = _mm512_or_si512(w, bit_to_16(fifth, s));
        if constexpr (T == GgmlType::kQ6_K) {
          const uint8_t* h2 = sb + kq::kQ6High + 64 * hc + 32 * (s / 4);
          w = _mm512_or_si512(w, high2(load_pair(h2, gb), s));
        }
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
          const int8_t* q = reinterpret_cast<const int8_t*>(xb + c * xs + 4) + 32 * hc + 4 * s;
          d[c] = _mm512_dpbusd_epi32(d[c], w, bcast4(q));
        }
        if ((s + 1) % kFlush == 0) {
          const int j = T == GgmlType::kQ6_K ? 2 * hc + s / 4 : hc;
#pragma GCC unroll 16
          for (int c = 0; c < C; ++c) {
            isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(d[c], k.sc[j]));
          }
        }
      }
    }
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + gb)),
                                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(sb))));
    // Q4_K/Q5_K only (Q6_K's bytes there are scales).
    [[maybe_unused]] const __m512 dmin = _mm512_cvtph_ps(
        _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + gb + kq::kDmin)),
                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + kq::kDmin))));
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const auto* xk = reinterpret_cast<const BlockQ8_K*>(xb + c * xs);
      __m512i bsum = _mm512_setzero_si512();
      if constexpr (T == GgmlType::kQ6_K) {
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
          int32_t pair;
          std::memcpy(&pair, xk->bsums + 2 * i, 4);
          bsum = _mm512_dpwssd_epi32(bsum, k.bs[i], _mm512_set1_epi32(pair));
        }
      } else {
        // Sub-block sums bs_j (|bs_j| <= 32 x 128: the int16 pack is exact) as int16 pairs:
        // (bs_0, bs_1), (bs_2, bs_3) in dwords 0-1, (bs_4, bs_5), (bs_6, bs_7) in dwords 4-5.
        const __m256i sums = _mm256_madd_epi16(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xk->bsums)), _mm256_set1_epi16(1));
        alignas(32) int32_t pairs[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(pairs), _mm256_packs_epi32(sums, sums));
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
          bsum = _mm512_dpwssd_epi32(bsum, k.bs[i], _mm512_set1_epi32(pairs[i % 2 + 4 * (i / 2)]));
        }
      }
      const __m512 dx = _mm512_set1_ps(xk->d);
      if constexpr (T == GgmlType::kQ6_K) {
        const __m512i total = _mm512_sub_epi32(isum[c], _mm512_slli_epi32(bsum, 5));
        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(dw, dx), acc[c]);
      } else {
        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(dw, dx), acc[c]);
        acc[c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(bsum), _mm512_mul_ps(dmin, dx), acc[c]);
      }
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    _mm512_storeu_ps(a.y + (t0 + c) * a.n_rows + grp * kPackRows, acc[c]);
  }
}

// 16 rows x 12 tokens: 12 int32 sums and 12 sub-block dots in registers, the float sums in
// memory. The 8-row tile (decode, an odd last group) keeps two dots and its float sums per
// token, so it takes 6.
constexpr int kTokens = 12;
constexpr int kSingleTokens = 6;

// As x86::kquant_groups, with group pairs; decode and an odd last group take the 8-row tile.
template <GgmlType T>
void pair_groups(const KPackedArgs& a, int64_t g_begin, int64_t g_end) {
  if (a.n_tokens == 1) {
    return x86::kquant_groups<DotAvx512Vnni, T, kSingleTokens>(a, g_begin, g_end);
  }
  x86::walk_token_blocks<kTokens, 2>(
      a.g.x_row_bytes, a.n_tokens, g_begin, g_end,
      [&](int64_t grp, int ng, int64_t tb, int64_t te) {
        if (ng == 2) {
          x86::token_tiles<kTokens>(
              tb, te, [&](auto n, int64_t t) { pair_tile<T, decltype(n)::value>(a, grp, t); });
        } else {
          x86::token_tiles<kSingleTokens>(tb, te, [&](auto n, int64_t t) {
            x86::kquant_tile<DotAvx512Vnni, T, decltype(n)::value>(a, grp, t);
          });
        }
      });
}

struct PairGroups {
  template <GgmlType T>
  static void run(const KPackedArgs& a, int64_t g_begin, int64_t g_end) {
    pair_groups<T>(a, g_begin, g_end);
  }
};

}  // namespace

void matmul_packed_kquant(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in,
                          const void* xq, int64_t n_tokens, float* y, int ith, int nth) {
  x86::matmul_packed_kquant_by<PairGroups>(wtype, w, n_rows, n_in, xq, n_tokens, y, ith, nth);
}

}  // namespace kvw::kernels::avx512vnni
