// gguf/quant_nonlinear.cc: scalar reference conversions of the types whose 4-bit codes index a
// table of 16 levels, IQ4_XS (kIq4NlValues, 6-bit sub-block scales) and MXFP4 (E2M1 levels,
// a power-of-two block scale); layouts in quant_blocks.h.
// Dequantisation computes each weight as ggml's dequantize_row_{iq4_xs,mxfp4} do; every
// product is exact in float (IQ4_XS: at most 11 + 5 + 7 significant bits; MXFP4: a power of
// two times a small integer), so the bits equal ggml's on any target.
// Quantisation is our own: nearest level, least-squares refit of each sub-block scale (IQ4_XS),
// then the levels re-picked against the scales as stored.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "gguf/quant_internal.h"

namespace kvw::quant {
namespace {

// 2^(e - 128): E8M0 exponent e, halved because kMxfp4Values are twice the E2M1 values.
// e = 0 and 1 give the subnormals 2^-128 and 2^-127; no code is NaN (ggml does the same).
float mxfp4_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

int iq4_xs_scale(const BlockIQ4_XS& b, int ib) {
  const int low = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F;
  const int high = (b.scales_h >> (2 * ib)) & 3;
  return low | (high << 4);
}

// Least-squares scale of one sub-block of 32 against its nearest kIq4NlValues levels, the
// signed value of largest magnitude first mapped to level -127 (as quantize_iq4_nl does).
float fit_iq4_scale(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax == 0.0f || !std::isfinite(amax)) return 0.0f;
  const float id = static_cast<float>(kIq4NlValues[0]) / max;
  double sum_xv = 0.0, sum_vv = 0.0;
  for (int j = 0; j < 32; ++j) {
    const int v = kIq4NlValues[nearest_level(kIq4NlValues, x[j] * id)];
    sum_xv += static_cast<double>(x[j]) * v;
    sum_vv += static_cast<double>(v) * v;
  }
  const double d = sum_vv > 0.0 ? sum_xv / sum_vv : 0.0;
  return std::isfinite(d) ? static_cast<float>(d) : 0.0f;
}

// Codes of 32 elements against level * dl, packed as IQ4_NL/MXFP4 (j low nibble, j + 16 high).
// dl == 0 or a non-finite quotient takes `zero_code`, a code whose level is nearest 0.
void pack_nearest(const int8_t* levels, const float* x, float dl, int zero_code, uint8_t* qs) {
  uint8_t q[32];
  for (int j = 0; j < 32; ++j) {
    const float v = dl != 0.0f ? x[j] / dl : NAN;
    q[j] = static_cast<uint8_t>(std::isfinite(v) ? nearest_level(levels, v) : zero_code);
  }
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
}

}  // namespace

void dequantize_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int ib = 0; ib < kQK_K / 32; ++ib, y += 32) {
      const float dl = d * static_cast<float>(iq4_xs_scale(x[i], ib) - 32);
      const uint8_t* qs = x[i].qs + 16 * ib;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * kIq4NlValues[qs[j] & 0x0F];
        y[j + 16] = dl * kIq4NlValues[qs[j] >> 4];
      }
    }
  }
}

void dequantize_mxfp4(const BlockMXFP4* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / kQKMxfp4; ++i, y += kQKMxfp4) {
    const float d = mxfp4_scale(x[i].e);
    for (int j = 0; j < kQKMxfp4 / 2; ++j) {
      y[j] = kMxfp4Values[x[i].qs[j] & 0x0F] * d;
      y[j + 16] = kMxfp4Values[x[i].qs[j] >> 4] * d;
    }
  }
}

// Sub-block scales fitted as IQ4_NL's, then quantised to 6 bits against a super-block scale
// that maps the one of largest magnitude to -32.
void quantize_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t n) {
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    float scales[8];
    float max_scale = 0.0f;
    for (int ib = 0; ib < 8; ++ib) {
      scales[ib] = fit_iq4_scale(x + 32 * ib);
      if (std::fabs(scales[ib]) > std::fabs(max_scale)) max_scale = scales[ib];
    }
    const float d0 = max_scale / -32.0f;
    y[i].d = f32_to_f16(std::isfinite(d0) ? d0 : 0.0f);
    const float d = f16_to_f32(y[i].d);
    y[i].scales_h = 0;
    std::memset(y[i].scales_l, 0, sizeof(y[i].scales_l));
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = d != 0.0f ? clamp_round(scales[ib] / d, -32, 31) : 0;
      const int s = ls + 32;
      y[i].scales_l[ib / 2] |= static_cast<uint8_t>((s & 0x0F) << (4 * (ib % 2)));
      y[i].scales_h = static_cast<uint16_t>(y[i].scales_h | ((s >> 4) << (2 * ib)));
      pack_nearest(kIq4NlValues, x + 32 * ib, d * ls, 8, y[i].qs + 16 * ib);
    }
  }
}

// The smallest exponent whose largest level (12 * 2^(e - 128)) covers the block's largest
// magnitude, then the nearest level per element.
void quantize_mxfp4(const float* x, BlockMXFP4* y, int64_t n) {
  for (int64_t i = 0; i < n / kQKMxfp4; ++i, x += kQKMxfp4) {
    float amax = 0.0f;
    for (int j = 0; j < kQKMxfp4; ++j) amax = std::max(amax, std::fabs(x[j]));
    int e = 254;
    if (std::isfinite(amax)) {
      // amax in [2^k, 2^(k+1)) needs e >= 126 + k at least; the loop then takes <= 3 steps.
      e = amax > 0.0f ? std::clamp(125 + std::ilogb(amax), 0, 254) : 0;
      while (e < 254 && 12.0f * mxfp4_scale(static_cast<uint8_t>(e)) < amax) ++e;
    }
    y[i].e = static_cast<uint8_t>(e);
    pack_nearest(kMxfp4Values, x, mxfp4_scale(y[i].e), 0, y[i].qs);
  }
}

}  // namespace kvw::quant
