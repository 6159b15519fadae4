// gguf/quant_k_low.cc: scalar reference conversions of the 2- and 3-bit K-quants, Q2_K and Q3_K
// (256-element super-blocks of 16 sub-blocks of 16; layouts in quant_blocks.h).
// Dequantisation computes each weight as ggml's dequantize_row_q{2,3}_K does: a sub-block
// scale as float(d) * integer, times the integer level (both products exact in float: at most
// 11 + 4 + 2 significant bits), minus the Q2_K min; so the bits equal ggml's on any target.
// Quantisation is our own, simple: a least-squares fit per sub-block (quant_k.cc's helpers),
// sub-block scales rounded to 4 or 6 bits, then every element re-rounded against the scales as
// stored, so the error is what a reader sees.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "gguf/quant_internal.h"

namespace kvw::quant {
namespace {

// Element e of a super-block (e = 32 * c + i, i < 32) keeps its 2 low bits at bits 2 * (c % 4)
// of qs[32 * (c / 4) + i]; Q3_K keeps its third bit at bit c of hmask[i].
void pack_low2(const uint8_t levels[kQK_K], uint8_t qs[kQK_K / 4]) {
  std::memset(qs, 0, kQK_K / 4);
  for (int e = 0; e < kQK_K; ++e) {
    const int c = e / 32;
    qs[32 * (c / 4) + e % 32] |= static_cast<uint8_t>((levels[e] & 3) << (2 * (c % 4)));
  }
}

// Q3_K's 6-bit scale j (biased by 32) from its 12 packed bytes.
int q3_k_scale(const uint8_t* sc, int j) {
  const int low = j < 8 ? sc[j] & 0x0F : sc[j - 8] >> 4;
  const int high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
  return low | (high << 4);
}

void pack_q3_k_scales(const uint8_t s[16], uint8_t* sc) {
  std::memset(sc, 0, 12);
  for (int j = 0; j < 16; ++j) {
    sc[j % 8] |= static_cast<uint8_t>((s[j] & 0x0F) << (j < 8 ? 0 : 4));
    sc[8 + j % 4] |= static_cast<uint8_t>((s[j] >> 4) << (2 * (j / 4)));
  }
}

}  // namespace

void dequantize_q2_k(const BlockQ2_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = f16_to_f32(x[i].d);
    const float dmin = f16_to_f32(x[i].dmin);
    for (int c = 0; c < 8; ++c) {
      const uint8_t* q = x[i].qs + 32 * (c / 4);
      const int shift = 2 * (c % 4);
      for (int h = 0; h < 2; ++h) {
        const uint8_t sc = x[i].scales[2 * c + h];
        const float dl = d * (sc & 0x0F);
        const float ml = dmin * (sc >> 4);
        for (int l = 16 * h; l < 16 * h + 16; ++l) {
          y[32 * c + l] = dl * static_cast<float>((q[l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void dequantize_q3_k(const BlockQ3_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, y += kQK_K) {
    const float d = f16_to_f32(x[i].d);
    for (int c = 0; c < 8; ++c) {
      const uint8_t* q = x[i].qs + 32 * (c / 4);
      const int shift = 2 * (c % 4);
      for (int h = 0; h < 2; ++h) {
        const float dl = d * static_cast<float>(q3_k_scale(x[i].scales, 2 * c + h) - 32);
        for (int l = 16 * h; l < 16 * h + 16; ++l) {
          const int v = ((q[l] >> shift) & 3) - ((x[i].hmask[l] >> c) & 1 ? 0 : 4);
          y[32 * c + l] = dl * static_cast<float>(v);
        }
      }
    }
  }
}

// x ~= (d * sc) * q - (dmin * m) per sub-block of 16, q in [0, 3], sc and m 4-bit.
void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    MinScaleFit fits[16];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 16; ++j) {
      fits[j] = fit_min_scale(x + 16 * j, 16, 3);
      max_scale = std::max(max_scale, fits[j].scale);
      max_min = std::max(max_min, fits[j].min);
    }
    y[i].d = f32_to_f16(max_scale / 15.0f);
    y[i].dmin = f32_to_f16(max_min / 15.0f);
    const float d = f16_to_f32(y[i].d);
    const float dmin = f16_to_f32(y[i].dmin);
    uint8_t levels[kQK_K];
    for (int j = 0; j < 16; ++j) {
      const int ls = d > 0.0f ? clamp_round(fits[j].scale / d, 0, 15) : 0;
      const int lm = dmin > 0.0f ? clamp_round(fits[j].min / dmin, 0, 15) : 0;
      y[i].scales[j] = static_cast<uint8_t>(ls | (lm << 4));
      const float dl = d * ls;
      const float ml = dmin * lm;
      for (int l = 0; l < 16; ++l) {
        const float v = x[16 * j + l];
        levels[16 * j + l] = static_cast<uint8_t>(dl > 0.0f ? clamp_round((v + ml) / dl, 0, 3) : 0);
      }
    }
    pack_low2(levels, y[i].qs);
  }
}

// x ~= (d * s) * q per sub-block of 16, q in [-4, 3], s 6-bit signed; the sub-block scale of
// largest magnitude takes s = -32 (as Q6_K does with -128).
void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float scales[16];
    float max_scale = 0.0f;
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_symmetric_scale(x + 16 * j, 16, -4);
      if (std::fabs(scales[j]) > std::fabs(max_scale)) max_scale = scales[j];
    }
    const float iscale = max_scale != 0.0f ? -32.0f / max_scale : 0.0f;
    y[i].d = f32_to_f16(iscale != 0.0f ? 1.0f / iscale : 0.0f);
    const float d = f16_to_f32(y[i].d);
    uint8_t s[16];
    uint8_t levels[kQK_K];
    for (int j = 0; j < 16; ++j) {
      const int ls = clamp_round(iscale * scales[j], -32, 31);
      s[j] = static_cast<uint8_t>(ls + 32);
      const float dl = d * ls;
      for (int l = 0; l < 16; ++l) {
        const int q = dl != 0.0f ? clamp_round(x[16 * j + l] / dl, -4, 3) : 0;
        levels[16 * j + l] = static_cast<uint8_t>(q + 4);
      }
    }
    pack_q3_k_scales(s, y[i].scales);
    pack_low2(levels, y[i].qs);
    std::memset(y[i].hmask, 0, sizeof(y[i].hmask));
    for (int e = 0; e < kQK_K; ++e) {
      y[i].hmask[e % 32] |= static_cast<uint8_t>((levels[e] >> 2) << (e / 32));
    }
  }
}

}  // namespace kvw::quant
