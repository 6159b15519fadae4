#include "model/oai_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"

namespace kvw {
namespace {

// q . k in 8 interleaved partial sums (a fixed order, so the compiler may vectorise it without
// changing the bits from one call to the next).
float dot(const float* q, const float* k, int32_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += q[i + j] * k[i + j];
  }
  for (; i < n; ++i) acc[0] += q[i] * k[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace

void swiglu_oai(const float* gate, const float* up, int64_t n, float* out) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], kLimit);
    const float u = std::clamp(up[i], -kLimit, kLimit);
    out[i] = g / (1.0f + std::exp(-kAlpha * g)) * (u + 1.0f);
  }
}

void sink_attention(std::span<const kernels::AttnQuery> queries, int32_t n_heads,
                    const kernels::KvLayerView& kv, std::span<const uint32_t> block_table,
                    float scale, const float* sinks, float* scratch) {
  const int32_t hd = kv.head_dim;
  const int64_t n_states = (int64_t)queries.size() * n_heads;
  CHECK(kv.n_kv_heads == 1 && 2 * hd + 2 * n_states <= kernels::attention_scratch_floats(hd))
      << "sink_attention: " << kv.n_kv_heads << " KV heads, " << n_states << " states";
  float* krow = scratch;
  float* vrow = scratch + hd;
  float* m = vrow + hd;     // [query][head] running max
  float* l = m + n_states;  // [query][head] running sum of weights
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
  // The sink starts each state as a position already seen: max = sink, sum = e^0 = 1, and a
  // zero value row, so every later rescale keeps its share of the denominator.
  for (size_t i = 0; i < queries.size(); ++i) {
    lo = std::min(lo, queries[i].pos_begin);
    hi = std::max(hi, queries[i].pos_end);
    for (int32_t h = 0; h < n_heads; ++h) {
      m[i * n_heads + h] = sinks[h];
      l[i * n_heads + h] = 1.0f;
      std::fill_n(queries[i].out + (int64_t)h * hd, hd, 0.0f);
    }
  }
  for (int64_t p = lo; p < hi; ++p) {
    kernels::kv_load_row(kv, false, block_table, p, 0, krow);
    kernels::kv_load_row(kv, true, block_table, p, 0, vrow);
    for (size_t i = 0; i < queries.size(); ++i) {
      if (p < queries[i].pos_begin || p >= queries[i].pos_end) continue;
      for (int32_t h = 0; h < n_heads; ++h) {
        const float s = scale * dot(queries[i].q + (int64_t)h * hd, krow, hd);
        float& mi = m[i * n_heads + h];
        float& li = l[i * n_heads + h];
        float* acc = queries[i].out + (int64_t)h * hd;
        if (s > mi) {
          const float c = std::exp(mi - s);
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
      const float inv = 1.0f / l[i * n_heads + h];  // >= e^0 share of the sink: never 0
      float* acc = queries[i].out + (int64_t)h * hd;
      for (int32_t d = 0; d < hd; ++d) acc[d] *= inv;
    }
  }
}

}  // namespace kvw
