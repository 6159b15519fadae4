// core/half.h: IEEE fp16 and bfloat16 <-> fp32 conversions (scalar, exact, round-to-nearest-even).
// Kernels use F16C/AVX paths; these are the portable definitions they are tested against.
#pragma once

#include <cstdint>
#include <cstring>

namespace kvw {

inline float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    // zero or subnormal: value = mant * 2^-24
    float v = (float)mant * bits_to_f32(0x33800000u);  // 2^-24
    return (sign != 0) ? -v : v;
  }
  if (exp == 31) return bits_to_f32(sign | 0x7f800000u | (mant << 13));
  return bits_to_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_to_bits(f);
  const uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0);  // inf/nan
  if (ax >= 0x477ff000u) return sign | 0x7c00;                                   // overflow
  if (ax < 0x38800000u) {                                                        // subnormal
    // round(|f| * 2^24) with ties to even, via float add trick
    float v = bits_to_f32(ax) + 0.5f;  // 0.5 = 2^-1: aligns so mantissa holds |f|*2^24
    return sign | (uint16_t)(f32_to_bits(v) - 0x3f000000u);
  }
  const uint32_t mant_odd = (ax >> 13) & 1;
  uint32_t r = ax + 0xc8000fffu + mant_odd;  // rebias exponent (-112<<23) and round to even
  return sign | (uint16_t)(r >> 13);
}

inline float bf16_to_f32(uint16_t h) {
  return bits_to_f32((uint32_t)h << 16);
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);  // quiet nan
  x += 0x7fffu + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

}  // namespace kvw
