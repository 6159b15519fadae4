// kernels/packed_float.cc: the load-time packed layout of F32 / F16 / BF16 matrices for
// prefill-speed GEMM, the packer, and the scalar matmul_packed every SIMD table reproduces bit for
// bit.
//
// Layout of an n_rows x n_in matrix of element size e, same bytes as GGUF:
//
//   [group 0][group 1] ... [group n_rows/16 - 1][the n_rows % 16 last rows, GGUF layout]
//   group g (rows 16g .. 16g+15): [n_in][16 rows] elements, 16 x n_in x e bytes
//
// One load at element i holds that element of all 16 rows (32 bytes of F16/BF16, 64 of F32): it
// converts in registers to one 512-bit (or two 256-bit) float vectors whose lanes are the rows, and
// meets a token's activation x[i] broadcast to every lane. The accumulator lanes are the rows, so
// no horizontal sum is ever needed and a tile of 16 rows x C tokens keeps C accumulators.
//
// Arithmetic per (row, token): acc = 0; for i = 0 .. n_in - 1 in order: acc = fma(w[i], x[i],
// acc), with w[i] converted exactly to float. Nothing depends on the tile shape, the token count,
// the thread split or the ISA, so every table gives the same bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/half.h"
#include "kernels/kernels_internal.h"

namespace kvw::kernels {
namespace {

float element(GgmlType wtype, const uint8_t* p) {
  uint16_t h;
  switch (wtype) {
    case GgmlType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case GgmlType::kF16:
      std::memcpy(&h, p, 2);
      return f16_to_f32(h);
    default:
      std::memcpy(&h, p, 2);
      return bf16_to_f32(h);
  }
}

// The serial dot product of the contract; `w` steps `w_stride` bytes per element.
float serial_dot(GgmlType wtype, const uint8_t* w, int64_t w_stride, const float* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc = std::fma(element(wtype, w + i * w_stride), x[i], acc);
  return acc;
}

}  // namespace

bool is_float_type(GgmlType wtype) {
  return wtype == GgmlType::kF32 || wtype == GgmlType::kF16 || wtype == GgmlType::kBF16;
}

FloatPackedGeometry float_packed_geometry(GgmlType wtype, int64_t n_rows, int64_t n_in) {
  CHECK(is_float_type(wtype) && n_rows >= kFloatPackRows && n_in > 0)
      << "packed float matmul: weight type " << (uint32_t)wtype << " rows " << n_rows << " n_in "
      << n_in;
  FloatPackedGeometry g;
  g.elem_bytes = wtype == GgmlType::kF32 ? 4 : 2;
  g.row_bytes = n_in * g.elem_bytes;
  g.group_bytes = kFloatPackRows * g.row_bytes;
  g.n_groups = n_rows / kFloatPackRows;
  return g;
}

void pack_float(GgmlType wtype, const void* src, void* dst, int64_t n_rows, int64_t n_in) {
  const FloatPackedGeometry g = float_packed_geometry(wtype, n_rows, n_in);
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  const int64_t e = g.elem_bytes;
  // In place (src == dst) each group is copied out first: one group of scratch.
  std::vector<uint8_t> scratch(g.group_bytes);
  for (int64_t grp = 0; grp < g.n_groups; ++grp) {
    std::memcpy(scratch.data(), s + grp * g.group_bytes, g.group_bytes);
    uint8_t* out = d + grp * g.group_bytes;
    for (int64_t r = 0; r < kFloatPackRows; ++r) {
      const uint8_t* row = scratch.data() + r * g.row_bytes;
      for (int64_t i = 0; i < n_in; ++i) {
        std::memcpy(out + (i * kFloatPackRows + r) * e, row + i * e, e);
      }
    }
  }
  const int64_t tail = g.n_groups * g.group_bytes;
  if (s != d) std::memcpy(d + tail, s + tail, (n_rows % kFloatPackRows) * g.row_bytes);
}

void matmul_packed_float_tail(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in,
                              const float* x, int64_t n_tokens, float* y, int64_t row_begin,
                              int64_t row_end) {
  const FloatPackedGeometry g = float_packed_geometry(wtype, n_rows, n_in);
  const auto* w8 = static_cast<const uint8_t*>(w);
  for (int64_t r = std::max(row_begin, g.n_groups * kFloatPackRows); r < row_end; ++r) {
    for (int64_t t = 0; t < n_tokens; ++t) {
      y[t * n_rows + r] = serial_dot(wtype, w8 + r * g.row_bytes, g.elem_bytes, x + t * n_in, n_in);
    }
  }
}

namespace ref {

void matmul_packed_float(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in,
                         const float* x, int64_t n_tokens, float* y, int ith, int nth) {
  const FloatPackedGeometry g = float_packed_geometry(wtype, n_rows, n_in);
  const RowRange rows = split_range(n_rows, ith, nth, kRowAlign);
  const auto* w8 = static_cast<const uint8_t*>(w);
  const int64_t full = g.n_groups * kFloatPackRows;
  for (int64_t r = rows.begin; r < std::min(rows.end, full); ++r) {
    const uint8_t* first =
        w8 + (r / kFloatPackRows) * g.group_bytes + (r % kFloatPackRows) * g.elem_bytes;
    for (int64_t t = 0; t < n_tokens; ++t) {
      y[t * n_rows + r] =
          serial_dot(wtype, first, kFloatPackRows * g.elem_bytes, x + t * n_in, n_in);
    }
  }
  if (rows.end > full) {
    matmul_packed_float_tail(wtype, w, n_rows, n_in, x, n_tokens, y, rows.begin, rows.end);
  }
}

}  // namespace ref
}  // namespace kvw::kernels
