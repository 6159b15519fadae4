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
static const float* kv_row(const KvLayerView& kv, bool value, const uint32_t* block_table,
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

// One (query, head) of a tile that attends the current chunk: lanes [qa, qb) of it.
struct ChunkPair {
  const float* q;
  float* out;
  SoftmaxState* st;
  int qa, qb;
};

}  // namespace kvw::kernels::x86
