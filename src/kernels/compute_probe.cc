// kernels/compute_probe.cc: FMA and int8 peak probes (see compute_probe.h). Each ISA's loop is a
// function with a target attribute, called only after __builtin_cpu_supports said yes.
#include "kernels/compute_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvw::kernels {
namespace {

constexpr int64_t kIters = 1 << 21;  // per repetition and thread: ~10 ms at a few GHz
constexpr int kRepetitions = 5;

// Each loop returns an accumulator so the work cannot be dropped; `ops` gets the operations
// one iteration performs. 10 independent chains hide the FMA / dot latency (4-5 cycles) at two
// issues per cycle.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) float fma_avx512(int64_t iters, double* ops) {
  __m512 acc[10];
  for (int i = 0; i < 10; ++i) acc[i] = _mm512_set1_ps((float)i);
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 10; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  *ops = 10.0 * 16 * 2;
  __m512 s = acc[0];
  for (int i = 1; i < 10; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float out[16];  // (not _mm512_reduce_add_ps: GCC 12 warns inside it)
  _mm512_store_ps(out, s);
  return out[0] + out[15];
}

__attribute__((target("avx2,fma"))) float fma_avx2(int64_t iters, double* ops) {
  __m256 acc[10];
  for (int i = 0; i < 10; ++i) acc[i] = _mm256_set1_ps((float)i);
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 10; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  *ops = 10.0 * 8 * 2;
  alignas(32) float out[8];
  __m256 s = acc[0];
  for (int i = 1; i < 10; ++i) s = _mm256_add_ps(s, acc[i]);
  _mm256_store_ps(out, s);
  return out[0] + out[7];
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) float int8_avx512_vnni(int64_t iters,
                                                                              double* ops) {
  __m512i acc[10];
  for (int i = 0; i < 10; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 10; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  }
  *ops = 10.0 * 64 * 2;
  __m512i s = acc[0];
  for (int i = 1; i < 10; ++i) s = _mm512_add_epi32(s, acc[i]);
  alignas(64) int32_t out[16];
  _mm512_store_si512(out, s);
  return (float)(out[0] + out[15]);
}

__attribute__((target("avx2,avxvnni"))) float int8_avx_vnni(int64_t iters, double* ops) {
  __m256i acc[10];
  for (int i = 0; i < 10; ++i) acc[i] = _mm256_set1_epi32(i);
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 10; ++i) acc[i] = _mm256_dpbusd_avx_epi32(acc[i], a, b);
  }
  *ops = 10.0 * 32 * 2;
  __m256i s = acc[0];
  for (int i = 1; i < 10; ++i) s = _mm256_add_epi32(s, acc[i]);
  return (float)_mm256_extract_epi32(s, 0);
}

// maddubs (u8 x s8 pairs into int16) then madd (pairs into int32) and add: the AVX2 dot product
// without VNNI, three instructions per 32 (ymm) or 64 (zmm) multiply-adds.
__attribute__((target("avx512f,avx512bw"))) float int8_avx512_maddubs(int64_t iters, double* ops) {
  __m512i acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2), one = _mm512_set1_epi16(1);
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 8; ++i) {
      acc[i] = _mm512_add_epi32(acc[i], _mm512_madd_epi16(_mm512_maddubs_epi16(a, b), one));
    }
  }
  *ops = 8.0 * 64 * 2;
  __m512i s = acc[0];
  for (int i = 1; i < 8; ++i) s = _mm512_add_epi32(s, acc[i]);
  alignas(64) int32_t out[16];
  _mm512_store_si512(out, s);
  return (float)(out[0] + out[15]);
}

__attribute__((target("avx2"))) float int8_avx2_maddubs(int64_t iters, double* ops) {
  __m256i acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_set1_epi32(i);
  const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2), one = _mm256_set1_epi16(1);
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 8; ++i) {
      acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), one));
    }
  }
  *ops = 8.0 * 32 * 2;
  __m256i s = acc[0];
  for (int i = 1; i < 8; ++i) s = _mm256_add_epi32(s, acc[i]);
  return (float)_mm256_extract_epi32(s, 0);
}
#endif

float fma_scalar(int64_t iters, double* ops) {
  float acc[4] = {0, 1, 2, 3};
  for (int64_t it = 0; it < iters; ++it) {
    for (float& a : acc) a = a * 0.999f + 0.001f;
  }
  *ops = 4.0 * 2;
  return acc[0] + acc[3];
}

float int8_scalar(int64_t iters, double* ops) {
  int32_t acc[4] = {0, 1, 2, 3};
  volatile int8_t b = -2;
  const int8_t bv = b;
  for (int64_t it = 0; it < iters; ++it) {
    for (int32_t& a : acc) a += 3 * bv;
  }
  *ops = 4.0 * 2;
  return (float)(acc[0] + acc[3]);
}

using Loop = float (*)(int64_t, double*);

// Ops per second of `loop` on every thread of the pool at once, best repetition.
double measure(ThreadPool& pool, Loop loop) {
  std::vector<float> sink(pool.num_threads() * 16);
  double best = 0, ops = 0;
  for (int rep = 0; rep < kRepetitions; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int ith, int) { sink[ith * 16] = loop(kIters, &ops); });
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    best = std::max(best, ops * (double)kIters * pool.num_threads() / dt.count());
  }
  return best;
}

}  // namespace

ComputePeak measure_compute_peak(ThreadPool& pool) {
  ComputePeak p{0, "scalar", 0, "scalar"};
  Loop fma = fma_scalar, int8 = int8_scalar;
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  if (avx512) {
    fma = fma_avx512, p.fma_kind = "avx512";
  } else if (avx2) {
    fma = fma_avx2, p.fma_kind = "avx2";
  }
  if (avx512 && __builtin_cpu_supports("avx512vnni")) {
    int8 = int8_avx512_vnni, p.int8_kind = "avx512-vnni";
  } else if (avx2 && __builtin_cpu_supports("avxvnni")) {
    int8 = int8_avx_vnni, p.int8_kind = "avx-vnni";
  } else if (avx512) {
    int8 = int8_avx512_maddubs, p.int8_kind = "avx512bw-maddubs";
  } else if (avx2) {
    int8 = int8_avx2_maddubs, p.int8_kind = "avx2-maddubs";
  }
#endif
  p.fma_gflops = measure(pool, fma) / 1e9;
  p.int8_gops = measure(pool, int8) / 1e9;
  return p;
}

}  // namespace kvw::kernels
