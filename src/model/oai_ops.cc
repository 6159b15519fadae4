#include "model/oai_ops.h"

#include <algorithm>
#include <cmath>

namespace kvw {

void swiglu_oai(const float* gate, const float* up, int64_t n, float* out) {
  constexpr float kAlpha = 1.702f, kLimit = 7.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], kLimit);
    const float u = std::clamp(up[i], -kLimit, kLimit);
    out[i] = g / (1.0f + std::exp(-kAlpha * g)) * (u + 1.0f);
  }
}

}  // namespace kvw
