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
constexpr int kQKMxfp4 = 32;
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

// Q2_K: 16 sub-blocks of 16; x = d * (sc & 15) * q - dmin * (sc >> 4), q in [0, 3].
// Each 128-element half uses 32 qs bytes: element 32 * k + l of the half (k = 0..3) is
// bits 2k..2k+1 of byte l; scales[2c] covers elements 32c..32c+15, scales[2c+1] the next 16.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // low nibble: scale, high nibble: min (4 bits each)
  uint8_t qs[kQK_K / 4];       // 2-bit quants
  uint16_t d;                  // fp16 super-block scale for the scales
  uint16_t dmin;               // fp16 super-block scale for the mins
};
static_assert(sizeof(BlockQ2_K) == 84);

// Q3_K: 16 sub-blocks of 16; x = d * (s - 32) * (q - 4), q in [0, 7]: low 2 bits in qs as in
// Q2_K, the third bit of element 32 * c + l is bit c of hmask[l] (c = 0..7). The 16 6-bit
// scales s: low 4 bits of scale j in byte j (j < 8, low nibble) or byte j - 8 (high nibble),
// top 2 bits at bits 2 * (j / 4) of byte 8 + j % 4.
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];  // third bit of each quant
  uint8_t qs[kQK_K / 4];     // low 2 bits
  uint8_t scales[12];        // 6-bit scales, biased by 32
  uint16_t d;                // fp16 super-block scale
};
static_assert(sizeof(BlockQ3_K) == 110);

// IQ4_XS: 8 sub-blocks of 32; x = d * (ls - 32) * kIq4NlValues[q]. Sub-block b's 6-bit ls has
// its low 4 bits in nibble b % 2 of scales_l[b / 2] and its top 2 in bits 2b of scales_h;
// its 16 qs bytes hold elements j (low nibble) and j + 16 (high) as IQ4_NL does.
struct BlockIQ4_XS {
  uint16_t d;                    // fp16 super-block scale
  uint16_t scales_h;             // top 2 bits of each sub-block scale
  uint8_t scales_l[kQK_K / 64];  // low 4 bits, two sub-blocks per byte
  uint8_t qs[kQK_K / 2];         // 4-bit indices into kIq4NlValues
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// MXFP4 (OCP microscaling FP4): x = 2^(e - 128) * kMxfp4Values[q]; nibbles as Q4_0.
// The levels are twice the E2M1 values, hence the exponent bias of 128 rather than 127.
struct BlockMXFP4 {
  uint8_t e;                 // E8M0 shared exponent
  uint8_t qs[kQKMxfp4 / 2];  // 4-bit E2M1 codes
};
static_assert(sizeof(BlockMXFP4) == 17);
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// Q8_K: activation format for K-quant dot products.
struct BlockQ8_K {
  float d;                    // scale
  int8_t qs[kQK_K];           // quants
  int16_t bsums[kQK_K / 16];  // sums of each group of 16 quants
};
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace kvw
