// kernels/x86/matmul_tile.h: the register-tiled matmul driver shared by the SIMD tables.
// A tile computes kRows weight rows x kTokens tokens with one accumulator per (row, token) pair.
// Every pair sees exactly the same sequence of floating-point operations whichever tile shape,
// token block, thread range or n_tokens it was computed in (per-block Ops::fma then
// Ops::finish), which is what makes results batch-invariant; the tile shape only decides how
// often a weight block is reused from registers/L1 before it is evicted.
// The r/c loops must unroll completely so that acc[][] lives in registers (GCC 12 left a
// 4x3 F16 tile's accumulators on the stack without the pragmas: 5 GFLOP/s instead of ~40).
// Header-only templates, instantiated per ISA with Ops types that have internal linkage.
//
// An Ops type provides: kBlockElems, kBlockBytes (weight bytes per block), kRows, kTokens; types
// Acc, W (a weight block), X (an activation block); zero(), load_w(row, b), load_x(x_row, b),
// fma(acc, w, x) and finish(acc, w_row, x_row, args) -> float (final reduction plus any n_in tail).
#pragma once

#include <xmmintrin.h>

#include <cstdint>

namespace kvw::kernels::x86 {

struct MatmulArgs {
  const uint8_t* w;  // [n_rows] rows of w_row_bytes
  int64_t w_row_bytes;
  int64_t n_rows;
  int64_t n_in;
  int64_t nb;        // whole Ops blocks per row (float types may have an n_in tail)
  const uint8_t* x;  // [n_tokens] activation rows of x_row_bytes (quantize_act output)
  int64_t x_row_bytes;
  int64_t n_tokens;
  float* y;  // [n_tokens][n_rows]
};

template <class Ops, int R, int C>
__attribute__((always_inline)) inline void matmul_tile(const MatmulArgs& a, int64_t r0,
                                                       int64_t t0) {
  const uint8_t* w_rows[R];
  const uint8_t* x_rows[C];
  typename Ops::Acc acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) w_rows[r] = a.w + (r0 + r) * a.w_row_bytes;
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) x_rows[c] = a.x + (t0 + c) * a.x_row_bytes;
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = Ops::zero();
  }
  for (int64_t b = 0; b < a.nb; ++b) {
    typename Ops::X xb[C];  // activation block b of each token, loaded once for all R rows
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) xb[c] = Ops::load_x(x_rows[c], b);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      // Same offset in the next tile's row r: rows are contiguous, so this runs one tile
      // (R rows) ahead of the loads, one prefetch per 64-byte line of the block (K-quant
      // blocks span 3 lines). Hardware prefetch alone left decode latency-bound (Q8_0 spends
      // ~12 instructions per 34-byte block, so few misses overlap); measured on the 2-core
      // EPYC at 2 threads: Q4_0 5.7 -> 11.7, Q8_0 9.0 -> 15.1 GB/s (per CPU-second).
      // (uintptr_t: the address may lie past the weights; prefetches never fault.)
      const uintptr_t ahead =
          reinterpret_cast<uintptr_t>(w_rows[r]) + R * a.w_row_bytes + b * Ops::kBlockBytes;
#pragma GCC unroll 4
      for (int line = 0; line < Ops::kBlockBytes; line += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + line), _MM_HINT_T0);
      }
      const typename Ops::W wb = Ops::load_w(w_rows[r], b);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) Ops::fma(acc[r][c], wb, xb[c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      a.y[(t0 + c) * a.n_rows + r0 + r] = Ops::finish(acc[r][c], w_rows[r], x_rows[c], a);
    }
  }
}

// Rows [row_begin, row_end) for all tokens. Decode (one token) streams kRows rows at a time so
// that kRows independent accumulator chains hide FMA latency. Batches walk token blocks whose
// activations stay in L2 (~256 KiB), and within a block reuse each group of kRows weight rows
// (<= 4 x 8.5 KiB for Q8_0 at n_in 8192: L1-resident) across all token tiles.
template <class Ops>
void matmul_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  constexpr int R = Ops::kRows;
  constexpr int C = Ops::kTokens;
  if (a.n_tokens == 1) {
    int64_t r = row_begin;
    for (; r + R <= row_end; r += R) matmul_tile<Ops, R, 1>(a, r, 0);
    for (; r < row_end; ++r) matmul_tile<Ops, 1, 1>(a, r, 0);
    return;
  }
  int64_t token_block = (256 * 1024) / (a.x_row_bytes > 0 ? a.x_row_bytes : 1);
  token_block = token_block < C ? C : token_block / C * C;
  for (int64_t tb = 0; tb < a.n_tokens; tb += token_block) {
    const int64_t te = tb + token_block < a.n_tokens ? tb + token_block : a.n_tokens;
    int64_t r = row_begin;
    for (; r + R <= row_end; r += R) {
      int64_t t = tb;
      for (; t + C <= te; t += C) matmul_tile<Ops, R, C>(a, r, t);
      for (; t < te; ++t) matmul_tile<Ops, R, 1>(a, r, t);
    }
    for (; r < row_end; ++r) {
      int64_t t = tb;
      for (; t + C <= te; t += C) matmul_tile<Ops, 1, C>(a, r, t);
      for (; t < te; ++t) matmul_tile<Ops, 1, 1>(a, r, t);
    }
  }
}

}  // namespace kvw::kernels::x86
