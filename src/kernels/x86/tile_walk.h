// kernels/x86/tile_walk.h: the order in which the packed GEMMs (packed_tile.h,
// packed_kquant_tile.h and the AVX-512 VNNI pair tiles) visit their tiles. Prefill walks token
// blocks whose activations stay in L2 (~256 KiB) and, within a block, each group of rows across
// all the block's token tiles, so a group's weights (8 rows: 17 KiB for Q8_0 at n_in 2048) are
// reused from L1/L2. Only the order is shared: which tile computes what is the caller's.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/kernels_internal.h"
#include "kernels/x86/avx2_util.h"

namespace kvw::kernels::x86 {

template <int N, class Tile>
KVW_INLINE void rest_tile(int64_t n, int64_t t, Tile& tile) {
  if constexpr (N > 0) {
    if (n == N) return tile(std::integral_constant<int, N>{}, t);
    rest_tile<N - 1>(n, t, tile);
  }
}

// Tokens [t, te): tiles of C tokens, then one tile of the n < C left; tile(width, t0) gets the
// width as a std::integral_constant so that it can pick a template instance.
template <int C, class Tile>
KVW_INLINE void token_tiles(int64_t t, int64_t te, Tile&& tile) {
  for (; t + C <= te; t += C) tile(std::integral_constant<int, C>{}, t);
  rest_tile<C - 1>(te - t, t, tile);
}

// Token blocks of [0, n_tokens) (a multiple of C tokens each) and in each the groups
// [g_begin, g_end), G at a time (G = 2: a last odd group alone): groups(grp, n_groups, tb, te).
// block_start(tb, te) runs before each block's groups.
template <int C, int G, class BlockStart, class Groups>
void walk_token_blocks(int64_t x_row_bytes, int64_t n_tokens, int64_t g_begin, int64_t g_end,
                       BlockStart&& block_start, Groups&& groups) {
  const int64_t token_block = int8_token_block(x_row_bytes, C);
  for (int64_t tb = 0; tb < n_tokens; tb += token_block) {
    const int64_t te = tb + token_block < n_tokens ? tb + token_block : n_tokens;
    block_start(tb, te);
    int64_t grp = g_begin;
    for (; grp + G <= g_end; grp += G) groups(grp, G, tb, te);
    for (; grp < g_end; ++grp) groups(grp, 1, tb, te);
  }
}

template <int C, int G, class Groups>
void walk_token_blocks(int64_t x_row_bytes, int64_t n_tokens, int64_t g_begin, int64_t g_end,
                       Groups&& groups) {
  walk_token_blocks<C, G>(
      x_row_bytes, n_tokens, g_begin, g_end, [](int64_t, int64_t) {}, groups);
}

}  // namespace kvw::kernels::x86
