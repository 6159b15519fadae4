// model/oai_ops.h: the piece gpt-oss needs that the kernel table does not have: the clamped
// SwiGLU of its experts. (Its attention sinks are the kernels' AttnScores::sinks.)
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/kernels.h"

namespace kvw {

// gpt-oss's SwiGLU (llama.cpp's swiglu_oai, alpha 1.702, limit 7): with g = min(gate, limit) and
// u = clamp(up, -limit, limit), out[i] = g sigmoid(alpha g) (u + 1). out may alias gate.
void swiglu_oai(const float* gate, const float* up, int64_t n, float* out);

}  // namespace kvw
