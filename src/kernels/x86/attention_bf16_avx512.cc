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

}  // namespace kvw::kernels::avx512
