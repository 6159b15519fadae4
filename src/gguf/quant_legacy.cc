// gguf/quant_legacy.cc: scalar row conversions of the 32-element types llama-quantize falls back
// to where rows are not a multiple of 256 (Q5_0, Q4_1, Q5_1) and of IQ4_NL.
// Dequantisation follows ggml's dequantize_row_* expression by expression (bit-identical);
// Q4_1/Q5_0/Q5_1 quantisation follows ggml's *_ref quantisers (same rounding, same bytes).
// IQ4_NL quantisation is our own: nearest level, then a least-squares refit of the scale.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "gguf/quant_internal.h"

namespace kvw::quant {
namespace {

// Bit j of a block's qh word (little-endian in the file, whatever the host).
uint32_t load_qh(const uint8_t qh[4]) {
  return (uint32_t)qh[0] | ((uint32_t)qh[1] << 8) | ((uint32_t)qh[2] << 16) |
         ((uint32_t)qh[3] << 24);
}

void store_qh(uint32_t v, uint8_t qh[4]) {
  for (int k = 0; k < 4; ++k) qh[k] = (uint8_t)(v >> (8 * k));
}

// Truncation of v clamped to [0, hi] in float first, so NaN/inf inputs stay defined (NaN -> 0).
uint8_t level(float v, float hi) {
  const float c = std::clamp(v, 0.0f, hi);
  return std::isnan(c) ? 0 : (uint8_t)c;
}

struct MinMax {
  float min = FLT_MAX;
  float max = -FLT_MAX;
};

MinMax min_max(const float* x, int n) {
  MinMax r;
  for (int j = 0; j < n; ++j) {
    r.min = std::min(r.min, x[j]);
    r.max = std::max(r.max, x[j]);
  }
  return r;
}

// The signed value of largest magnitude (ggml's "max" of Q4_0/Q5_0/IQ4_NL).
float signed_amax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

}  // namespace

int nearest_level(const int8_t* levels, float v) {
  int best = 0;
  float best_err = std::fabs(v - levels[0]);
  for (int k = 1; k < 16; ++k) {
    const float err = std::fabs(v - levels[k]);
    if (err < best_err) {
      best_err = err;
      best = k;
    }
  }
  return best;
}

void dequantize_q4_1(const BlockQ4_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_1; ++i) {
    const float d = f16_to_f32(x[i].d);
    const float m = f16_to_f32(x[i].m);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      y[i * kQK4_1 + j] = (x[i].qs[j] & 0x0F) * d + m;
      y[i * kQK4_1 + j + kQK4_1 / 2] = (x[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_q5_0(const BlockQ5_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_0; ++i) {
    const float d = f16_to_f32(x[i].d);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const int x0 = ((x[i].qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - 16;
      const int x1 = ((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
      y[i * kQK5_0 + j] = x0 * d;
      y[i * kQK5_0 + j + kQK5_0 / 2] = x1 * d;
    }
  }
}

void dequantize_q5_1(const BlockQ5_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_1; ++i) {
    const float d = f16_to_f32(x[i].d);
    const float m = f16_to_f32(x[i].m);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      const int x0 = (x[i].qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
      const int x1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      y[i * kQK5_1 + j] = x0 * d + m;
      y[i * kQK5_1 + j + kQK5_1 / 2] = x1 * d + m;
    }
  }
}

void dequantize_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_NL; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK4_NL / 2; ++j) {
      y[i * kQK4_NL + j] = d * kIq4NlValues[x[i].qs[j] & 0x0F];
      y[i * kQK4_NL + j + kQK4_NL / 2] = d * kIq4NlValues[x[i].qs[j] >> 4];
    }
  }
}

// ggml's reference: 16 levels from the block's min to its max.
void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_1; ++i) {
    const float* xb = x + i * kQK4_1;
    const MinMax mm = min_max(xb, kQK4_1);
    const float d = (mm.max - mm.min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(mm.min);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      const uint8_t q0 = level((xb[j] - mm.min) * id + 0.5f, 15.0f);
      const uint8_t q1 = level((xb[j + kQK4_1 / 2] - mm.min) * id + 0.5f, 15.0f);
      y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
    }
  }
}

// ggml's reference: as Q4_0 with 32 levels, the signed value of largest magnitude maps to -16.
void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_0; ++i) {
    const float* xb = x + i * kQK5_0;
    const float d = signed_amax(xb, kQK5_0) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const uint8_t q0 = level(xb[j] * id + 16.5f, 31.0f);
      const uint8_t q1 = level(xb[j + kQK5_0 / 2] * id + 16.5f, 31.0f);
      y[i].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= (uint32_t)(q0 >> 4) << j;
      qh |= (uint32_t)(q1 >> 4) << (j + kQK5_0 / 2);
    }
    store_qh(qh, y[i].qh);
  }
}

// ggml's reference: 32 levels from the block's min to its max.
void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK5_1; ++i) {
    const float* xb = x + i * kQK5_1;
    const MinMax mm = min_max(xb, kQK5_1);
    const float d = (mm.max - mm.min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(mm.min);
    uint32_t qh = 0;
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      const uint8_t q0 = level((xb[j] - mm.min) * id + 0.5f, 31.0f);
      const uint8_t q1 = level((xb[j + kQK5_1 / 2] - mm.min) * id + 0.5f, 31.0f);
      y[i].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= (uint32_t)(q0 >> 4) << j;
      qh |= (uint32_t)(q1 >> 4) << (j + kQK5_1 / 2);
    }
    store_qh(qh, y[i].qh);
  }
}

// The signed value of largest magnitude first maps to the -127 level; each element then takes
// its nearest level and the scale is refitted by least squares, sum(x*v) / sum(v*v), which never
// increases the block's squared error for those levels.
void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK4_NL; ++i) {
    const float* xb = x + i * kQK4_NL;
    const float d0 = signed_amax(xb, kQK4_NL) / (float)kIq4NlValues[0];
    const float id = d0 != 0.0f && std::isfinite(d0) ? 1.0f / d0 : 0.0f;
    uint8_t q[kQK4_NL];
    double sum_xv = 0.0, sum_vv = 0.0;
    for (int j = 0; j < kQK4_NL; ++j) {
      const float v = xb[j] * id;
      q[j] =
          (uint8_t)(std::isnan(v) ? 8
                                  : nearest_level(kIq4NlValues, v));  // level 8 is 1, nearest to 0
      sum_xv += (double)xb[j] * kIq4NlValues[q[j]];
      sum_vv += (double)kIq4NlValues[q[j]] * kIq4NlValues[q[j]];
    }
    const double d = sum_vv > 0.0 ? sum_xv / sum_vv : 0.0;
    y[i].d = f32_to_f16(id != 0.0f && std::isfinite(d) ? (float)d : 0.0f);
    for (int j = 0; j < kQK4_NL / 2; ++j) {
      y[i].qs[j] = (uint8_t)(q[j] | (q[j + kQK4_NL / 2] << 4));
    }
  }
}

}  // namespace kvw::quant
