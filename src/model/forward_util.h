// model/forward_util.h: small pieces the forward-pass files share (forward.cc, mla_forward.cc).
#pragma once

#include <cstdint>

#include "kernels/kernels.h"
#include "kv/kv_arena.h"

namespace kvw {

// Which activation rows a weight type's matmul reads: Q8_0 rows for Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL/
// Q8_0/MXFP4, Q8_K rows for K-quants, and f32 rows as they are for float weights (and the
// dequantised types).
inline bool uses_q8_0(GgmlType t) {
  return t == GgmlType::kQ4_0 || t == GgmlType::kQ4_1 || t == GgmlType::kQ5_0 ||
         t == GgmlType::kQ5_1 || t == GgmlType::kIQ4_NL || t == GgmlType::kQ8_0 ||
         t == GgmlType::kMXFP4;
}
inline bool uses_q8_k(GgmlType t) {
  return t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ6_K;
}
inline bool takes_quantised_act(GgmlType t) {
  return uses_q8_0(t) || uses_q8_k(t);
}

// Query tokens per attention tile (kernels.h: the tile reads each K/V row once).
constexpr int64_t kAttnTile = 16;

// The kernels' view of layer l of the arena (layout in kv/kv_arena.h).
inline kernels::KvLayerView layer_view(const KvArena& kv, int32_t l) {
  uint8_t* base = kv.layer_base(l);
  const auto& c = kv.config();
  const bool int8 = c.dtype == KvDtype::kInt8;
  return {c.dtype,
          base,
          base + kv.v_offset(),
          int8 ? base + kv.k_scale_offset() : nullptr,
          int8 ? base + kv.v_scale_offset() : nullptr,
          (int64_t)KvArena::layer_block_bytes(c),
          c.block_size,
          c.n_kv_heads,
          c.head_dim};
}

}  // namespace kvw
