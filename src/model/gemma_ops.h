// model/gemma_ops.h: the element-wise and attention pieces Gemma-2/3 need that the kernel table
// does not have: GeGLU with the tanh GELU, logit soft-capping, and paged attention with
// soft-capped scores. Portable C++ over kernels::kv_load_row (decoded K/V rows), so results do
// not depend on the ISA table; each (query, head) visits its positions in order from pos_begin
// with its own online-softmax state, so the bits do not depend on the tile or the batch either.
// Thread safety: pure functions; the caller gives each thread its own scratch.
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

// As KernelTable::attention, with each score s = scale * q.k replaced by cap * tanh(s / cap)
// before the softmax (Gemma-2's attn_logit_softcapping). kv holds one KV head shared by the
// n_heads query heads. scratch: attention_scratch_floats(head_dim) floats, of which it uses
// 2 head_dim + 2 x queries x n_heads (CHECKed).
void softcap_attention(std::span<const kernels::AttnQuery> queries, int32_t n_heads,
                       const kernels::KvLayerView& kv, std::span<const uint32_t> block_table,
                       float scale, float cap, float* scratch);

}  // namespace kvw
