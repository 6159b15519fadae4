// gguf/quant_internal.h: per-type reference row conversions behind dequantize_row/quantize_row.
// Private to src/gguf (tensor_types.cc dispatches, quant_k.cc implements the K-quants,
// quant_legacy.cc Q4_1/Q5_0/Q5_1/IQ4_NL, quant_k_low.cc Q2_K/Q3_K, quant_nonlinear.cc IQ4_XS and
// MXFP4).
// All functions are pure and thread-safe; n is a multiple of the type's block size.
#pragma once

#include <cstdint>

#include "gguf/quant_blocks.h"

namespace kvw::quant {

void dequantize_q4_k(const BlockQ4_K* src, float* dst, int64_t n);
void dequantize_q5_k(const BlockQ5_K* src, float* dst, int64_t n);
void dequantize_q6_k(const BlockQ6_K* src, float* dst, int64_t n);
void dequantize_q8_k(const BlockQ8_K* src, float* dst, int64_t n);

// Legacy 32-element types (quant_legacy.cc).
void dequantize_q4_1(const BlockQ4_1* src, float* dst, int64_t n);
void dequantize_q5_0(const BlockQ5_0* src, float* dst, int64_t n);
void dequantize_q5_1(const BlockQ5_1* src, float* dst, int64_t n);
void dequantize_iq4_nl(const BlockIQ4_NL* src, float* dst, int64_t n);
void quantize_q4_1(const float* src, BlockQ4_1* dst, int64_t n);
void quantize_q5_0(const float* src, BlockQ5_0* dst, int64_t n);
void quantize_q5_1(const float* src, BlockQ5_1* dst, int64_t n);
void quantize_iq4_nl(const float* src, BlockIQ4_NL* dst, int64_t n);

void quantize_q4_k(const float* src, BlockQ4_K* dst, int64_t n);
void quantize_q5_k(const float* src, BlockQ5_K* dst, int64_t n);
void quantize_q6_k(const float* src, BlockQ6_K* dst, int64_t n);
void quantize_q8_k(const float* src, BlockQ8_K* dst, int64_t n);

// Q2_K and Q3_K (quant_k_low.cc).
void dequantize_q2_k(const BlockQ2_K* src, float* dst, int64_t n);
void dequantize_q3_k(const BlockQ3_K* src, float* dst, int64_t n);
void quantize_q2_k(const float* src, BlockQ2_K* dst, int64_t n);
void quantize_q3_k(const float* src, BlockQ3_K* dst, int64_t n);

// Table-level types (quant_nonlinear.cc).
void dequantize_iq4_xs(const BlockIQ4_XS* src, float* dst, int64_t n);
void dequantize_mxfp4(const BlockMXFP4* src, float* dst, int64_t n);
void quantize_iq4_xs(const float* src, BlockIQ4_XS* dst, int64_t n);
void quantize_mxfp4(const float* src, BlockMXFP4* dst, int64_t n);

// Fitting helpers the K-quant quantisers share (quant_k.cc).
// Round to nearest, clamped to [lo, hi]; NaN maps to lo so float->int stays defined.
int clamp_round(float v, int lo, int hi);
struct MinScaleFit {
  float scale = 0.0f;  // x ~= scale * q - min
  float min = 0.0f;    // >= 0
};
// Fits x[0..n) ~= scale * q - min with q in [0, nmax] and min >= 0 (zero stays representable).
MinScaleFit fit_min_scale(const float* x, int n, int nmax);
// Fits x[0..n) ~= scale * q with q in [lo, -lo - 1] (lo < 0); the scale may be negative, so the
// largest-magnitude value can take level lo.
float fit_symmetric_scale(const float* x, int n, int lo);
// Index of the level of `levels[16]` nearest to v (the first on ties).
int nearest_level(const int8_t* levels, float v);

// ggml's packing of eight 6-bit (scale, min) pairs into 12 bytes (get_scale_min_k4):
// pairs 0..3 sit in the low 6 bits of bytes j and j+4; pairs 4..7 keep their low 4 bits in
// byte j+4 and their top 2 bits in the spare high bits of bytes j-4 (scale) and j (min).
void get_scale_min_k4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min);
void pack_scale_min_k4(const uint8_t scales[8], const uint8_t mins[8], uint8_t* q);

}  // namespace kvw::quant
