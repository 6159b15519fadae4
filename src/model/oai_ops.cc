#include "model/oai_ops.h"

#include <algorithm>
#include <cmath>

#include "model/scored_attention.h"

namespace kvw {

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
  scored::attention(
      queries, n_heads, kv, block_table, sinks, [&](float qk) { return scale * qk; }, scratch,
      "sink_attention");
}

}  // namespace kvw
