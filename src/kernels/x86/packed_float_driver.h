// kernels/x86/packed_float_driver.h: the loop nest of the packed F32 / F16 / BF16 GEMM shared by
// the AVX2 and AVX-512 tables (layout and arithmetic in kernels/packed_float.cc). The ISA type
// provides the tiles; this header decides which tile computes what:
//   Isa::kTokens                       prefill tile width (tokens per group tile)
//   Isa::tile<T, C>(a, grp, xt, t0)    group grp (16 rows) x tokens [t0, t0 + C), 1 <= C <=
//   kTokens,
//                                      their activations at xt[i * kTokens + c]
//   Isa::decode<T, G>(a, grp)          groups grp .. grp + G - 1 x the one token, G in {1, 2}
// Every tile computes each (row, token) with the same serial fma chain, so the driver's choices
// never change a bit.
#pragma once

#include <cstdint>
#include <vector>

#include "gguf/tensor_types.h"
#include "kernels/kernels_internal.h"

namespace kvw::kernels::x86 {

struct FloatPackedArgs {
  const uint8_t* w;  // packed groups
  int64_t group_bytes;
  int64_t n_in;
  const float* x;  // [n_tokens][n_in]
  int64_t n_rows;
  int64_t n_tokens;
  float* y;  // [n_tokens][n_rows]
};

template <class Isa, GgmlType T, int N>
inline void float_rest(const FloatPackedArgs& a, int64_t grp, const float* xt, int64_t t0,
                       int64_t n) {
  if constexpr (N > 0) {
    if (n == N) return Isa::template tile<T, N>(a, grp, xt, t0);
    float_rest<Isa, T, N - 1>(a, grp, xt, t0, n);
  }
}

// Activations of a token block (<= 512 KiB, an L2 share on every x86 core we target) are copied
// once into tile-major order, xt[tile][i][C] (a short tile is zero-padded to C), and reused for
// every group of the thread's rows; a group (16 rows, 64 KiB of F16 at n_in 2048) is reused from
// L2 across the block's token tiles. The copy is what makes the tile fast: read in place, the C
// tokens' x[i] lie n_in * 4 bytes apart, a multiple of 4 KiB for the usual n_in, so all C lines
// fall into one L1 set and evict each other (measured: 53 GFLOP/s of a 228 peak per core for
// 2048 x 2048 F16 at 512 tokens). Decode streams each group once, two at a time so that two fma
// chains overlap.
//
// The copy lives in a per-thread buffer that grows to the largest block seen: at most
// max(512 KiB, C x n_in x 4) bytes, set by the model's widest matrix, not by load.
template <class Isa, GgmlType T>
void float_groups(const FloatPackedArgs& a, int64_t g_begin, int64_t g_end) {
  if (a.n_tokens == 1) {
    int64_t grp = g_begin;
    for (; grp + 2 <= g_end; grp += 2) Isa::template decode<T, 2>(a, grp);
    if (grp < g_end) Isa::template decode<T, 1>(a, grp);
    return;
  }
  constexpr int C = Isa::kTokens;
  int64_t token_block = (512 * 1024) / (a.n_in * (int64_t)sizeof(float));
  token_block = token_block < C ? C : token_block / C * C;
  thread_local std::vector<float> xt;
  for (int64_t tb = 0; tb < a.n_tokens; tb += token_block) {
    const int64_t te = tb + token_block < a.n_tokens ? tb + token_block : a.n_tokens;
    const int64_t n_tiles = (te - tb + C - 1) / C;
    const size_t need = (size_t)(n_tiles * C * a.n_in);
    if (xt.size() < need) xt.resize(need);
    for (int64_t tile = 0; tile < n_tiles; ++tile) {
      float* dst = xt.data() + tile * C * a.n_in;
      for (int c = 0; c < C; ++c) {
        const int64_t t = tb + tile * C + c;
        if (t < te) {
          const float* src = a.x + t * a.n_in;
          for (int64_t i = 0; i < a.n_in; ++i) dst[i * C + c] = src[i];
        } else {
          for (int64_t i = 0; i < a.n_in; ++i) dst[i * C + c] = 0.0f;
        }
      }
    }
    for (int64_t grp = g_begin; grp < g_end; ++grp) {
      for (int64_t tile = 0; tile < n_tiles; ++tile) {
        const int64_t t0 = tb + tile * C;
        const float* x = xt.data() + tile * C * a.n_in;
        if (t0 + C <= te) {
          Isa::template tile<T, C>(a, grp, x, t0);
        } else {
          float_rest<Isa, T, C - 1>(a, grp, x, t0, te - t0);
        }
      }
    }
  }
}

// KernelTable::matmul_packed for the float types: full groups here, rows past them in
// packed_float.cc.
template <class Isa>
void matmul_packed_float(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in,
                         const float* x, int64_t n_tokens, float* y, int ith, int nth) {
  const FloatPackedGeometry g = float_packed_geometry(wtype, n_rows, n_in);
  const RowRange rows = split_range(n_rows, ith, nth, kRowAlign);
  if (rows.begin >= rows.end || n_tokens <= 0) return;
  const FloatPackedArgs a = {
      static_cast<const uint8_t*>(w), g.group_bytes, n_in, x, n_rows, n_tokens, y};
  const int64_t full = g.n_groups * kFloatPackRows;
  // Thread ranges start at multiples of kRowAlign (16), hence of a group.
  const int64_t g_begin = rows.begin / kFloatPackRows;
  const int64_t g_end = (rows.end < full ? rows.end : full) / kFloatPackRows;
  switch (wtype) {
    case GgmlType::kF32:
      float_groups<Isa, GgmlType::kF32>(a, g_begin, g_end);
      break;
    case GgmlType::kF16:
      float_groups<Isa, GgmlType::kF16>(a, g_begin, g_end);
      break;
    default:
      float_groups<Isa, GgmlType::kBF16>(a, g_begin, g_end);
      break;
  }
  if (rows.end > full) {
    matmul_packed_float_tail(wtype, w, n_rows, n_in, x, n_tokens, y, rows.begin, rows.end);
  }
}

}  // namespace kvw::kernels::x86
