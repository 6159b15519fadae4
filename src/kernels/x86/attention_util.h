// kernels/x86/attention_util.h: what the x86 attention kernels share: paged K/V row addressing
// and decoding to f32, and the online-softmax state of one (query, head).
// Every function is `static inline` (see avx2_util.h): each ISA file gets its own copy.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/kernels_internal.h"
#include "kernels/x86/avx2_util.h"

namespace kvw::kernels::x86 {

static void f16_to_f32_row(const uint16_t* src, float* dst, int32_t n) {
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_f16x8(src + i));
  for (; i < n; ++i) dst[i] = f16_scalar(src[i]);
}

// Byte offset of row (kv_head, slot of pos) of element size `elem` from a base pointer.
static int64_t kv_offset(const KvLayerView& kv, const uint32_t* block_table, int64_t pos,
                         int32_t kv_head, int64_t elem) {
  const int64_t block = block_table[pos / kv.block_size];
  return block * kv.block_stride +
         ((int64_t)kv_head * kv.block_size + pos % kv.block_size) * kv.head_dim * elem;
}

// Decodes row (kv_head, pos) of K or V to f32 in `row`, or returns the cache row itself (F32).
static inline const float* kv_row(const KvLayerView& kv, bool value, const uint32_t* block_table,
                                  int64_t pos, int32_t kv_head, float* row) {
  if (kv.dtype == KvDtype::kF32) {
    const int64_t off = kv_offset(kv, block_table, pos, kv_head, 4);
    return reinterpret_cast<const float*>(static_cast<const uint8_t*>(value ? kv.v : kv.k) + off);
  }
  if (kv.dtype == KvDtype::kF16) {
    const int64_t off = kv_offset(kv, block_table, pos, kv_head, 2);
    f16_to_f32_row(
        reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(value ? kv.v : kv.k) + off),
        row, kv.head_dim);
    return row;
  }
  // bf16, int8: the shared row codec (it only reads blocks up to pos).
  const std::span<const uint32_t> table(block_table, (size_t)(pos / kv.block_size + 1));
  kv_load_row(kv, value, table, pos, kv_head, row);
  return row;
}

// Running softmax state of one (query, head): max, sum of weights.
struct SoftmaxState {
  float m;
  float l;
};

constexpr int kMaxGroup = 16;  // query heads sharing a K/V row handled per tile
constexpr int kMaxTile = 16;   // query tokens handled per tile

// One (query, head) of a tile that attends the current chunk: lanes [qa, qb) of it.
struct ChunkPair {
  const float* q;
  float* out;
  SoftmaxState* st;
  int qa, qb;
};

// The pairs of queries [0, nq) x heads [h0, h0 + ng) that attend the chunk at c0, query-major
// (the heads of one query, which share a range, are adjacent). Returns how many.
static inline int chunk_pairs(const AttnQuery* queries, int nq, int32_t h0, int ng, int32_t hd,
                              int64_t c0, SoftmaxState (*st)[kMaxGroup], ChunkPair* pairs) {
  int np = 0;
  for (int i = 0; i < nq; ++i) {
    const int64_t qa = queries[i].pos_begin > c0 ? queries[i].pos_begin : c0;
    const int64_t qb = queries[i].pos_end < c0 + kAttnChunk ? queries[i].pos_end : c0 + kAttnChunk;
    if (qa >= qb) continue;
    for (int g = 0; g < ng; ++g) {
      const int64_t off = (int64_t)(h0 + g) * hd;
      pairs[np++] = {queries[i].q + off, queries[i].out + off, &st[i][g], (int)(qa - c0),
                     (int)(qb - c0)};
    }
  }
  return np;
}

// How many pairs from k on (at most max) share pairs[k]'s range: they accumulate V together.
static inline int same_range_run(const ChunkPair* pairs, int k, int np, int max) {
  int run = 1;
  while (run < max && k + run < np && pairs[k + run].qa == pairs[k].qa &&
         pairs[k + run].qb == pairs[k].qb)
    ++run;
  return run;
}

// Splits a call into tiles of up to kMaxTile queries x kMaxGroup heads of one KV head and
// runs tile(queries, nq, first head, heads, kv_head) on each.
template <class Tile>
static inline void for_each_tile(std::span<const AttnQuery> queries, int32_t n_heads,
                                 const KvLayerView& kv, Tile&& tile) {
  const int32_t group = gqa_group(n_heads, kv);
  for (size_t i0 = 0; i0 < queries.size(); i0 += kMaxTile) {
    const int nq = queries.size() - i0 < (size_t)kMaxTile ? (int)(queries.size() - i0) : kMaxTile;
    for (int32_t kv_head = 0; kv_head < kv.n_kv_heads; ++kv_head) {
      for (int32_t g0 = 0; g0 < group; g0 += kMaxGroup) {
        const int ng = group - g0 < kMaxGroup ? group - g0 : kMaxGroup;
        tile(queries.data() + i0, nq, kv_head * group + g0, ng, kv_head);
      }
    }
  }
}

}  // namespace kvw::kernels::x86
