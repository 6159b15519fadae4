// kernels/x86/avx2_util.h: small AVX2/FMA/F16C helpers for the x86 kernel files.
// Every function is `static inline` on purpose: each ISA translation unit gets its own copy,
// so no copy compiled with wider ISA flags can be merged into code that runs on older CPUs.
#pragma once

#include <immintrin.h>

#include <cstdint>

#define KVW_INLINE __attribute__((always_inline)) inline

namespace kvw::kernels::x86 {

// Fixed lane order: (0+4, 1+5, 2+6, 3+7) then pairs, then the last two.
static KVW_INLINE float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static KVW_INLINE float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static KVW_INLINE float f16_scalar(uint16_t h) {
  return _cvtsh_ss(h);
}
static KVW_INLINE float bf16_scalar(uint16_t h) {
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128((int)h << 16)));
}

static KVW_INLINE __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
static KVW_INLINE __m256 load_bf16x8(const uint16_t* p) {
  const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}
static KVW_INLINE __m256i load_i8x32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// Sum of 32 signed int8 products into 8 int32 lanes: |w| * (x with w's sign), the unsigned x
// signed form maddubs needs. Exact (pair sums <= 2 * 128 * 127 < 2^15).
static KVW_INLINE __m256i dot_i8x32(__m256i w_abs, __m256i w, __m256i x) {
  const __m256i p16 = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// exp(x) for 8 lanes: Cephes-style range reduction x = n ln2 + r and a degree-6 polynomial.
// Max relative error ~2 ulp on [-87, 88]; inputs are clamped there.
static KVW_INLINE __m256 exp256(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// tanh(x) for 8 lanes: sign(x) (1 - t) / (1 + t) with t = exp(-2|x|) (exp256, so t never
// underflows to a denormal). Absolute error ~1e-7: near 0, where 1 - t cancels, the relative
// error grows, but a soft-capped score (cap x tanh) only ever needs the absolute one.
static KVW_INLINE __m256 tanh256(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
  const __m256 t = exp256(_mm256_mul_ps(_mm256_andnot_ps(sign, x), _mm256_set1_ps(-2.0f)));
  const __m256 y = _mm256_div_ps(_mm256_sub_ps(one, t), _mm256_add_ps(one, t));
  return _mm256_or_ps(y, _mm256_and_ps(x, sign));
}

// cap x tanh(x / cap): Gemma-2's soft-capping of attention scores (kernels.h AttnScores).
static KVW_INLINE __m256 softcap256(__m256 x, __m256 cap, __m256 inv_cap) {
  return _mm256_mul_ps(cap, tanh256(_mm256_mul_ps(x, inv_cap)));
}

}  // namespace kvw::kernels::x86
