// kernels/dequant_matmul.cc: matmul of the weight types that have no integer kernel (Q2_K,
// Q3_K, IQ4_XS): each weight row is dequantised to f32 with gguf's reference
// conversion, a chunk at a time, and dotted with the f32 activations. This is the ref table's
// kernel; the x86 tables run x86/avx2_dequant.cc, the same arithmetic in SIMD, so the output is
// bit-identical across tables as well as across token counts and thread counts.
//
// Arithmetic per (row, token): kLanes float accumulators, element i adds w_i * x_i to lane
// i % kLanes as one fused multiply-add (std::fma: exactly rounded, so the SIMD kernels' FMA
// instructions give the same bits), elements in order; the
// lanes are then summed pairwise in a fixed tree. Tiling over tokens only changes how often a
// chunk is dequantised, never the order of a row's sum.
//
// Why not an integer path like Q4_0's: Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL (llama-quantize's fallbacks on
// rows that are not a multiple of 256) and MXFP4 have one now (packed.cc). Q2_K/Q3_K/IQ4_XS
// (whole files of them) take this path too for now: correctness first, an int8 path later. Decode
// reads each row once (dequantising costs about as much as the f32 dot); prefill dequantises a
// chunk once per kTileTokens tokens.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/kernels_internal.h"

namespace kvw::kernels {
namespace {

// 32 lanes: a whole block per step, so each lane gets one add per block and the SIMD kernels'
// add chains are one per block (decode is bound by that latency, not by the multiplies).
constexpr int kLanes = 32;
constexpr int64_t kChunk = 512;     // elements dequantised at a time: 2 KiB of f32 on the stack
constexpr int64_t kTileTokens = 4;  // tokens sharing one dequantised chunk

float reduce_lanes(float* acc) {
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int k = 0; k < width; ++k) acc[k] = acc[k] + acc[k + width];
  }
  return acc[0];
}

}  // namespace

bool is_dequant_type(GgmlType wtype) {
  switch (wtype) {
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kIQ4_XS:
      return true;
    default:
      return false;
  }
}

void matmul_dequant(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const float* x,
                    int64_t n_tokens, float* y, int ith, int nth) {
  CHECK(is_dequant_type(wtype)) << "matmul_dequant: weight type " << (uint32_t)wtype;
  const MatmulGeometry g = matmul_geometry(wtype, n_in);
  const TypeTraits& tt = type_traits(wtype);
  CHECK(kChunk % tt.block_elems == 0 && tt.block_elems % kLanes == 0) << tt.name;
  const RowRange rows = split_range(n_rows, ith, nth, kRowAlign);
  const auto* w8 = static_cast<const uint8_t*>(w);
  float buf[kChunk];
  float acc[kTileTokens][kLanes];
  for (int64_t r = rows.begin; r < rows.end; ++r) {
    const uint8_t* wr = w8 + r * g.w_row_bytes;
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTileTokens) {
      const int64_t nt = std::min(kTileTokens, n_tokens - t0);
      std::fill(&acc[0][0], &acc[0][0] + kTileTokens * kLanes, 0.0f);
      for (int64_t c0 = 0; c0 < n_in; c0 += kChunk) {
        const int64_t len = std::min(kChunk, n_in - c0);
        dequantize_row(wtype, wr + c0 / tt.block_elems * tt.block_bytes, buf, len);
        for (int64_t t = 0; t < nt; ++t) {
          const float* xt = x + (t0 + t) * n_in + c0;
          float* a = acc[t];
          for (int64_t i = 0; i < len; i += kLanes) {
            for (int k = 0; k < kLanes; ++k) a[k] = std::fma(buf[i + k], xt[i + k], a[k]);
          }
        }
      }
      for (int64_t t = 0; t < nt; ++t) y[(t0 + t) * n_rows + r] = reduce_lanes(acc[t]);
    }
  }
}

}  // namespace kvw::kernels
