// tests/kernels/paged_kv_layer.h: one layer of paged K/V for the attention tests: `depth`
// positions of random K and V written through ref's kv_store, the blocks shuffled in the arena so
// that every block-table hop lands somewhere else.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels_test_util.h"

namespace kvw::kernels::testing {

struct PagedKvLayer {
  // seed: the shuffle's; K and V take seed + 3 and seed + 4.
  PagedKvLayer(KvDtype dtype, int32_t hd, int64_t depth, int32_t kv_heads, int32_t block_size,
               uint32_t seed) {
    const int64_t n_blocks = (depth + block_size - 1) / block_size;
    const int64_t rows = (int64_t)kv_heads * block_size;
    const int64_t row_bytes = (int64_t)kv_elem_bytes(dtype) * hd;
    const int64_t scales = dtype == KvDtype::kInt8 ? rows * 4 : 0;
    const int64_t stride = 2 * rows * row_bytes + 2 * scales;
    buf.assign(n_blocks * stride, 0xAB);
    uint8_t* b = buf.data();
    view = {dtype,
            b,
            b + rows * row_bytes,
            scales ? b + 2 * rows * row_bytes : nullptr,
            scales ? b + 2 * rows * row_bytes + scales : nullptr,
            stride,
            block_size,
            kv_heads,
            hd};
    table.resize(n_blocks);
    std::iota(table.begin(), table.end(), 0u);
    std::shuffle(table.begin(), table.end(), std::mt19937(seed));
    const auto k = random_floats(depth * kv_heads * hd, seed + 3);
    const auto v = random_floats(depth * kv_heads * hd, seed + 4);
    for (int64_t p = 0; p < depth; ++p) {
      kernels_ref().kv_store(view, table, p, k.data() + p * kv_heads * hd,
                             v.data() + p * kv_heads * hd);
    }
  }
  std::vector<uint8_t> buf;
  std::vector<uint32_t> table;
  KvLayerView view;
};

}  // namespace kvw::kernels::testing
