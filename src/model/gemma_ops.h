// model/gemma_ops.h: the element-wise pieces Gemma-2/3 need that the kernel table does not
// have: GeGLU with the tanh GELU and final-logit soft-capping. (Soft-capped attention scores
// are the kernels' AttnScores::softcap.) Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/kernels.h"

namespace kvw {

// out[i] = gelu_tanh(gate[i]) * up[i], gelu_tanh(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// (llama.cpp's GELU, HF gelu_pytorch_tanh).
void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out);

// x[i] = cap * tanh(x[i] / cap), n elements in place (cap > 0).
void softcap(float* x, int64_t n, float cap);

}  // namespace kvw
