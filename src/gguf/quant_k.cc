// gguf/quant_k.cc: scalar reference conversions for the K-quants (256-element super-blocks).
// Dequantisation mirrors ggml's dequantize_row_q{4,5,6,8}_K operation for operation (bit-exact).
// Quantisation fits each sub-block with a small least-squares search (the idea of ggml's
// make_qkx2_quants, unweighted), then quantises the sub-block scales to 6 or 8 bits and
// re-rounds every element against the scales as stored, so the error is what a reader sees.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "gguf/quant_internal.h"

namespace kvw::quant {
namespace {

// Shared by Q4_K (nmax 15) and Q5_K (nmax 31): fills d, dmin, scales and the levels L.
void quantize_k_scales(const float* x, int nmax, uint16_t* d, uint16_t* dmin, uint8_t* packed,
                       uint8_t levels[kQK_K]) {
  MinScaleFit fits[8];
  float max_scale = 0.0f;
  float max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    fits[j] = fit_min_scale(x + 32 * j, 32, nmax);
    max_scale = std::max(max_scale, fits[j].scale);
    max_min = std::max(max_min, fits[j].min);
  }
  const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
  uint8_t ls[8];
  uint8_t lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = static_cast<uint8_t>(clamp_round(inv_scale * fits[j].scale, 0, 63));
    lm[j] = static_cast<uint8_t>(clamp_round(inv_min * fits[j].min, 0, 63));
  }
  pack_scale_min_k4(ls, lm, packed);
  *d = f32_to_f16(max_scale / 63.0f);
  *dmin = f32_to_f16(max_min / 63.0f);
  const float d_stored = f16_to_f32(*d);
  const float dmin_stored = f16_to_f32(*dmin);
  for (int j = 0; j < 8; ++j) {
    const float sc = d_stored * ls[j];
    const float m = dmin_stored * lm[j];
    for (int i = 0; i < 32; ++i) {
      levels[32 * j + i] =
          sc > 0.0f ? static_cast<uint8_t>(clamp_round((x[32 * j + i] + m) / sc, 0, nmax)) : 0;
    }
  }
}

}  // namespace

int clamp_round(float v, int lo, int hi) {
  if (!(v >= static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(std::nearbyint(v));
}

// Fits x[0..n) ~= scale * q - min with q in [0, nmax] and min >= 0 (ggml keeps the offset
// non-positive so zero is always representable). Tries 21 rounding grids around the
// min/max grid, refitting scale and min by least squares for each; keeps the best.
MinScaleFit fit_min_scale(const float* x, int n, int nmax) {
  float xmin = 0.0f;
  float xmax = 0.0f;
  for (int i = 0; i < n; ++i) {
    xmin = std::min(xmin, x[i]);
    xmax = std::max(xmax, x[i]);
  }
  MinScaleFit best{(xmax - xmin) / nmax, -xmin};
  if (!(xmax > xmin)) return {0.0f, -xmin};
  auto error_of = [&](float scale, float min) {
    float err = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int q = clamp_round((x[i] + min) / scale, 0, nmax);
      const float diff = scale * q - min - x[i];
      err += diff * diff;
    }
    return err;
  };
  float best_err = error_of(best.scale, best.min);
  for (int step = -10; step <= 10; ++step) {
    const float iscale = (nmax + 0.1f * step) / (xmax - xmin);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0, sum_x = 0;
    for (int i = 0; i < n; ++i) {
      const float l = static_cast<float>(clamp_round(iscale * (x[i] - xmin), 0, nmax));
      sum_l += l;
      sum_l2 += l * l;
      sum_xl += l * x[i];
      sum_x += x[i];
    }
    const float det = n * sum_l2 - sum_l * sum_l;
    if (!(det > 0.0f)) continue;
    float scale = (n * sum_xl - sum_x * sum_l) / det;
    float offset = (sum_l2 * sum_x - sum_l * sum_xl) / det;  // x ~= scale * l + offset
    if (offset > 0.0f) {
      offset = 0.0f;
      scale = sum_xl / sum_l2;
    }
    if (!(scale > 0.0f)) continue;
    const float err = error_of(scale, -offset);
    if (err < best_err) {
      best_err = err;
      best = {scale, -offset};
    }
  }
  return best;
}

// Q6_K calls it with lo = -32, Q3_K with lo = -4.
float fit_symmetric_scale(const float* x, int n, int lo) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax == 0.0f || !std::isfinite(amax)) return 0.0f;
  float best_scale = max / static_cast<float>(lo);
  float best_err = INFINITY;
  for (int step = -9; step <= 9; ++step) {
    const float iscale = -(static_cast<float>(-lo) + 0.1f * step) / max;
    float sum_xl = 0, sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const float l = static_cast<float>(clamp_round(iscale * x[i], lo, -lo - 1));
      sum_xl += x[i] * l;
      sum_l2 += l * l;
    }
    if (!(sum_l2 > 0.0f)) continue;
    const float scale = sum_xl / sum_l2;
    float err = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float diff = scale * clamp_round(x[i] / scale, lo, -lo - 1) - x[i];
      err += diff * diff;
    }
    if (err < best_err) {
      best_err = err;
      best_scale = scale;
    }
  }
  return best_scale;
}

void get_scale_min_k4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void pack_scale_min_k4(const uint8_t scales[8], const uint8_t mins[8], uint8_t* q) {
  std::memset(q, 0, kKScaleBytes);
  for (int j = 0; j < 8; ++j) {
    const uint8_t ls = scales[j] & 63;
    const uint8_t lm = mins[j] & 63;
    if (j < 4) {
      q[j] |= ls;
      q[j + 4] |= lm;
    } else {
      q[j + 4] = static_cast<uint8_t>((ls & 0x0F) | ((lm & 0x0F) << 4));
      q[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      q[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
}

void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* q = x[i].qs;
    const float d = f16_to_f32(x[i].d);
    const float min = f16_to_f32(x[i].dmin);
    for (int j = 0, is = 0; j < kQK_K; j += 64, is += 2, q += 32) {
      uint8_t sc, m;
      get_scale_min_k4(is, x[i].scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0x0F) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    const float d = f16_to_f32(x[i].d);
    const float min = f16_to_f32(x[i].dmin);
    uint8_t u1 = 1, u2 = 2;  // bit of qh[l] holding the 5th bit of this pair of sub-blocks
    for (int j = 0, is = 0; j < kQK_K; j += 64, is += 2, ql += 32) {
      uint8_t sc, m;
      get_scale_min_k4(is, x[i].scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = min * m;
      get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0x0F) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_to_f32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int k = 0; k < kQK_K; k += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

void dequantize_q8_k(const BlockQ8_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    for (int j = 0; j < kQK_K; ++j) *y++ = x[i].d * x[i].qs[j];
  }
}

void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t n) {
  uint8_t levels[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    quantize_k_scales(x, 15, &y[i].d, &y[i].dmin, y[i].scales, levels);
    // Each 64-element chunk: the first 32 in low nibbles, the next 32 in high nibbles.
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQK_K; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l)
        q[l] = static_cast<uint8_t>(levels[j + l] | (levels[j + l + 32] << 4));
    }
  }
}

void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t n) {
  uint8_t levels[kQK_K];
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    quantize_k_scales(x, 31, &y[i].d, &y[i].dmin, y[i].scales, levels);
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    uint8_t* ql = y[i].qs;
    uint8_t m1 = 1, m2 = 2;
    for (int j = 0; j < kQK_K; j += 64, ql += 32) {
      for (int l = 0; l < 32; ++l) {
        const int l1 = levels[j + l];
        const int l2 = levels[j + l + 32];
        if (l1 > 15) y[i].qh[l] |= m1;
        if (l2 > 15) y[i].qh[l] |= m2;
        ql[l] = static_cast<uint8_t>((l1 & 0x0F) | ((l2 & 0x0F) << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float scales[16];
    float max_scale = 0.0f;  // signed scale of largest magnitude
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_symmetric_scale(x + 16 * j, 16, -32);
      if (std::fabs(scales[j]) > std::fabs(max_scale)) max_scale = scales[j];
    }
    // Like ggml: the largest scale maps to int8 -128, the rest clamp to [-128, 127].
    const float iscale = max_scale != 0.0f ? -128.0f / max_scale : 0.0f;
    y[i].d = f32_to_f16(iscale != 0.0f ? 1.0f / iscale : 0.0f);
    const float d = f16_to_f32(y[i].d);
    uint8_t levels[kQK_K];
    for (int j = 0; j < 16; ++j) {
      y[i].scales[j] = static_cast<int8_t>(clamp_round(iscale * scales[j], -128, 127));
      const float dj = d * y[i].scales[j];
      for (int l = 0; l < 16; ++l) {
        const int q = dj != 0.0f ? clamp_round(x[16 * j + l] / dj, -32, 31) : 0;
        levels[16 * j + l] = static_cast<uint8_t>(q + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t* lv = levels + j + l;
        ql[l] = static_cast<uint8_t>((lv[0] & 0x0F) | ((lv[64] & 0x0F) << 4));
        ql[l + 32] = static_cast<uint8_t>((lv[32] & 0x0F) | ((lv[96] & 0x0F) << 4));
        qh[l] = static_cast<uint8_t>((lv[0] >> 4) | ((lv[32] >> 4) << 2) | ((lv[64] >> 4) << 4) |
                                     ((lv[96] >> 4) << 6));
      }
    }
  }
}

void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float amax = 0.0f;
    for (int j = 0; j < kQK_K; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float iscale = amax > 0.0f && std::isfinite(amax) ? 127.0f / amax : 0.0f;
    y[i].d = iscale != 0.0f ? 1.0f / iscale : 0.0f;
    for (int j = 0; j < kQK_K; ++j) {
      y[i].qs[j] = static_cast<int8_t>(clamp_round(iscale * x[j], -127, 127));
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * g + l];
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
  }
}

}  // namespace kvw::quant
