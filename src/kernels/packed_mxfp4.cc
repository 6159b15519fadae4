// kernels/packed_mxfp4.cc: MXFP4 (gpt-oss's expert weights) on an int8 dot product: the packed
// layout, the packer, and the scalar kernels every SIMD table reproduces bit for bit.
//
// Why: MXFP4 went through matmul_dequant (f32 weights x f32 activations, 2 FMAs per 32 elements
// per token), which was 72% of a 1B gpt-oss prefill at 12 tok/s. Its levels (twice the E2M1
// values) are the integers {0, 1, 2, 3, 4, 6, 8, 12} with a sign, so a block's dot with Q8_0
// activations is an exact int32, and the E8M0 scale is a power of two: the same arithmetic as
// Q4_0's packed path (packed.cc) with a 16-entry lookup in place of "nibble - 8".
//
// Layout of an n_rows x n_in matrix, nb = n_in / 32, same bytes as GGUF (17 per block):
//   [group 0] ... [group n_rows/8 - 1][the n_rows % 8 last rows, GGUF layout]
//   group g (rows 8g .. 8g+7), 8 x row_bytes:
//     e      [nb][8 rows] E8M0 exponents                         8 bytes per block
//     quants [nb][4 steps][8 rows][4] GGUF qs[r][4s + k]        128 bytes per block
//            (low nibble: element 4s + k, high nibble: element 16 + 4s + k), as Q4_0's
//
// Arithmetic per (row, token): acc = 0; for blocks b in order:
//   isum_b = sum_j kMxfp4Values[code_j] * xq_j   (exact int32)
//   acc = fma(float(isum_b), scale(e_b) * d_x_b, acc),   scale(e) = 2^(e - 128) as ggml's
// The SIMD tables look up level + 12 (unsigned, for dpbusd) and subtract 12 x sum(x), which is
// exact, so every table, tile shape, token count and thread split gives the same bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "gguf/quant_blocks.h"
#include "kernels/kernels_internal.h"

namespace kvw::kernels {
namespace {

constexpr int64_t kExpBytes = kPackRows;  // per block of one group

// Code j (0..31) of a block's 16 bytes of nibbles.
int code_of(const uint8_t* qs, int j) {
  return j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
}

// The block's exact int32 dot with 32 Q8_0 quants.
int32_t block_isum(const uint8_t* qs, const int8_t* xs) {
  int32_t dot = 0;
  for (int j = 0; j < kQKMxfp4; ++j) dot += kMxfp4Values[code_of(qs, j)] * xs[j];
  return dot;
}

const ActBlockExtra* act_extras(const uint8_t* x_row, int64_t nb) {
  return reinterpret_cast<const ActBlockExtra*>(x_row + act_extras_offset(nb));
}

}  // namespace

float mxfp4_block_scale(uint8_t e) {
  // ggml's GGML_E8M0_TO_FP32_HALF: exponents 0 and 1 are denormals.
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float d;
  std::memcpy(&d, &bits, 4);
  return d;
}

PackedGeometry mxfp4_packed_geometry(int64_t n_rows, int64_t n_in) {
  CHECK(n_rows >= kPackRows && n_in > 0 && n_in % kQKMxfp4 == 0)
      << "packed mxfp4: rows " << n_rows << " n_in " << n_in;
  PackedGeometry g;
  g.nb = n_in / kQKMxfp4;
  g.row_bytes = g.nb * (int64_t)sizeof(BlockMXFP4);
  g.group_bytes = kPackRows * g.row_bytes;
  g.scale_bytes = kExpBytes;
  g.quant_bytes = 128;
  g.n_groups = n_rows / kPackRows;
  g.x_row_bytes = act_row_bytes(GgmlType::kMXFP4, n_in);
  g.extras_offset = act_extras_offset(g.nb);
  DCHECK(g.nb * (kExpBytes + g.quant_bytes) == g.group_bytes);
  return g;
}

void pack_mxfp4(const void* src, void* dst, int64_t n_rows, int64_t n_in) {
  const PackedGeometry g = mxfp4_packed_geometry(n_rows, n_in);
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  // In place (src == dst) each group is copied out first: one group of scratch.
  std::vector<uint8_t> scratch(g.group_bytes);
  for (int64_t i = 0; i < g.n_groups; ++i) {
    std::memcpy(scratch.data(), s + i * g.group_bytes, g.group_bytes);
    uint8_t* exps = d + i * g.group_bytes;
    uint8_t* quants = exps + g.nb * kExpBytes;
    for (int64_t r = 0; r < kPackRows; ++r) {
      const auto* row = reinterpret_cast<const BlockMXFP4*>(scratch.data() + r * g.row_bytes);
      for (int64_t b = 0; b < g.nb; ++b) {
        exps[b * kExpBytes + r] = row[b].e;
        uint8_t* q = quants + b * g.quant_bytes;
        for (int j = 0; j < 16; ++j) q[(j / 4) * 32 + r * 4 + j % 4] = row[b].qs[j];
      }
    }
  }
  const int64_t tail = g.n_groups * g.group_bytes;
  if (s != d) std::memcpy(d + tail, s + tail, (n_rows % kPackRows) * g.row_bytes);
}

void matmul_mxfp4_rows(const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                       int64_t n_tokens, float* y, int64_t row_begin, int64_t row_end) {
  const int64_t nb = n_in / kQKMxfp4;
  const int64_t x_row_bytes = act_row_bytes(GgmlType::kMXFP4, n_in);
  const auto* rows = static_cast<const BlockMXFP4*>(w);
  const auto* x8 = static_cast<const uint8_t*>(xq);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const BlockMXFP4* row = rows + r * nb;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const uint8_t* xr = x8 + t * x_row_bytes;
      const ActBlockExtra* ex = act_extras(xr, nb);
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const int8_t* xs = reinterpret_cast<const BlockQ8_0*>(xr)[b].qs;
        acc =
            std::fma((float)block_isum(row[b].qs, xs), mxfp4_block_scale(row[b].e) * ex[b].d, acc);
      }
      y[t * n_rows + r] = acc;
    }
  }
}

void matmul_mxfp4(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                  int64_t n_tokens, float* y, int ith, int nth) {
  CHECK(wtype == GgmlType::kMXFP4 && n_in % kQKMxfp4 == 0) << "matmul_mxfp4: n_in " << n_in;
  const RowRange rows = split_range(n_rows, ith, nth, kRowAlign);
  matmul_mxfp4_rows(w, n_rows, n_in, xq, n_tokens, y, rows.begin, rows.end);
}

void matmul_packed_mxfp4_tail(const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                              int64_t n_tokens, float* y, int64_t row_begin, int64_t row_end) {
  const int64_t full = n_rows / kPackRows * kPackRows;
  matmul_mxfp4_rows(w, n_rows, n_in, xq, n_tokens, y, std::max(row_begin, full), row_end);
}

namespace ref {

void matmul_packed_mxfp4(const void* w, int64_t n_rows, int64_t n_in, const void* xq,
                         int64_t n_tokens, float* y, int ith, int nth) {
  const PackedGeometry g = mxfp4_packed_geometry(n_rows, n_in);
  const RowRange rows = split_range(n_rows, ith, nth, kRowAlign);
  const auto* w8 = static_cast<const uint8_t*>(w);
  const auto* x8 = static_cast<const uint8_t*>(xq);
  const int64_t full = g.n_groups * kPackRows;
  for (int64_t r = rows.begin; r < std::min(rows.end, full); ++r) {
    const uint8_t* exps = w8 + (r / kPackRows) * g.group_bytes;
    const uint8_t* quants = exps + g.nb * kExpBytes;
    const int64_t rr = r % kPackRows;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const uint8_t* xr = x8 + t * g.x_row_bytes;
      const ActBlockExtra* ex = act_extras(xr, g.nb);
      float acc = 0.0f;
      for (int64_t b = 0; b < g.nb; ++b) {
        const int8_t* xs = reinterpret_cast<const BlockQ8_0*>(xr)[b].qs;
        uint8_t qs[16];  // the GGUF block's nibbles, gathered back from the steps
        for (int j = 0; j < 16; ++j)
          qs[j] = quants[b * g.quant_bytes + (j / 4) * 32 + rr * 4 + j % 4];
        acc = std::fma((float)block_isum(qs, xs),
                       mxfp4_block_scale(exps[b * kExpBytes + rr]) * ex[b].d, acc);
      }
      y[t * n_rows + r] = acc;
    }
  }
  if (rows.end > full)
    matmul_packed_mxfp4_tail(w, n_rows, n_in, xq, n_tokens, y, rows.begin, rows.end);
}

}  // namespace ref
}  // namespace kvw::kernels
