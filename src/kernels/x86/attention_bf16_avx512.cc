// kernels/x86/attention_bf16_avx512.cc: the q.k products of AttnScores::bf16_dot (kernels.h) for
// the AVX-512 attention, in their own translation unit: only this file is compiled with
// -mavx512bf16, so the f32 paths' code is what it was, and nothing here runs unless the caller
// asked for bf16_dot on a CPU with AVX512_BF16 (attention_bf16_dot_supported).
//
// Every score is the same lane arithmetic wherever it is computed: q and k rounded to bf16
// (vcvtneps2bf16, nearest even), then acc = vdpbf16ps(acc, q pair j, k pair j) for j = 0, 1, ...
// (pair j = elements 2j and 2j + 1). A decode tile puts the query heads in the lanes of a __m256
// and broadcasts each K pair; a prefill tile puts positions in the lanes of a __m512 and
// broadcasts each q pair. The products commute, so both give every lane the same bits.
//
// PV likewise: the weights (f32 softmax, INT8 V scales folded in) rounded to bf16, V rows to bf16
// pairs of positions (2j, 2j + 1) of the 16-aligned chunk, so every tile and split pairs the same
// positions, and out[d] = vdpbf16ps(out[d], (w[2j], w[2j + 1]), (v_2j[d], v_2j+1[d])) over j in
// order after the f32 rescale: half the FMA instructions of the f32 path's PV. Decode and prefill
// tiles both put head-dim elements in the lanes and broadcast the weight pair.
#include <cstring>

// The shared header's prefetch helpers are static and unused here.
#pragma GCC diagnostic ignored "-Wunused-function"

#include "kernels/x86/attention_avx512_util.h"

namespace kvw::kernels::avx512 {
namespace {

// 16 floats from x (n of them, n <= 16) rounded to bf16 into dst.
KVW_INLINE void round16(const float* x, int32_t n, uint16_t* dst) {
  const __mmask16 m = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
  const __m256bh b = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x));
  _mm256_mask_storeu_epi16(dst, m, (__m256i)b);
}

// N pairs' q rows as bf16 pairs, q2[n][j].
template <int N>
KVW_INLINE void round_q(const ChunkPair* pairs, int32_t hd, uint32_t (*q2)[kMaxHeadDim / 2]) {
  for (int n = 0; n < N; ++n) {
    for (int32_t d = 0; d < hd; d += 16)
      round16(pairs[n].q + d, hd - d, reinterpret_cast<uint16_t*>(q2[n]) + d);
  }
}

KVW_INLINE __m512 dp16(__m512 acc, __m512i k, uint32_t q) {
  return _mm512_dpbf16_ps(acc, (__m512bh)k, (__m512bh)_mm512_set1_epi32((int)q));
}

// score_pairs / score_pairs2 (attention_avx512.cc) of G = 1 or 2 chunks, in bf16.
template <int N, int G>
void score_batch(const ChunkPair* pairs, const uint32_t* const* kt2, int32_t hd,
                 float* const* out) {
  alignas(64) uint32_t q2[N][kMaxHeadDim / 2];
  round_q<N>(pairs, hd, q2);
  __m512 acc[G][N];
  for (int g = 0; g < G; ++g) {
    for (int n = 0; n < N; ++n) acc[g][n] = _mm512_setzero_ps();
  }
  for (int32_t j = 0; j < hd / 2; ++j) {
    __m512i k[G];
    for (int g = 0; g < G; ++g) k[g] = _mm512_loadu_si512(kt2[g] + j * kAttnChunk);
    for (int n = 0; n < N; ++n) {
      for (int g = 0; g < G; ++g) acc[g][n] = dp16(acc[g][n], k[g], q2[n][j]);
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int n = 0; n < N; ++n) _mm512_storeu_ps(out[g] + n * kAttnChunk, acc[g][n]);
  }
}

template <int G>
void score_all_g(const ChunkPair* pairs, int np, const uint32_t* const* kt2, int32_t hd,
                 float (*const* pv)[kAttnChunk]) {
  constexpr int kBatch = 8;
  for (int k = 0; k < np;) {
    const int n = np - k >= kBatch ? kBatch : np - k >= 2 ? 2 : 1;
    float* out[G];
    for (int g = 0; g < G; ++g) out[g] = pv[g][k];
    if (n == kBatch) {
      score_batch<kBatch, G>(pairs + k, kt2, hd, out);
    } else if (n == 2) {
      score_batch<2, G>(pairs + k, kt2, hd, out);
    } else {
      score_batch<1, G>(pairs + k, kt2, hd, out);
    }
    k += n;
  }
}

}  // namespace

void bf16_pair_kt(float* kt, int32_t hd) {
  uint32_t* kt2 = reinterpret_cast<uint32_t*>(kt);
  for (int32_t j = 0; j < hd / 2; ++j) {
    // Rows 2j and 2j + 1 are read before pair row j (at or below them) is written.
    const __m512i lo = _mm512_cvtepu16_epi32(
        (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(kt + 2 * j * kAttnChunk)));
    const __m512i hi = _mm512_cvtepu16_epi32(
        (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(kt + (2 * j + 1) * kAttnChunk)));
    _mm512_storeu_si512(kt2 + j * kAttnChunk, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
  }
}

void score_all_bf16(const ChunkPair* pairs, int np, const float* kt2, int32_t hd,
                    float (*pv)[kAttnChunk]) {
  const uint32_t* const k[1] = {reinterpret_cast<const uint32_t*>(kt2)};
  float(*const out[1])[kAttnChunk] = {pv};
  score_all_g<1>(pairs, np, k, hd, out);
}

void score_all2_bf16(const ChunkPair* pairs, int np, const float* kt0, const float* kt1, int32_t hd,
                     float (*s0)[kAttnChunk], float (*s1)[kAttnChunk]) {
  const uint32_t* const k[2] = {reinterpret_cast<const uint32_t*>(kt0),
                                reinterpret_cast<const uint32_t*>(kt1)};
  float(*const out[2])[kAttnChunk] = {s0, s1};
  score_all_g<2>(pairs, np, k, hd, out);
}

void bf16_decode_q(const float* q, int ng, int32_t hd, uint32_t* qt2) {
  alignas(64) uint16_t row[kMaxHeadDim];
  for (int n = 0; n < kDecodeLanes; ++n) {
    if (n < ng) {
      for (int32_t d = 0; d < hd; d += 16) round16(q + (int64_t)n * hd + d, hd - d, row + d);
    } else {
      std::memset(row, 0, sizeof(uint16_t) * hd);
    }
    for (int32_t j = 0; j < hd / 2; ++j)
      std::memcpy(qt2 + j * kDecodeLanes + n, row + 2 * j, sizeof(uint32_t));
  }
}

void bf16_k_row(KvDtype dtype, const uint8_t* src, int32_t hd, uint16_t* dst) {
  for (int32_t d = 0; d < hd; d += 16) {
    __m512 x;
    switch (dtype) {
      case KvDtype::kBF16:  // already bf16: a copy
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + d),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * d)));
        continue;
      case KvDtype::kF16:
        x = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * d)));
        break;
      case KvDtype::kInt8:  // integers of [-127, 127]: exact in bf16
        x = _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + d))));
        break;
      default:
        x = _mm512_loadu_ps(reinterpret_cast<const float*>(src) + d);
        break;
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + d), (__m256i)_mm512_cvtneps_pbh(x));
  }
}

template <int32_t kHd>
KVW_INLINE void decode_scores(const uint32_t* qt2, const uint16_t* kbuf, int32_t hd_run,
                              float (*s)[kDecodeLanes]) {
  const int32_t hd = kHd > 0 ? kHd : hd_run;
  const uint32_t* k2 = reinterpret_cast<const uint32_t*>(kbuf);
  __m256 acc[kAttnChunk];
  for (int p = 0; p < kAttnChunk; ++p) acc[p] = _mm256_setzero_ps();
  for (int32_t j = 0; j < hd / 2; ++j) {
    const __m256bh q =
        (__m256bh)_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qt2 + j * kDecodeLanes));
    for (int p = 0; p < kAttnChunk; ++p) {
      acc[p] = _mm256_dpbf16_ps(acc[p], q, (__m256bh)_mm256_set1_epi32((int)k2[p * (hd / 2) + j]));
    }
  }
  for (int p = 0; p < kAttnChunk; ++p) _mm256_store_ps(s[p], acc[p]);
}

void bf16_decode_scores(const uint32_t* qt2, const uint16_t* kbuf, int32_t hd,
                        float (*s)[kDecodeLanes]) {
  if (hd == 64) {
    decode_scores<64>(qt2, kbuf, hd, s);
  } else if (hd == 128) {
    decode_scores<128>(qt2, kbuf, hd, s);
  } else {
    decode_scores<0>(qt2, kbuf, hd, s);
  }
}

namespace {

// One chunk's share of a bf16 PV: each pair's rescale, its weights as bf16 position pairs and
// the chunk's V pair rows (bf16_v_pairs).
struct PvChunk {
  const float* c;     // [pair]
  const uint32_t* w;  // [pair][kAttnChunk] (pairs in the first 8), or [8][kDecodeLanes] (kPosMajor)
  const uint32_t* vp;  // [8][hd]
};

// Words 2d and 2d + 1 <- words d and 16 + d: two rows' 16 bf16 each, side by side, as pairs.
KVW_INLINE __m512i interleave16(__m512i x) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                       23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, x);
}

// Dword d of a pair row: (row a[d0 + d], row b[d0 + d]) as bf16 (m: the elements to read; null
// rows read as zeros). BF16 rows are their words (rounding them again is the identity); the
// others go through f32, rounded to nearest even.
template <VRows kV>
KVW_INLINE __m512i pair16(const void* a, const void* b, int32_t d0, __mmask16 m) {
  if constexpr (kV == VRows::kBF16) {
    const auto words = [&](const void* r) {
      return r ? _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(r) + d0)
               : _mm256_setzero_si256();
    };
    return interleave16(_mm512_inserti64x4(_mm512_castsi256_si512(words(a)), words(b), 1));
  } else {
    const __m512 fa = a ? load_v<kV>(a, d0, m) : _mm512_setzero_ps();
    const __m512 fb = b ? load_v<kV>(b, d0, m) : _mm512_setzero_ps();
    return interleave16((__m512i)_mm512_cvtne2ps_pbh(fb, fa));  // fa in words 0..15
  }
}

template <VRows kV>
void v_pairs(const void* const* vrow, int la, int lb, int32_t hd, uint32_t* vp) {
  for (int j = 0; j < kAttnChunk / 2; ++j) {
    // Row pointers in registers: the stores below may alias vrow as far as the compiler knows.
    const void* a = 2 * j >= la && 2 * j < lb ? vrow[2 * j] : nullptr;
    const void* b = 2 * j + 1 >= la && 2 * j + 1 < lb ? vrow[2 * j + 1] : nullptr;
    uint32_t* dst = vp + j * hd;
    int32_t d = 0;
    for (; d + 16 <= hd; d += 16) _mm512_storeu_si512(dst + d, pair16<kV>(a, b, d, 0xFFFF));
    if (d < hd) {
      const __mmask16 m = (__mmask16)((1u << (hd - d)) - 1);
      _mm512_mask_storeu_epi32(dst + d, m, pair16<kV>(a, b, d, m));
    }
  }
}

// acc + w.lo * v.lo + w.hi * v.hi per lane (vdpbf16ps): one position pair's products.
KVW_INLINE __m512 dpv(__m512 acc, uint32_t w, __m512i v) {
  return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32((int)w), (__m512bh)v);
}

// accumulate_block (attention_avx512_util.h) in bf16: for N pairs with the lanes [a, b) of each
// of G chunks, out[n] = out[n] * c[n], then out[n] = dpbf16(out[n], w pair j, V pair j) over
// position pairs j from a / 2 to (b - 1) / 2 in order. A pair's position outside [a, b) has
// weight 0 and its V half is zeroed, so a row the pair does not attend (maybe loaded for another
// query, maybe inf) adds exactly +0, whatever tile or split it is in.
template <int N, int W, int G, bool kPosMajor>
KVW_INLINE void pv_block(float* const* out, const PvChunk* ch, int a, int b, int32_t hd, int32_t d,
                         __mmask16 tail) {
  __m512 acc[N][W];
  for (int n = 0; n < N; ++n) {
    for (int u = 0; u < W; ++u) acc[n][u] = _mm512_maskz_loadu_ps(tail, out[n] + d + 16 * u);
  }
  const int ja = a / 2, jb = (b + 1) / 2;
  for (int g = 0; g < G; ++g) {
    if (!all_ones<N>(ch[g].c)) {
      for (int n = 0; n < N; ++n) {
        const __m512 vc = _mm512_set1_ps(ch[g].c[n]);
        for (int u = 0; u < W; ++u) acc[n][u] = _mm512_mul_ps(acc[n][u], vc);
      }
    }
    for (int j = ja; j < jb; ++j) {
      // Words of position a - 1 (a odd) and b (b odd) zeroed.
      const __mmask32 keep =
          (j == ja && (a & 1) ? 0xAAAAAAAAu : ~0u) & (j == jb - 1 && (b & 1) ? 0x55555555u : ~0u);
      __m512i vv[W];
      for (int u = 0; u < W; ++u)
        vv[u] = _mm512_maskz_loadu_epi32(tail, ch[g].vp + j * hd + d + 16 * u);
      if (keep != ~0u) {
        for (int u = 0; u < W; ++u) vv[u] = _mm512_maskz_mov_epi16(keep, vv[u]);
      }
      for (int n = 0; n < N; ++n) {
        const uint32_t wp = ch[g].w[kPosMajor ? j * kDecodeLanes + n : n * kAttnChunk + j];
        for (int u = 0; u < W; ++u) acc[n][u] = dpv(acc[n][u], wp, vv[u]);
      }
    }
  }
  for (int n = 0; n < N; ++n) {
    for (int u = 0; u < W; ++u) _mm512_mask_storeu_ps(out[n] + d + 16 * u, tail, acc[n][u]);
  }
}

// accumulate_pairs' blocking: up to 4 pairs take 64 elements per pass, 8 take 32.
template <int N, int G, bool kPosMajor>
void pv_pairs(float* const* out, const PvChunk* ch, int a, int b, int32_t hd) {
  constexpr int kWide = N > 4 ? 2 : 4;
  int32_t d = 0;
  for (; d + 16 * kWide <= hd; d += 16 * kWide)
    pv_block<N, kWide, G, kPosMajor>(out, ch, a, b, hd, d, 0xFFFF);
  for (; d + 16 <= hd; d += 16) pv_block<N, 1, G, kPosMajor>(out, ch, a, b, hd, d, 0xFFFF);
  if (d < hd) {
    pv_block<N, 1, G, kPosMajor>(out, ch, a, b, hd, d, (__mmask16)((1u << (hd - d)) - 1));
  }
}

// accumulate_runs (attention_avx512.cc) in bf16: pairs with the same lanes go together, 8 at a
// time, else at most 4 (a decode's pairs all share one query's lanes).
template <int G, bool kPosMajor>
void pv_runs(const ChunkPair* pairs, int np, const PvChunk* chunks, int32_t hd) {
  for (int k = 0; k < np;) {
    int run = x86::same_range_run(pairs, k, np, kAccBatch);
    if (run < kAccBatch) run = run < 4 ? run : 4;
    float* out[kAccBatch];
    PvChunk ch[G];
    for (int n = 0; n < run; ++n) out[n] = pairs[k + n].out;
    for (int g = 0; g < G; ++g) {
      ch[g] = {chunks[g].c + k, chunks[g].w + (kPosMajor ? k : k * kAttnChunk), chunks[g].vp};
    }
    const int a = pairs[k].qa, b = pairs[k].qb;
    switch (run) {
      case 8:
        pv_pairs<8, G, kPosMajor>(out, ch, a, b, hd);
        break;
      case 4:
        pv_pairs<4, G, kPosMajor>(out, ch, a, b, hd);
        break;
      case 3:
        pv_pairs<3, G, kPosMajor>(out, ch, a, b, hd);
        break;
      case 2:
        pv_pairs<2, G, kPosMajor>(out, ch, a, b, hd);
        break;
      default:
        pv_pairs<1, G, kPosMajor>(out, ch, a, b, hd);
        break;
    }
    k += run;
  }
}

}  // namespace

void bf16_v_pairs(VRows rows, const void* const* vrow, int la, int lb, int32_t hd, uint32_t* vp) {
  switch (rows) {
    case VRows::kF16:
      return v_pairs<VRows::kF16>(vrow, la, lb, hd, vp);
    case VRows::kInt8:
      return v_pairs<VRows::kInt8>(vrow, la, lb, hd, vp);
    case VRows::kBF16:
      return v_pairs<VRows::kBF16>(vrow, la, lb, hd, vp);
    case VRows::kF32:
      return v_pairs<VRows::kF32>(vrow, la, lb, hd, vp);
  }
}

void bf16_pv_step(const ChunkPair* pairs, int np, int G, float (*const* w)[kAttnChunk],
                  const float* const* c, const uint32_t* const* vp, int32_t hd) {
  PvChunk ch[kAttnStepChunks];
  for (int g = 0; g < G; ++g) {
    // Row n's 16 weights -> its first 8 dwords, pair j = (w[2j], w[2j + 1]).
    for (int n = 0; n < np; ++n) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(w[g][n]),
                          (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(w[g][n])));
    }
    ch[g] = {c[g], reinterpret_cast<const uint32_t*>(w[g][0]), vp[g]};
  }
  if (G == 1) {
    pv_runs<1, false>(pairs, np, ch, hd);
  } else {
    pv_runs<kAttnStepChunks, false>(pairs, np, ch, hd);
  }
}

void bf16_pv_decode(const ChunkPair* pairs, int np, const float* w, const float* c,
                    const uint32_t* vp, int32_t hd) {
  // w2[j][lane] = (w[2j][lane], w[2j + 1][lane]): words of the two rows interleaved.
  alignas(64) uint32_t w2[kAttnChunk / 2][kDecodeLanes];
  for (int j = 0; j < kAttnChunk / 2; ++j) {
    const __m128i a = (__m128i)_mm256_cvtneps_pbh(_mm256_loadu_ps(w + 2 * j * kDecodeLanes));
    const __m128i b = (__m128i)_mm256_cvtneps_pbh(_mm256_loadu_ps(w + (2 * j + 1) * kDecodeLanes));
    _mm_store_si128(reinterpret_cast<__m128i*>(w2[j]), _mm_unpacklo_epi16(a, b));
    _mm_store_si128(reinterpret_cast<__m128i*>(w2[j] + 4), _mm_unpackhi_epi16(a, b));
  }
  const PvChunk ch = {c, &w2[0][0], vp};
  pv_runs<1, true>(pairs, np, &ch, hd);
}

}  // namespace kvw::kernels::avx512
