// model/oai_ops.h: the pieces gpt-oss needs that the kernel table does not have: attention with
// a learned sink logit per head in the softmax denominator, and the clamped SwiGLU of its
// experts. Portable C++ over kernels::kv_load_row (decoded K/V rows), so results do not depend
// on the ISA table; each (query, head) visits its positions in order from pos_begin with its own
// online-softmax state, so the bits do not depend on the tile or the batch either.
// Thread safety: pure functions; the caller gives each thread its own scratch.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/kernels.h"

namespace kvw {

// gpt-oss's SwiGLU (llama.cpp's swiglu_oai, alpha 1.702, limit 7): with g = min(gate, limit) and
// u = clamp(up, -limit, limit), out[i] = g sigmoid(alpha g) (u + 1). out may alias gate.
void swiglu_oai(const float* gate, const float* up, int64_t n, float* out);

// As KernelTable::attention, with head h's softmax over its positions' scores and one more
// logit, sinks[h], that has no value row: out = sum_j e^{s_j} v_j / (e^{sinks[h]} + sum_j e^{s_j}).
// kv holds one KV head shared by the n_heads query heads whose sinks start at `sinks`.
// scratch: attention_scratch_floats(head_dim) floats, of which it uses
// 2 head_dim + 2 x queries x n_heads (CHECKed).
void sink_attention(std::span<const kernels::AttnQuery> queries, int32_t n_heads,
                    const kernels::KvLayerView& kv, std::span<const uint32_t> block_table,
                    float scale, const float* sinks, float* scratch);

}  // namespace kvw
