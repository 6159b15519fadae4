// gguf/quant_internal.h: per-type reference row conversions behind dequantize_row/quantize_row.
// Private to src/gguf (tensor_types.cc dispatches, quant_k.cc implements the K-quants,
// quant_legacy.cc Q4_1/Q5_0/Q5_1/IQ4_NL).
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

// ggml's packing of eight 6-bit (scale, min) pairs into 12 bytes (get_scale_min_k4):
// pairs 0..3 sit in the low 6 bits of bytes j and j+4; pairs 4..7 keep their low 4 bits in
// byte j+4 and their top 2 bits in the spare high bits of bytes j-4 (scale) and j (min).
void get_scale_min_k4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min);
void pack_scale_min_k4(const uint8_t scales[8], const uint8_t mins[8], uint8_t* q);

}  // namespace kvw::quant
