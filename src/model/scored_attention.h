// model/scored_attention.h: the portable paged attention that Gemma's soft-capped scores and
// gpt-oss's sinks share (gemma_ops.cc, oai_ops.cc). Each (query, head) visits its positions in
// order from pos_begin with its own online-softmax state, over kernels::kv_load_row rows, so the
// bits depend neither on the ISA table nor on the tile or the batch.
// Thread safety: pure; the caller gives each thread its own scratch.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

#include "core/check.h"
#include "kernels/kernels.h"

namespace kvw::scored {

// q . k in 8 interleaved partial sums (a fixed order, so the compiler may vectorise it without
// changing the bits from one call to the next).
inline float dot(const float* q, const float* k, int32_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += q[i + j] * k[i + j];
  }
  for (; i < n; ++i) acc[0] += q[i] * k[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// As KernelTable::attention with each score score(q.k). kv holds one KV head shared by the
// n_heads query heads. sinks (nullable, [n_heads]): each head's state starts as a position
// already seen with score sinks[h] and a zero value row, so it keeps its share of the
// denominator. scratch: 2 head_dim + 2 x queries x n_heads floats (CHECKed against
// attention_scratch_floats).
template <typename Score>
void attention(std::span<const kernels::AttnQuery> queries, int32_t n_heads,
               const kernels::KvLayerView& kv, std::span<const uint32_t> block_table,
               const float* sinks, Score score, float* scratch, const char* who) {
  const int32_t hd = kv.head_dim;
  const int64_t n_states = (int64_t)queries.size() * n_heads;
  CHECK(kv.n_kv_heads == 1 && 2 * hd + 2 * n_states <= kernels::attention_scratch_floats(hd))
      << who << ": " << kv.n_kv_heads << " KV heads, " << n_states << " states";
  float* krow = scratch;
  float* vrow = scratch + hd;
  float* m = vrow + hd;     // [query][head] running max
  float* l = m + n_states;  // [query][head] running sum of weights
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
  for (size_t i = 0; i < queries.size(); ++i) {
    lo = std::min(lo, queries[i].pos_begin);
    hi = std::max(hi, queries[i].pos_end);
    for (int32_t h = 0; h < n_heads; ++h) {
      m[i * n_heads + h] = sinks ? sinks[h] : -std::numeric_limits<float>::infinity();
      l[i * n_heads + h] = sinks ? 1.0f : 0.0f;
      std::fill_n(queries[i].out + (int64_t)h * hd, hd, 0.0f);
    }
  }
  for (int64_t p = lo; p < hi; ++p) {
    kernels::kv_load_row(kv, false, block_table, p, 0, krow);
    kernels::kv_load_row(kv, true, block_table, p, 0, vrow);
    for (size_t i = 0; i < queries.size(); ++i) {
      if (p < queries[i].pos_begin || p >= queries[i].pos_end) continue;
      for (int32_t h = 0; h < n_heads; ++h) {
        const float s = score(dot(queries[i].q + (int64_t)h * hd, krow, hd));
        float& mi = m[i * n_heads + h];
        float& li = l[i * n_heads + h];
        float* acc = queries[i].out + (int64_t)h * hd;
        if (s > mi) {
          const float c = std::exp(mi - s);  // 0 on the first position without a sink
          li *= c;
          for (int32_t d = 0; d < hd; ++d) acc[d] *= c;
          mi = s;
        }
        const float e = std::exp(s - mi);
        li += e;
        for (int32_t d = 0; d < hd; ++d) acc[d] += e * vrow[d];
      }
    }
  }
  for (size_t i = 0; i < queries.size(); ++i) {
    for (int32_t h = 0; h < n_heads; ++h) {
      const float li = l[i * n_heads + h];
      const float inv = li > 0.0f ? 1.0f / li : 0.0f;
      float* acc = queries[i].out + (int64_t)h * hd;
      for (int32_t d = 0; d < hd; ++d) acc[d] *= inv;
    }
  }
}

}  // namespace kvw::scored
