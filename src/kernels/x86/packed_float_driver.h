// kernels/x86/packed_float_driver.h: the loop nest of the packed F32 / F16 / BF16 GEMM shared by
// the AVX2 and AVX-512 tables (layout and arithmetic in kernels/packed_float.cc). The ISA type
// provides the tiles; this header decides which tile computes what:
//   Isa::kTokens                       prefill tile width (tokens per group tile)
//   Isa::kGroups                       groups a prefill tile may span (1 or 2)
//   Isa::tile<T, C, G>(a, grp, xt, t0, next)
//                                      groups grp .. grp + G - 1 (16 rows each) x tokens
//                                      [t0, t0 + C), 1 <= C <= kTokens, 1 <= G <= kGroups,
//                                      their activations at xt[i * kTokens + c]; next: the
//                                      weights of the G groups computed after these (for a
//                                      prefetch), or null
//   Isa::decode<T, G>(a, grp)          groups grp .. grp + G - 1 x the one token, G in {1, 2}
// Every tile computes each (row, token) with the same serial fma chain, so the driver's choices
// never change a bit.
#pragma once

#include <cstdint>

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

template <class Isa, GgmlType T, int G, int N>
inline void float_rest(const FloatPackedArgs& a, int64_t grp, const float* xt, int64_t t0,
                       int64_t n, const uint8_t* next) {
  if constexpr (N > 0) {
    if (n == N) return Isa::template tile<T, N, G>(a, grp, xt, t0, next);
    float_rest<Isa, T, G, N - 1>(a, grp, xt, t0, n, next);
  }
}

// Groups grp .. grp + G - 1 across the token block's tiles; the last tile prefetches the G
// groups from `next_grp` on when that is below g_end (their weights come from DRAM otherwise,
// and with 4 tiles per block, n_in 5632, a cold first tile is a quarter of the pair's time).
template <class Isa, GgmlType T, int G>
inline void float_group_tiles(const FloatPackedArgs& a, int64_t grp, const float* xt, int64_t tb,
                              int64_t te, int64_t n_tiles, int64_t next_grp, int64_t g_end) {
  constexpr int C = Isa::kTokens;
  for (int64_t tile = 0; tile < n_tiles; ++tile) {
    const int64_t t0 = tb + tile * C;
    const float* x = xt + tile * C * a.n_in;
    const uint8_t* next =
        tile + 1 == n_tiles && next_grp + G <= g_end ? a.w + next_grp * a.group_bytes : nullptr;
    if (t0 + C <= te) {
      Isa::template tile<T, C, G>(a, grp, x, t0, next);
    } else {
      float_rest<Isa, T, G, C - 1>(a, grp, x, t0, te - t0, next);
    }
  }
}

// Tokens [t0, min(t0 + C, te)) of x into dst[i][C], zeros past te. Written in order (the C
// source rows are C sequential streams): writing one token at a time strided by C floats cost
// ~4% of an F16 prefill.
template <int C>
inline void copy_tile(const FloatPackedArgs& a, int64_t t0, int64_t te, float* dst) {
  const float* src[C];
  const int n = (int)(te - t0 < C ? te - t0 : C);
  for (int c = 0; c < n; ++c) src[c] = a.x + (t0 + c) * a.n_in;
  for (int64_t i = 0; i < a.n_in; ++i) {
    for (int c = 0; c < n; ++c) dst[i * C + c] = src[c][i];
    for (int c = n; c < C; ++c) dst[i * C + c] = 0.0f;
  }
}

// Activations of a token block (float_token_block: ~1 MiB, and at least 4 tiles) are copied
// once into tile-major order, xt[tile][i][C] (a short tile is zero-padded to C), and reused for
// every group of the thread's rows; a group or pair (16 or 32 rows, 64 / 128 KiB of F16 at n_in
// 2048) is reused from L2 across the block's token tiles. Every token block streams all the
// thread's weights once from DRAM, hence blocks larger than half an L2. The copy is what makes
// the tile fast: read in place, the C tokens' x[i] lie n_in * 4 bytes apart, a multiple of 4 KiB
// for the usual n_in, so all C lines fall into one L1 set and evict each other (measured: 53
// GFLOP/s of a 228 peak per core for 2048 x 2048 F16 at 512 tokens). Decode streams each group
// once, two at a time so that two fma chains overlap. xt: the thread's scratch, which
// packed_scratch_bytes sizes for one block.
template <class Isa, GgmlType T>
void float_groups(const FloatPackedArgs& a, int64_t g_begin, int64_t g_end, float* xt) {
  if (a.n_tokens == 1) {
    int64_t grp = g_begin;
    for (; grp + 2 <= g_end; grp += 2) Isa::template decode<T, 2>(a, grp);
    if (grp < g_end) Isa::template decode<T, 1>(a, grp);
    return;
  }
  constexpr int C = Isa::kTokens;
  const int64_t token_block = float_token_block(a.n_in, C);
  for (int64_t tb = 0; tb < a.n_tokens; tb += token_block) {
    const int64_t te = tb + token_block < a.n_tokens ? tb + token_block : a.n_tokens;
    const int64_t n_tiles = (te - tb + C - 1) / C;
    for (int64_t tile = 0; tile < n_tiles; ++tile) {
      copy_tile<C>(a, tb + tile * C, te, xt + tile * C * a.n_in);
    }
    int64_t grp = g_begin;
    if constexpr (Isa::kGroups == 2) {
      for (; grp + 2 <= g_end; grp += 2) {
        float_group_tiles<Isa, T, 2>(a, grp, xt, tb, te, n_tiles, grp + 2, g_end);
      }
    }
    for (; grp < g_end; ++grp) {
      float_group_tiles<Isa, T, 1>(a, grp, xt, tb, te, n_tiles, grp + 1, g_end);
    }
  }
}

// KernelTable::matmul_packed for the float types: full groups here, rows past them in
// packed_float.cc.
template <class Isa>
void matmul_packed_float(GgmlType wtype, const void* w, int64_t n_rows, int64_t n_in,
                         const float* x, int64_t n_tokens, float* y, int ith, int nth, float* xt) {
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
      float_groups<Isa, GgmlType::kF32>(a, g_begin, g_end, xt);
      break;
    case GgmlType::kF16:
      float_groups<Isa, GgmlType::kF16>(a, g_begin, g_end, xt);
      break;
    default:
      float_groups<Isa, GgmlType::kBF16>(a, g_begin, g_end, xt);
      break;
  }
  if (rows.end > full) {
    matmul_packed_float_tail(wtype, w, n_rows, n_in, x, n_tokens, y, rows.begin, rows.end);
  }
}

}  // namespace kvw::kernels::x86
