// kernels/x86/avx512vnni_gemv.cc: the avx512vnni table's one-token matmul (GEMV) of Q6_K weights
// left in the GGUF layout. That is a tied output head (token_embd, read row by row by the
// embedding lookup, so never packed): a third of the bytes of a Q4_K_M Qwen3-0.6B decode step,
// where the AVX2 tile (avx2_kquants.cc, Q6KOps) streamed 9 GB/s per core, half the step's time.
//
// Bits: Q6KOps defines them. Per super-block it sums, in 8 int32 lanes, lane i = sum over the 8
// 32-byte quant vectors (h, k) of scale x (sum of (q - 32) x over bytes 4i..4i+3), then
// acc = fma(x.d * w.d, float(lane), acc) and finally x86::hsum(acc). Here a zmm holds two of
// those vectors (k = 2p, 2p + 1: 64 contiguous bytes of ql and of the activation), dpbusd from
// -32 x the activation's 4-byte sums gives each 4-byte sum of (q - 32) x (|.| <= 4 x 32 x 128 =
// 16384, an exact int16 in the low half of its dword), dpwssd multiplies it by its scale (high
// half 0) into the lane, and one integer add folds the two halves into Q6KOps' 8 lanes. The
// integer lanes are exact, so the float steps after them, the same ones, give the same bits.
// Compiled with the AVX-512 + AVX512-VNNI flags; only the avx512vnni table calls it.
#include <immintrin.h>

#include <cstdint>

#include "gguf/quant_blocks.h"
#include "kernels/kernels_internal.h"
#include "kernels/x86/avx2_util.h"

namespace kvw::kernels::avx512vnni {
namespace {

// Super-blocks whose activation offsets fit on the stack (n_in <= 16384; 16 KiB).
constexpr int64_t kMaxSuperBlocks = 64;

// Bytes ahead of the super-block being read that each one prefetches (the rows of a thread are
// one contiguous stream). Busy 2-vCPU EPYC, Qwen3 Q4_K_M tg64 at 2 threads, 3 interleaved runs:
// 48.9 / 48.0 / 37.5 t/s with, 42.1 / 46.7 / 38.7 without; kernels_bench at 1 thread saw no
// difference between 0, 1024 and 2048 bytes.
constexpr int64_t kPrefetchAhead = 1024;

// -32 x the sum of each 4 activation bytes, per 64-byte quarter v of each super-block: dpbusd
// from it adds sum q x, which makes sum (q - 32) x.
void q6_k_offsets(const BlockQ8_K* x, int64_t nb, __m512i* off) {
  const __m512i thirty_two = _mm512_set1_epi8(32);
  for (int64_t b = 0; b < nb; ++b) {
    for (int v = 0; v < 4; ++v) {
      const __m512i xv = _mm512_loadu_si512(x[b].qs + 64 * v);
      off[4 * b + v] = _mm512_sub_epi32(
          _mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), thirty_two, xv));
    }
  }
}

KVW_INLINE float q6_k_row(const BlockQ6_K* w, const BlockQ8_K* x, const __m512i* off, int64_t nb) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), high2 = _mm512_set1_epi8(0x30);
  const __m512i low16 = _mm512_set1_epi32(0xFFFF);
  // qh's bits for k = 0 | 1 sit at << 4 | << 2, for k = 2 | 3 at >> 0 | >> 2 (Q6KOps).
  const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i shr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const BlockQ6_K* blk = w + b;
    const uintptr_t ahead = reinterpret_cast<uintptr_t>(blk) + kPrefetchAhead;
#pragma GCC unroll 4
    for (int line = 0; line < 4; ++line) {
      _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * line), _MM_HINT_T0);
    }
    // Scale of lane j of quarter v: scales[4 v + j / 4], as int16 in the dword's low half.
    const __m512i sc = _mm512_and_si512(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales))),
        low16);
    __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(blk->ql + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qh + 32 * h)));
      // (A & C) | B: the low nibbles, then the two high bits (0xEC = (0xF0 & 0xAA) | 0xCC).
      const __m512i q01 = _mm512_ternarylogic_epi32(
          ql, _mm512_and_si512(_mm512_sllv_epi16(qh, shl), high2), low4, 0xEC);
      const __m512i q23 = _mm512_ternarylogic_epi32(
          _mm512_srli_epi16(ql, 4), _mm512_and_si512(_mm512_srlv_epi16(qh, shr), high2), low4,
          0xEC);
      const __m512i t01 =
          _mm512_dpbusd_epi32(off[4 * b + 2 * h], q01, _mm512_loadu_si512(x[b].qs + 128 * h));
      const __m512i t23 = _mm512_dpbusd_epi32(off[4 * b + 2 * h + 1], q23,
                                              _mm512_loadu_si512(x[b].qs + 128 * h + 64));
      const __m512i idx01 = _mm512_srli_epi32(
          _mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                           _mm512_set1_epi32(32 * h)),
          2);
      const __m512i idx23 = _mm512_add_epi32(idx01, _mm512_set1_epi32(4));
      sumi = _mm512_dpwssd_epi32(sumi, t01, _mm512_permutexvar_epi32(idx01, sc));
      sumi = _mm512_dpwssd_epi32(sumi, t23, _mm512_permutexvar_epi32(idx23, sc));
    }
    const __m256i lanes =
        _mm256_add_epi32(_mm512_castsi512_si256(sumi), _mm512_extracti64x4_epi64(sumi, 1));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(x[b].d * x86::f16_scalar(blk->d)),
                          _mm256_cvtepi32_ps(lanes), acc);
  }
  return x86::hsum(acc);
}

}  // namespace

bool gemv_q6_k(const void* w, int64_t n_rows, int64_t n_in, const void* xq, float* y, int ith,
               int nth) {
  const int64_t nb = n_in / kQK_K;
  if (n_in % kQK_K != 0 || nb > kMaxSuperBlocks) return false;
  const RowRange rows = split_range(n_rows, ith, nth, kRowAlign);
  const auto* x = static_cast<const BlockQ8_K*>(xq);
  __m512i off[4 * kMaxSuperBlocks];
  q6_k_offsets(x, nb, off);
  const auto* w8 = static_cast<const uint8_t*>(w);
  const int64_t row_bytes = nb * (int64_t)sizeof(BlockQ6_K);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    y[r] = q6_k_row(reinterpret_cast<const BlockQ6_K*>(w8 + r * row_bytes), x, off, nb);
  }
  return true;
}

}  // namespace kvw::kernels::avx512vnni
