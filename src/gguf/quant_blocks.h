// gguf/quant_blocks.h: exact byte layouts of ggml quantisation blocks (little-endian, packed).
// These structs are the on-disk format; kernels read weights through them in place.
#pragma once

#include <cstdint>

namespace kvw {

constexpr int kQK4_0 = 32;
constexpr int kQK4_1 = 32;
constexpr int kQK5_0 = 32;
constexpr int kQK5_1 = 32;
constexpr int kQK4_NL = 32;
constexpr int kQK8_0 = 32;
constexpr int kQK_K = 256;
constexpr int kKScaleBytes = 12;

// Q4_0: x = d * (q - 8); element j in low nibble of qs[j], element j+16 in high nibble.
struct BlockQ4_0 {
  uint16_t d;              // fp16 scale
  uint8_t qs[kQK4_0 / 2];  // 4-bit quants
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q4_1: x = d * q + m; nibbles as Q4_0 (element j low, j+16 high nibble of qs[j]).
struct BlockQ4_1 {
  uint16_t d;              // fp16 scale
  uint16_t m;              // fp16 min
  uint8_t qs[kQK4_1 / 2];  // 4-bit quants
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q5_0: x = d * (q - 16); low 4 bits as Q4_0, the fifth bit of element j is bit j of the
// little-endian uint32 qh (element j+16: bit j+16).
struct BlockQ5_0 {
  uint16_t d;              // fp16 scale
  uint8_t qh[4];           // fifth bits
  uint8_t qs[kQK5_0 / 2];  // low 4 bits
};
static_assert(sizeof(BlockQ5_0) == 22);

// Q5_1: x = d * q + m; quants as Q5_0.
struct BlockQ5_1 {
  uint16_t d;              // fp16 scale
  uint16_t m;              // fp16 min
  uint8_t qh[4];           // fifth bits
  uint8_t qs[kQK5_1 / 2];  // low 4 bits
};
static_assert(sizeof(BlockQ5_1) == 24);

// IQ4_NL: x = d * kIq4NlValues[q]; nibbles as Q4_0, indices into a non-linear 16-level table.
struct BlockIQ4_NL {
  uint16_t d;               // fp16 scale
  uint8_t qs[kQK4_NL / 2];  // 4-bit indices
};
static_assert(sizeof(BlockIQ4_NL) == 18);
// ggml's kvalues_iq4nl: the 16 levels IQ4_NL (and IQ4_XS) indices select.
inline constexpr int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// Q8_0: x = d * q.
struct BlockQ8_0 {
  uint16_t d;         // fp16 scale
  int8_t qs[kQK8_0];  // quants
};
static_assert(sizeof(BlockQ8_0) == 34);

// Q4_K: 8 sub-blocks of 32; x = d * sc * q - dmin * m, with 6-bit (sc, m) packed in scales.
struct BlockQ4_K {
  uint16_t d;                    // fp16 super-block scale for quantised scales
  uint16_t dmin;                 // fp16 super-block scale for quantised mins
  uint8_t scales[kKScaleBytes];  // 6-bit scales and mins
  uint8_t qs[kQK_K / 2];         // 4-bit quants
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q5_K: as Q4_K plus a fifth bit per element in qh.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];  // high bit of each quant
  uint8_t qs[kQK_K / 2];  // low 4 bits
};
static_assert(sizeof(BlockQ5_K) == 176);

// Q6_K: 16 sub-blocks of 16; x = d * scales[i] * (q - 32).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      // low 4 bits
  uint8_t qh[kQK_K / 4];      // high 2 bits
  int8_t scales[kQK_K / 16];  // 8-bit sub-block scales
  uint16_t d;                 // fp16 super-block scale
};
static_assert(sizeof(BlockQ6_K) == 210);

// Q8_K: activation format for K-quant dot products.
struct BlockQ8_K {
  float d;                    // scale
  int8_t qs[kQK_K];           // quants
  int16_t bsums[kQK_K / 16];  // sums of each group of 16 quants
};
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace kvw
