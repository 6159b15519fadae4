// kernels/ref/matmul_ref.cc: scalar oracle for activation quantisation and matmul over every
// weight type. Quantised weights pair with Q8_0 (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q8_0) or Q8_K
// (K-quants) activations and take integer dot products per block, as ggml's vec_dot_q*_q8_* do
// (Q4_1/Q5_1/MXFP4 in packed.cc's matmul_gguf); float weights take f32; Q2_K/Q3_K/IQ4_XS go to
// matmul_dequant (dequant_matmul.cc), shared by every table. Pure
// functions of their arguments; safe to call from any number of threads on disjoint output.
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/half.h"
#include "gguf/quant_blocks.h"
#include "kernels/kernels_internal.h"

namespace kvw::kernels {
namespace ref {

// Scales are amax/127 and quants round half to even (nearbyint under the default rounding
// mode), the same operations the SIMD quantisers perform lane by lane, so all tables produce
// bit-identical activations.
void quantize_row_q8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK8_0; ++b, x += kQK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    for (int j = 0; j < kQK8_0; ++j) y[b].qs[j] = (int8_t)std::nearbyint(x[j] * id);
  }
}

void quantize_row_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    float amax = 0.0f;
    for (int j = 0; j < kQK_K; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = d;
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int j = g * 16; j < g * 16 + 16; ++j) {
        int q = (int)std::nearbyint(x[j] * id);
        q = q > 127 ? 127 : (q < -127 ? -127 : q);
        y[b].qs[j] = (int8_t)q;
        sum += q;
      }
      y[b].bsums[g] = (int16_t)sum;
    }
  }
}

void unpack_scale_min_k4(const uint8_t* q, uint8_t* sc, uint8_t* m) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      sc[j] = q[j] & 63;
      m[j] = q[j + 4] & 63;
    } else {
      sc[j] = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
      m[j] = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
  }
}

namespace {

float dot_f32(const float* w, const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += (double)w[i] * x[i];
  return (float)sum;
}

float dot_f16(const uint16_t* w, const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += (double)f16_to_f32(w[i]) * x[i];
  return (float)sum;
}

float dot_bf16(const uint16_t* w, const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += (double)bf16_to_f32(w[i]) * x[i];
  return (float)sum;
}

float dot_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb) {
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int sumi = 0;
    for (int j = 0; j < kQK8_0; ++j) sumi += w[b].qs[j] * x[b].qs[j];
    sum += (float)sumi * (f16_to_f32(w[b].d) * f16_to_f32(x[b].d));
  }
  return sum;
}

float dot_q4_0(const BlockQ4_0* w, const BlockQ8_0* x, int64_t nb) {
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int sumi = 0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      sumi += ((w[b].qs[j] & 0xF) - 8) * x[b].qs[j];
      sumi += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + kQK4_0 / 2];
    }
    sum += (float)sumi * (f16_to_f32(w[b].d) * f16_to_f32(x[b].d));
  }
  return sum;
}

// Q5_0 with matmul_packed's arithmetic (packed.cc: acc = fma(isum, d_w * d_x, acc)), so a
// matrix too small to pack gives the bits its packed form would, in every table.
float dot_q5_0(const BlockQ5_0* w, const BlockQ8_0* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    uint32_t qh;
    std::memcpy(&qh, w[b].qh, 4);
    int sumi = 0;
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const int lo = (w[b].qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
      const int hi = (w[b].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
      sumi += (lo - 16) * x[b].qs[j] + (hi - 16) * x[b].qs[j + kQK5_0 / 2];
    }
    acc = std::fma((float)sumi, f16_to_f32(w[b].d) * f16_to_f32(x[b].d), acc);
  }
  return acc;
}

// IQ4_NL with matmul_packed's arithmetic, as dot_q5_0.
float dot_iq4_nl(const BlockIQ4_NL* w, const BlockQ8_0* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int sumi = 0;
    for (int j = 0; j < kQK4_NL / 2; ++j) {
      sumi += kIq4NlValues[w[b].qs[j] & 0xF] * x[b].qs[j] +
              kIq4NlValues[w[b].qs[j] >> 4] * x[b].qs[j + kQK4_NL / 2];
    }
    acc = std::fma((float)sumi, f16_to_f32(w[b].d) * f16_to_f32(x[b].d), acc);
  }
  return acc;
}

// Sub-block j of 32 elements: scale sc[j], min m[j]; min term uses the Q8_K group sums.
float dot_q4_k(const BlockQ4_K* w, const BlockQ8_K* x, int64_t nb) {
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t sc[8], m[8];
    unpack_scale_min_k4(w[b].scales, sc, m);
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {
      const uint8_t* qs = w[b].qs + 32 * (j / 2);
      const int shift = (j % 2) * 4;
      int s = 0;
      for (int l = 0; l < 32; ++l) s += ((qs[l] >> shift) & 0xF) * x[b].qs[32 * j + l];
      sumi += sc[j] * s;
      summ += m[j] * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
    }
    sum += x[b].d * f16_to_f32(w[b].d) * (float)sumi - x[b].d * f16_to_f32(w[b].dmin) * (float)summ;
  }
  return sum;
}

// As Q4_K, plus bit j of qh[l] as the fifth bit of element 32 * j + l.
float dot_q5_k(const BlockQ5_K* w, const BlockQ8_K* x, int64_t nb) {
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t sc[8], m[8];
    unpack_scale_min_k4(w[b].scales, sc, m);
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {
      const uint8_t* qs = w[b].qs + 32 * (j / 2);
      const int shift = (j % 2) * 4;
      int s = 0;
      for (int l = 0; l < 32; ++l) {
        const int q = ((qs[l] >> shift) & 0xF) | (((w[b].qh[l] >> j) & 1) << 4);
        s += q * x[b].qs[32 * j + l];
      }
      sumi += sc[j] * s;
      summ += m[j] * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
    }
    sum += x[b].d * f16_to_f32(w[b].d) * (float)sumi - x[b].d * f16_to_f32(w[b].dmin) * (float)summ;
  }
  return sum;
}

// Q6_K element e (half h = e / 128, i = e % 128, l = i % 32, quarter k = i / 32):
// low 4 bits from ql[64h + l + 32 * (k % 2)] (nibble k / 2), high 2 bits from qh[32h + l] bits
// 2k..2k+1, value q - 32, scale scales[e / 16].
float dot_q6_k(const BlockQ6_K* w, const BlockQ8_K* x, int64_t nb) {
  float sum = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int sumi = 0;
    for (int g = 0; g < kQK_K / 16; ++g) {
      int s = 0;
      for (int e = g * 16; e < g * 16 + 16; ++e) {
        const int h = e / 128, l = e % 32, k = (e % 128) / 32;
        const uint8_t lo = w[b].ql[64 * h + l + 32 * (k % 2)];
        const int q =
            (((lo >> (4 * (k / 2))) & 0xF) | (((w[b].qh[32 * h + l] >> (2 * k)) & 3) << 4));
        s += (q - 32) * x[b].qs[e];
      }
      sumi += w[b].scales[g] * s;
    }
    sum += x[b].d * f16_to_f32(w[b].d) * (float)sumi;
  }
  return sum;
}

float dot_row(GgmlType wtype, const uint8_t* w, const uint8_t* x, int64_t n) {
  switch (wtype) {
    case GgmlType::kF32:
      return dot_f32(reinterpret_cast<const float*>(w), reinterpret_cast<const float*>(x), n);
    case GgmlType::kF16:
      return dot_f16(reinterpret_cast<const uint16_t*>(w), reinterpret_cast<const float*>(x), n);
    case GgmlType::kBF16:
      return dot_bf16(reinterpret_cast<const uint16_t*>(w), reinterpret_cast<const float*>(x), n);
    case GgmlType::kQ8_0:
      return dot_q8_0(reinterpret_cast<const BlockQ8_0*>(w), reinterpret_cast<const BlockQ8_0*>(x),
                      n / kQK8_0);
    case GgmlType::kQ4_0:
      return dot_q4_0(reinterpret_cast<const BlockQ4_0*>(w), reinterpret_cast<const BlockQ8_0*>(x),
                      n / kQK4_0);
    case GgmlType::kQ5_0:
      return dot_q5_0(reinterpret_cast<const BlockQ5_0*>(w), reinterpret_cast<const BlockQ8_0*>(x),
                      n / kQK5_0);
    case GgmlType::kIQ4_NL:
      return dot_iq4_nl(reinterpret_cast<const BlockIQ4_NL*>(w),
                        reinterpret_cast<const BlockQ8_0*>(x), n / kQK4_NL);
    case GgmlType::kQ4_K:
      return dot_q4_k(reinterpret_cast<const BlockQ4_K*>(w), reinterpret_cast<const BlockQ8_K*>(x),
                      n / kQK_K);
    case GgmlType::kQ5_K:
      return dot_q5_k(reinterpret_cast<const BlockQ5_K*>(w), reinterpret_cast<const BlockQ8_K*>(x),
                      n / kQK_K);
    case GgmlType::kQ6_K:
      return dot_q6_k(reinterpret_cast<const BlockQ6_K*>(w), reinterpret_cast<const BlockQ8_K*>(x),
                      n / kQK_K);
    case GgmlType::kQ4_1:  // matmul_gguf
    case GgmlType::kQ5_1:
    case GgmlType::kQ2_K:  // matmul_dequant
    case GgmlType::kQ3_K:
    case GgmlType::kIQ4_XS:
    case GgmlType::kMXFP4:  // matmul_gguf
    case GgmlType::kQ8_K:
      break;
  }
  CHECK(false) << "matmul: unsupported weight type " << (uint32_t)wtype;
  return 0.0f;
}

}  // namespace

void quantize_act(GgmlType wtype, const float* x, int64_t n_tokens, int64_t n_in, void* dst,
                  int ith, int nth) {
  const RowRange tokens = split_range(n_tokens, ith, nth, 1);
  const int64_t row_bytes = act_row_bytes(wtype, n_in);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t t = tokens.begin; t < tokens.end; ++t) {
    const float* xt = x + t * n_in;
    switch (act_type(wtype)) {
      case GgmlType::kQ8_0:
        quantize_row_q8_0(xt, out + t * row_bytes, n_in);
        write_act_extras(out + t * row_bytes, n_in / kQK8_0);
        break;
      case GgmlType::kQ8_K:
        quantize_row_q8_k(xt, out + t * row_bytes, n_in);
        break;
      default:
        std::memcpy(out + t * row_bytes, xt, n_in * sizeof(float));
        break;
    }
  }
}

void matmul(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
            int64_t n_tokens, float* y, int ith, int nth) {
  // packed.cc's scalar int8 rows: the packed arithmetic's bits.
  if (wtype == GgmlType::kMXFP4 || has_min_scale(wtype))
    return matmul_gguf(wtype, w, n_rows, n_in, xq, n_tokens, y, ith, nth);
  if (is_dequant_type(wtype)) {
    return matmul_dequant(wtype, w, n_rows, n_in, static_cast<const float*>(xq), n_tokens, y, ith,
                          nth);
  }
  const MatmulGeometry g = matmul_geometry(wtype, n_in);
  const RowRange rows = split_range(n_rows, ith, nth, kRowAlign);
  const auto* w8 = static_cast<const uint8_t*>(w);
  const auto* x8 = static_cast<const uint8_t*>(xq);
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    for (int64_t t = 0; t < n_tokens; ++t) {
      y[t * n_rows + r] = dot_row(wtype, w8 + r * g.w_row_bytes, x8 + t * g.x_row_bytes, n_in);
    }
  }
}

}  // namespace ref
}  // namespace kvw::kernels
