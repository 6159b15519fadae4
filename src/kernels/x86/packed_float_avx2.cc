// kernels/x86/packed_float_avx2.cc: the packed F32 / F16 / BF16 GEMM of the AVX2 tables: two ymm
// hold element i of a group's 16 rows (converted in registers; F16C for F16), and each token's
// x[i] is broadcast once for both. Prefill tiles are 16 rows x 6 tokens (12 accumulators, 2
// weights and a broadcast: 15 of 16 registers), decode tiles two groups x one token (4 chains).
#include <immintrin.h>

#include <cstdint>

#include "kernels/x86/avx2_util.h"
#include "kernels/x86/packed_float_driver.h"

namespace kvw::kernels::avx2 {
namespace {

using x86::FloatPackedArgs;

template <GgmlType T>
constexpr int64_t kStep = T == GgmlType::kF32 ? 64 : 32;  // bytes per element of 16 rows

// Rows 0-7 (half 0) or 8-15 (half 1) of one element.
template <GgmlType T>
KVW_INLINE __m256 load_half(const uint8_t* p, int half) {
  if constexpr (T == GgmlType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p) + 8 * half);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * half));
    if constexpr (T == GgmlType::kF16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

constexpr int64_t kPrefetchBytes = 2048;

struct Isa {
  static constexpr int kTokens = 6;
  static constexpr int kGroups = 1;  // 16 of 16 ymm registers are taken by one group's tile

  // Token c's x[i] is xt[i * kTokens + c]: one base register and a displacement.
  template <GgmlType T, int C, int G>
  static KVW_INLINE void tile(const FloatPackedArgs& a, int64_t grp, const float* xt, int64_t t0,
                              const uint8_t* next) {
    static_assert(G == 1, "AVX2 float tiles span one group");
    constexpr int64_t E = kStep<T>;
    const uint8_t* w = a.w + grp * a.group_bytes;
    const auto x_at = [&](int c, int64_t i) __attribute__((always_inline)) {
      return _mm256_broadcast_ss(xt + i * kTokens + c);
    };
    __m256 acc[2][C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[0][c] = acc[1][c] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 4 <= a.n_in; i += 4) {
      if (next != nullptr) {  // the next group's same elements into L2 (packed_float_driver.h)
#pragma GCC unroll 4
        for (int64_t line = 0; line < 4 * E; line += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(next + i * E + line), _MM_HINT_T1);
        }
      }
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) {
        const __m256 w0 = load_half<T>(w + u * E, 0);
        const __m256 w1 = load_half<T>(w + u * E, 1);
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const __m256 xv = x_at(c, u);
          acc[0][c] = _mm256_fmadd_ps(w0, xv, acc[0][c]);
          acc[1][c] = _mm256_fmadd_ps(w1, xv, acc[1][c]);
        }
      }
      w += 4 * E;
      xt += 4 * kTokens;
    }
    for (; i < a.n_in; ++i) {
      const __m256 w0 = load_half<T>(w, 0);
      const __m256 w1 = load_half<T>(w, 1);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const __m256 xv = x_at(c, 0);
        acc[0][c] = _mm256_fmadd_ps(w0, xv, acc[0][c]);
        acc[1][c] = _mm256_fmadd_ps(w1, xv, acc[1][c]);
      }
      w += E;
      xt += kTokens;
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      float* y = a.y + (t0 + c) * a.n_rows + grp * kFloatPackRows;
      _mm256_storeu_ps(y, acc[0][c]);
      _mm256_storeu_ps(y + 8, acc[1][c]);
    }
  }

  template <GgmlType T, int G>
  static KVW_INLINE void decode(const FloatPackedArgs& a, int64_t grp) {
    constexpr int64_t E = kStep<T>;
    const uint8_t* w = a.w + grp * a.group_bytes;
    const int64_t gb = a.group_bytes;
    const float* x = a.x;
    __m256 acc[G][2];
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) acc[g][0] = acc[g][1] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 4 <= a.n_in; i += 4) {
#pragma GCC unroll 2
      for (int g = 0; g < G; ++g) {
#pragma GCC unroll 4
        for (int64_t line = 0; line < 4 * E; line += 64) {
          _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(w) + g * gb +
                                                     line + kPrefetchBytes),
                       _MM_HINT_T0);
        }
      }
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) {
        const __m256 xv = _mm256_broadcast_ss(x + u);
#pragma GCC unroll 2
        for (int g = 0; g < G; ++g) {
          const uint8_t* p = w + g * gb + u * E;
          acc[g][0] = _mm256_fmadd_ps(load_half<T>(p, 0), xv, acc[g][0]);
          acc[g][1] = _mm256_fmadd_ps(load_half<T>(p, 1), xv, acc[g][1]);
        }
      }
      w += 4 * E;
      x += 4;
    }
    for (; i < a.n_in; ++i) {
      const __m256 xv = _mm256_broadcast_ss(x);
#pragma GCC unroll 2
      for (int g = 0; g < G; ++g) {
        const uint8_t* p = w + g * gb;
        acc[g][0] = _mm256_fmadd_ps(load_half<T>(p, 0), xv, acc[g][0]);
        acc[g][1] = _mm256_fmadd_ps(load_half<T>(p, 1), xv, acc[g][1]);
      }
      w += E;
      ++x;
    }
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) {
      _mm256_storeu_ps(a.y + (grp + g) * kFloatPackRows, acc[g][0]);
      _mm256_storeu_ps(a.y + (grp + g) * kFloatPackRows + 8, acc[g][1]);
    }
  }
};

}  // namespace

void matmul_packed_float(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in,
                         const float* x, int64_t n_tokens, float* y, int ith, int nth,
                         void* scratch) {
  static_assert(Isa::kTokens == kFloatTileTokensAvx2,
                "packed_scratch_bytes sizes the copies by this width");
  x86::matmul_packed_float<Isa>(wtype, w, n_rows, n_in, x, n_tokens, y, ith, nth,
                                static_cast<float*>(scratch));
}

}  // namespace kvw::kernels::avx2
