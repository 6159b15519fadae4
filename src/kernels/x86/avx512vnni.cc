// kernels/x86/avx512vnni.cc: the "avx512vnni" KernelTable: the AVX-512 table with the packed GEMM
// on AVX512-VNNI's dpbusd: prefill tiles of two groups (16 rows) in 512-bit registers, decode
// and an odd last group in 256-bit ones (EVEX: 32 registers, so 12-token tiles either way).
// Compiled with the AVX-512 flags plus -mavx512vnni; nothing here runs unless dispatch.cc saw
// AVX512-VNNI in CPUID.
#include <algorithm>
#include <bit>
#include <cstring>

#include "gguf/quant_blocks.h"
#include "kernels/kernels_internal.h"
#include "kernels/x86/packed_tile.h"

namespace kvw::kernels {
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

using x86::PackedArgs;

// The 32 bytes at offset `off` of groups grp and grp + 1 as one zmm (lanes 0-7: the first).
KVW_INLINE __m512i load_pair(const uint8_t* g0, int64_t group_bytes, int64_t off) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g0 + off));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g0 + group_bytes + off));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// The 8 fp16 at offset `off` of groups grp and grp + 1 as 16 floats (lanes 0-7: the first).
KVW_INLINE __m512 fp16_pair(const uint8_t* g0, int64_t group_bytes, int64_t off) {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g0 + off));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g0 + group_bytes + off));
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}

// The 8 E8M0 exponents at offset `off` of groups grp and grp + 1 as 16 floats 2^(e - 128)
// (x86::mxfp4_scales' bits).
KVW_INLINE __m512 e8m0_pair(const uint8_t* g0, int64_t group_bytes, int64_t off) {
  uint64_t e_lo, e_hi;
  std::memcpy(&e_lo, g0 + off, 8);
  std::memcpy(&e_hi, g0 + group_bytes + off, 8);
  const __m512i e = _mm512_cvtepu8_epi32(_mm_set_epi64x((int64_t)e_hi, (int64_t)e_lo));
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, one), 23);
  const __m512i denormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
  return _mm512_castsi512_ps(
      _mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(e, one), denormal, normal));
}

// 8 rows x 12 tokens (ymm, decode and an odd last group) or 16 rows x 12 tokens (zmm): 12 float
// + 12 int32 accumulators and the weights: 28 of 32 registers.
constexpr int kTokens = kInt8PairTileTokens;

// One block of a 12-token tile's activations, interleaved: step s's 4 bytes of every token side
// by side, then every token's scale and weight-offset correction (Q8_0: neg128, Q4_0:
// neg128 >> 4, Q5_0: neg128 >> 3, IQ4_NL: neg128; Q4_1 / Q5_1, which have no offset: the min
// term's float d_x x neg128, computed once per token and block, not once per group pair). Read
// from the rows in place, the 12 tokens need 12 address registers and the tile spilled them;
// interleaved, one pointer and constant displacements address them all.
struct TileBlock {
  int32_t q[8][kTokens];
  float d[kTokens];
  int32_t corr[kTokens];  // Q4_1 / Q5_1: the bits of float d_x x neg128
};
static_assert(sizeof(TileBlock) == kInt8PairTileBlockBytes, "packed_scratch_bytes sizes these");

// Tokens [t0, t0 + n) of the Q8_0 activation rows into nb TileBlocks; tokens past n are zero.
// Written in order, reading the n rows as n streams (writing a token at a time, 48 bytes apart,
// cost ~4% of a Q4_0 prefill).
template <GgmlType T>
void interleave_tile(const PackedArgs& a, int64_t t0, int n, TileBlock* dst) {
  const BlockQ8_0* blocks[kTokens];
  const ActBlockExtra* extras[kTokens];
  for (int c = 0; c < n; ++c) {
    const uint8_t* row = a.x + (t0 + c) * a.g.x_row_bytes;
    blocks[c] = reinterpret_cast<const BlockQ8_0*>(row);
    extras[c] = reinterpret_cast<const ActBlockExtra*>(row + a.g.extras_offset);
  }
  for (int64_t b = 0; b < a.g.nb; ++b) {
    TileBlock& t = dst[b];
    for (int s = 0; s < 8; ++s) {
      for (int c = 0; c < n; ++c) std::memcpy(&t.q[s][c], blocks[c][b].qs + 4 * s, 4);
      for (int c = n; c < kTokens; ++c) t.q[s][c] = 0;
    }
    for (int c = 0; c < n; ++c) {
      t.d[c] = extras[c][b].d;
      const int32_t neg128 = extras[c][b].neg128;
      t.corr[c] = T == GgmlType::kQ4_0    ? neg128 >> 4
                  : T == GgmlType::kQ5_0  ? neg128 >> 3
                  : T == GgmlType::kMXFP4 ? 3 * (neg128 >> 5)
                                          : neg128;
      if constexpr (has_min_scale(T)) t.corr[c] = std::bit_cast<int32_t>((float)neg128 * t.d[c]);
    }
    for (int c = n; c < kTokens; ++c) {
      t.d[c] = 0.0f;
      t.corr[c] = 0;
    }
  }
}

// Prefill tile of two groups (16 rows, one zmm per token) x C tokens: per lane exactly the
// arithmetic of x86::packed_tile (exact int32 isum, d = d_w * d_x, acc = fma(isum, d, acc)), so
// a row gives the same bits in a pair tile, a single-group tile or decode (Q4_1 / Q5_1: then the
// min term, packed.cc's block_fma). 512-bit dpbusd does
// twice the work per instruction, and the per-(token, block) scale work covers 16 rows, not 8.
template <GgmlType T, int C>
KVW_INLINE void pair_tile(const PackedArgs& a, int64_t grp, const TileBlock* xb, int64_t t0) {
  const uint8_t* g0 = a.w + grp * a.g.group_bytes;
  const int64_t gb = a.g.group_bytes;
  constexpr int kScaleBytes = x86::kGroupScaleBytes<T>;
  constexpr int kQuantBytes = x86::kGroupQuantBytes<T>;
  const int64_t quants = a.g.nb * kScaleBytes;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  // IQ4_NL's levels + 128 or MXFP4's + 12: unsigned for dpbusd, the offset in corr.
  alignas(16) int8_t levels[16];
  for (int i = 0; i < 16; ++i) {
    levels[i] = (int8_t)(T == GgmlType::kMXFP4 ? kMxfp4Values[i] + 12 : kIq4NlValues[i] + 128);
  }
  // The all-ones zero-masked form: the same broadcast, without the plain form's undefined
  // source operand, which GCC 12 reports as used uninitialized.
  const __m512i table = _mm512_maskz_broadcast_i32x4(
      0xFFFF, _mm_load_si128(reinterpret_cast<const __m128i*>(levels)));
  __m512 acc[C];
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < a.g.nb; ++b, ++xb) {
    __m512i isum[C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c)
      isum[c] = has_min_scale(T) ? _mm512_setzero_si512() : _mm512_set1_epi32(xb->corr[c]);
    if constexpr (T == GgmlType::kQ8_0) {
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        const __m512i w = load_pair(g0, gb, quants + b * 256 + 32 * s);
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
          isum[c] = _mm512_dpbusd_epi32(isum[c], w, _mm512_set1_epi32(xb->q[s][c]));
        }
      }
    } else if constexpr (T == GgmlType::kQ5_0 || T == GgmlType::kQ5_1) {
      // x86::q5_0_step on both groups: each step's fifth bits moved to bit 4.
      const __m512i bit4 = _mm512_set1_epi8(0x10);
      const __m512i fifth = load_pair(g0, gb, quants + b * kQuantBytes);
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        const __m512i v = load_pair(g0, gb, quants + b * kQuantBytes + 32 + 32 * s);
        const __m512i lo = _mm512_or_si512(_mm512_and_si512(v, low4),
                                           _mm512_and_si512(_mm512_slli_epi16(fifth, 4 - s), bit4));
        const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), low4),
                                           _mm512_and_si512(_mm512_srli_epi16(fifth, s), bit4));
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
          isum[c] = _mm512_dpbusd_epi32(isum[c], lo, _mm512_set1_epi32(xb->q[s][c]));
          isum[c] = _mm512_dpbusd_epi32(isum[c], hi, _mm512_set1_epi32(xb->q[s + 4][c]));
        }
      }
    } else {
      // Q4_0's / Q4_1's nibbles, or IQ4_NL's / MXFP4's looked up (x86::iq4_nl_isums,
      // x86::mxfp4_isums).
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        const __m512i v = load_pair(g0, gb, quants + b * kQuantBytes + 32 * s);
        __m512i lo = _mm512_and_si512(v, low4);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        if constexpr (T == GgmlType::kIQ4_NL || T == GgmlType::kMXFP4) {
          lo = _mm512_shuffle_epi8(table, lo);
          hi = _mm512_shuffle_epi8(table, hi);
        }
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
          isum[c] = _mm512_dpbusd_epi32(isum[c], lo, _mm512_set1_epi32(xb->q[s][c]));
          isum[c] = _mm512_dpbusd_epi32(isum[c], hi, _mm512_set1_epi32(xb->q[s + 4][c]));
        }
      }
    }
    const __m512 dw = T == GgmlType::kMXFP4 ? e8m0_pair(g0, gb, kScaleBytes * b)
                                            : fp16_pair(g0, gb, kScaleBytes * b);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(xb->d[c]));
      acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), d, acc[c]);
    }
    if constexpr (has_min_scale(T)) {
      const __m512 mw =
          _mm512_mul_ps(fp16_pair(g0, gb, kScaleBytes * b + 16), _mm512_set1_ps(-0x1p-7f));
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        acc[c] = _mm512_fmadd_ps(mw, _mm512_set1_ps(std::bit_cast<float>(xb->corr[c])), acc[c]);
      }
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < C; ++c) {
    _mm512_storeu_ps(a.y + (t0 + c) * a.n_rows + grp * kPackRows, acc[c]);
  }
}

// As x86::packed_groups, with group pairs on interleaved tiles (one copy per token block and
// thread, reused by every pair); an odd last group takes the single-group tile on the rows.
// xt: the thread's scratch, one token block's tiles (packed_scratch_bytes: ~256 KiB of
// activations plus a twelfth).
template <GgmlType T>
void pair_groups(const PackedArgs& a, int64_t g_begin, int64_t g_end, TileBlock* xt) {
  if (a.n_tokens == 1) return x86::packed_groups<DotAvx512Vnni, T, kTokens>(a, g_begin, g_end);
  x86::walk_token_blocks<kTokens, 2>(
      a.g.x_row_bytes, a.n_tokens, g_begin, g_end,
      [&](int64_t tb, int64_t te) {
        if (g_end - g_begin < 2) return;  // a lone group reads the rows in place
        const int64_t n_tiles = (te - tb + kTokens - 1) / kTokens;
        for (int64_t i = 0; i < n_tiles; ++i) {
          const int64_t t0 = tb + i * kTokens;
          interleave_tile<T>(a, t0, (int)std::min<int64_t>(kTokens, te - t0), xt + i * a.g.nb);
        }
      },
      [&](int64_t grp, int ng, int64_t tb, int64_t te) {
        if (ng == 2) {
          x86::token_tiles<kTokens>(tb, te, [&](auto n, int64_t t) {
            const TileBlock* xb = xt + (t - tb) / kTokens * a.g.nb;
            pair_tile<T, decltype(n)::value>(a, grp, xb, t);
          });
        } else {
          x86::token_tiles<kTokens>(tb, te, [&](auto n, int64_t t) {
            x86::packed_tile<DotAvx512Vnni, T, decltype(n)::value>(a, grp, t);
          });
        }
      });
}

void matmul_packed(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                   int64_t n_tokens, float* y, int ith, int nth, void* scratch) {
  if (is_float_type(wtype)) {
    return avx512::matmul_packed_float(wtype, w, n_rows, n_in, static_cast<const float*>(xq),
                                       n_tokens, y, ith, nth, scratch);
  }
  if (is_kquant_type(wtype)) {
    return avx512vnni::matmul_packed_kquant(wtype, w, n_rows, n_in, xq, n_tokens, y, ith, nth);
  }
  const PackedGeometry g = packed_geometry(wtype, n_rows, n_in);
  const RowRange rows = split_range(n_rows, ith, nth, kRowAlign);
  if (rows.begin >= rows.end || n_tokens <= 0) return;
  const PackedArgs a = {
      g, static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(xq), n_rows, n_tokens, y};
  const int64_t full = g.n_groups * kPackRows;
  const int64_t g_begin = rows.begin / kPackRows;
  const int64_t g_end = (rows.end < full ? rows.end : full) / kPackRows;
  TileBlock* xt = static_cast<TileBlock*>(scratch);
  if (wtype == GgmlType::kQ8_0) {
    pair_groups<GgmlType::kQ8_0>(a, g_begin, g_end, xt);
  } else if (wtype == GgmlType::kQ4_0) {
    pair_groups<GgmlType::kQ4_0>(a, g_begin, g_end, xt);
  } else if (wtype == GgmlType::kQ5_0) {
    pair_groups<GgmlType::kQ5_0>(a, g_begin, g_end, xt);
  } else if (wtype == GgmlType::kQ4_1) {
    pair_groups<GgmlType::kQ4_1>(a, g_begin, g_end, xt);
  } else if (wtype == GgmlType::kQ5_1) {
    pair_groups<GgmlType::kQ5_1>(a, g_begin, g_end, xt);
  } else if (wtype == GgmlType::kMXFP4) {
    pair_groups<GgmlType::kMXFP4>(a, g_begin, g_end, xt);
  } else {
    pair_groups<GgmlType::kIQ4_NL>(a, g_begin, g_end, xt);
  }
  if (rows.end > full) {
    matmul_packed_tail(wtype, w, n_rows, n_in, xq, n_tokens, y, rows.begin, rows.end);
  }
}

// The AVX-512 table's matmul, with one-token unpacked Q6_K (a tied output head) on the VNNI
// GEMV, which gives the same bits.
void matmul(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
            int64_t n_tokens, float* y, int ith, int nth) {
  if (wtype == GgmlType::kQ6_K && n_tokens == 1 &&
      avx512vnni::gemv_q6_k(w, n_rows, n_in, xq, y, ith, nth)) {
    return;
  }
  avx512_table().matmul(wtype, w, n_rows, n_in, xq, n_tokens, y, ith, nth);
}

}  // namespace

const KernelTable& avx512vnni_table() {
  static const KernelTable table = [] {
    KernelTable t = avx512_table();
    t.isa = "avx512vnni";
    t.matmul = matmul;
    t.matmul_packed = matmul_packed;
    return t;
  }();
  return table;
}

}  // namespace kvw::kernels
