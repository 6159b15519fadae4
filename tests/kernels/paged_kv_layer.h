// tests/kernels/paged_kv_layer.h: one layer of paged K/V for the attention tests, and split(),
// flash-decoding as the model runs it over such a layer: `depth`
// positions of random K and V written through ref's kv_store, the blocks shuffled in the arena so
// that every block-table hop lands somewhere else.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels_test_util.h"

namespace kvw::kernels::testing {

// Sizes *buf for n_blocks blocks of one layer's paged K/V (kernels.h layout: per block K, V and,
// for int8, their scales), filled with 0xAB, and returns the view of it.
inline KvLayerView paged_kv_view(KvDtype dtype, int32_t hd, int32_t kv_heads, int32_t block_size,
                                 int64_t n_blocks, std::vector<uint8_t>* buf) {
  const int64_t rows = (int64_t)kv_heads * block_size;
  const int64_t row_bytes = (int64_t)kv_elem_bytes(dtype) * hd;
  const int64_t scales = dtype == KvDtype::kInt8 ? rows * 4 : 0;
  const int64_t stride = 2 * rows * row_bytes + 2 * scales;
  buf->assign(n_blocks * stride, 0xAB);
  uint8_t* b = buf->data();
  return {dtype,
          b,
          b + rows * row_bytes,
          scales ? b + 2 * rows * row_bytes : nullptr,
          scales ? b + 2 * rows * row_bytes + scales : nullptr,
          stride,
          block_size,
          kv_heads,
          hd};
}

struct PagedKvLayer {
  // seed: the shuffle's; K and V take seed + 3 and seed + 4.
  PagedKvLayer(KvDtype dtype, int32_t hd, int64_t depth, int32_t kv_heads, int32_t block_size,
               uint32_t seed) {
    const int64_t n_blocks = (depth + block_size - 1) / block_size;
    view = paged_kv_view(dtype, hd, kv_heads, block_size, n_blocks, &buf);
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

// The split as the model's decode runs it: per KV head, each segment of [b, e) into its own
// buffer (last segment first), then merged in position order and finished.
inline std::vector<float> split(const KernelTable& t, const PagedKvLayer& kv, const float* q,
                                int32_t n_heads, int64_t b, int64_t e, AttnScores sc) {
  const int32_t kv_heads = kv.view.n_kv_heads;
  const int32_t hd = kv.view.head_dim, group = n_heads / kv_heads;
  const int64_t n_seg = attn_num_segments(b, e);
  std::vector<float> parts(n_seg * group * hd), mls(n_seg * group * 2);
  std::vector<float> scratch(attention_scratch_floats(hd), NAN), out(n_heads * hd, NAN);
  for (int32_t g = 0; g < kv_heads; ++g) {
    for (int64_t s = n_seg - 1; s >= 0; --s) {
      const int64_t s0 = attn_segment_begin(b) + s * kAttnSegment;
      const AttnQuery query = {q + g * group * hd, parts.data() + s * group * hd, std::max(b, s0),
                               std::min(e, s0 + kAttnSegment)};
      t.attention_segment({&query, 1}, group, kv_head_view(kv.view, g), kv.table, sc,
                          mls.data() + s * group * 2, scratch.data());
    }
    for (int32_t h = 0; h < group; ++h) {
      float* o = out.data() + (g * group + h) * hd;
      float ml[2] = {mls[2 * h], mls[2 * h + 1]};
      std::copy_n(parts.data() + h * hd, hd, o);
      for (int64_t s = 1; s < n_seg; ++s) {
        attention_merge(o, ml, parts.data() + (s * group + h) * hd,
                        mls.data() + (s * group + h) * 2, hd);
      }
      attention_finish(o, ml, hd, sc.sinks != nullptr ? sc.sinks + g * group + h : nullptr);
    }
  }
  return out;
}

}  // namespace kvw::kernels::testing
