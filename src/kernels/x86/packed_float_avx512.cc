// kernels/x86/packed_float_avx512.cc: the packed F32 / F16 / BF16 GEMM of the AVX-512 tables:
// one zmm holds element i of a group's 16 rows (converted in registers), and each token's x[i] is
// broadcast once for two such vectors. Prefill tiles are two groups (32 rows) x 12 tokens, or one
// group for an odd last one; decode tiles two groups x one token. Measured, 5632x2048 F16 at 512
// tokens on 1 thread (2-core Xeon, FMA probe 215 GFLOP/s): 113 GFLOP/s with 16-row tiles (one
// broadcast load and one conversion per 12 fmas), 126 with 32-row tiles, 138 with token blocks of
// 1 MiB, 154-156 once the step loop stopped spilling and the next pair is prefetched to L2
// (2048x5632: 127-135 -> 149-155).
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "kernels/x86/avx2_util.h"
#include "kernels/x86/packed_float_driver.h"

namespace kvw::kernels::avx512 {
namespace {

using x86::FloatPackedArgs;

template <GgmlType T>
constexpr int64_t kStep = T == GgmlType::kF32 ? 64 : 32;  // bytes per element of 16 rows

template <GgmlType T>
KVW_INLINE __m512 load_rows(const uint8_t* p) {
  if constexpr (T == GgmlType::kF32) {
    return _mm512_loadu_ps(p);
  } else if constexpr (T == GgmlType::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  } else {
    const __m512i h =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
  }
}

// Distance of decode's software prefetch in each group's stream.
constexpr int64_t kPrefetchBytes = 2048;

struct Isa {
  static constexpr int kTokens = 12;

  static constexpr int kGroups = 2;

  // Groups grp .. grp + G - 1 (16 G rows) x C tokens. Token c's x[i] is xt[i * kTokens + c],
  // broadcast once into a register for the G weight vectors: with G = 2 each broadcast load and
  // each conversion serves twice the fmas it would alone (24 accumulators, 2 weights and the
  // broadcast: 27 of 32 registers).
  template <GgmlType T, int C, int G>
  static KVW_INLINE void tile(const FloatPackedArgs& a, int64_t grp, const float* xt, int64_t t0,
                              const uint8_t* next) {
    constexpr int64_t E = kStep<T>;
    const uint8_t* w = a.w + grp * a.group_bytes;
    const int64_t gb = a.group_bytes;
    __m512 acc[G][C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
#pragma GCC unroll 2
      for (int g = 0; g < G; ++g) acc[g][c] = _mm512_setzero_ps();
    }
    const auto step = [&](const uint8_t* wp, const float* xp) __attribute__((always_inline)) {
      __m512 wv[G];
#pragma GCC unroll 2
      for (int g = 0; g < G; ++g) wv[g] = load_rows<T>(wp + g * gb);
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        const __m512 xv = _mm512_set1_ps(xp[c]);
#pragma GCC unroll 2
        for (int g = 0; g < G; ++g) acc[g][c] = _mm512_fmadd_ps(wv[g], xv, acc[g][c]);
      }
    };
    // One cache line of each group per iteration (2 steps of F16/BF16, 1 of F32), and with
    // `next` the same line of the groups that come next into L2, so that their first tile does
    // not wait for DRAM. Not unrolled further: with more steps in flight the 27 live vectors
    // spilled to the stack (8 moves and a spill per 4 steps).
    constexpr int S = 64 / E;
    const auto run = [&](auto prefetch) __attribute__((always_inline)) {
      int64_t i = 0;
      for (; i + S <= a.n_in; i += S) {
        if constexpr (decltype(prefetch)::value) {
#pragma GCC unroll 2
          for (int g = 0; g < G; ++g) _mm_prefetch((const char*)next + g * gb + i * E, _MM_HINT_T1);
        }
#pragma GCC unroll 2
        for (int u = 0; u < S; ++u) step(w + u * E, xt + u * kTokens);
        w += S * E;
        xt += S * kTokens;
      }
      for (; i < a.n_in; ++i) {
        step(w, xt);
        w += E;
        xt += kTokens;
      }
    };
    if (next != nullptr) {
      run(std::true_type{});
    } else {
      run(std::false_type{});
    }
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
#pragma GCC unroll 2
      for (int g = 0; g < G; ++g) {
        _mm512_storeu_ps(a.y + (t0 + c) * a.n_rows + (grp + g) * kFloatPackRows, acc[g][c]);
      }
    }
  }

  template <GgmlType T, int G>
  static KVW_INLINE void decode(const FloatPackedArgs& a, int64_t grp) {
    constexpr int64_t E = kStep<T>;
    const uint8_t* w = a.w + grp * a.group_bytes;
    const int64_t gb = a.group_bytes;
    const float* x = a.x;
    __m512 acc[G];
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 4 <= a.n_in; i += 4) {
      // 4 elements are 2 (F16/BF16) or 4 (F32) lines of each group.
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
        const __m512 xv = _mm512_set1_ps(x[u]);
#pragma GCC unroll 2
        for (int g = 0; g < G; ++g) {
          acc[g] = _mm512_fmadd_ps(load_rows<T>(w + g * gb + u * E), xv, acc[g]);
        }
      }
      w += 4 * E;
      x += 4;
    }
    for (; i < a.n_in; ++i) {
      const __m512 xv = _mm512_set1_ps(*x);
#pragma GCC unroll 2
      for (int g = 0; g < G; ++g) acc[g] = _mm512_fmadd_ps(load_rows<T>(w + g * gb), xv, acc[g]);
      w += E;
      ++x;
    }
#pragma GCC unroll 2
    for (int g = 0; g < G; ++g) _mm512_storeu_ps(a.y + (grp + g) * kFloatPackRows, acc[g]);
  }
};

}  // namespace

void matmul_packed_float(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in,
                         const float* x, int64_t n_tokens, float* y, int ith, int nth,
                         void* scratch) {
  static_assert(Isa::kTokens == kFloatTileTokensAvx512,
                "packed_scratch_bytes sizes the copies by this width");
  x86::matmul_packed_float<Isa>(wtype, w, n_rows, n_in, x, n_tokens, y, ith, nth,
                                static_cast<float*>(scratch));
}

}  // namespace kvw::kernels::avx512
