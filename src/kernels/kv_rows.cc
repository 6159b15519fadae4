// kernels/kv_rows.cc: encode/decode of one KV row in each storage dtype. Shared by every kernel
// table (the per-row work is small next to the dot products) so all tables store identical bytes.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/half.h"
#include "kernels/kernels.h"

namespace kvw::kernels {
namespace {

// Byte offset of the row (block, kv_head, slot) from a base pointer; scales use elem = 4, dim 1.
int64_t row_offset(const KvLayerView& kv, std::span<const uint32_t> table, int64_t pos,
                   int32_t kv_head, int64_t row_bytes) {
  const int64_t block = table[pos / kv.block_size];
  return block * kv.block_stride +
         ((int64_t)kv_head * kv.block_size + pos % kv.block_size) * row_bytes;
}

}  // namespace

void kv_load_row(const KvLayerView& kv, bool value, std::span<const uint32_t> table, int64_t pos,
                 int32_t kv_head, float* out) {
  const int32_t hd = kv.head_dim;
  const auto* base = static_cast<const uint8_t*>(value ? kv.v : kv.k);
  const uint8_t* row =
      base + row_offset(kv, table, pos, kv_head, hd * (int64_t)kv_elem_bytes(kv.dtype));
  switch (kv.dtype) {
    case KvDtype::kF32:
      std::memcpy(out, row, hd * sizeof(float));
      break;
    case KvDtype::kF16:
      for (int32_t i = 0; i < hd; ++i) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        out[i] = f16_to_f32(h);
      }
      break;
    case KvDtype::kBF16:
      for (int32_t i = 0; i < hd; ++i) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
      break;
    case KvDtype::kInt8: {
      const auto* sbase = static_cast<const uint8_t*>(value ? kv.v_scale : kv.k_scale);
      float scale;
      std::memcpy(&scale, sbase + row_offset(kv, table, pos, kv_head, 4), 4);
      const auto* q = reinterpret_cast<const int8_t*>(row);
      for (int32_t i = 0; i < hd; ++i) out[i] = (float)q[i] * scale;
      break;
    }
    case KvDtype::kFp8:
      CHECK(false) << "no fp8 KV rows on CPU (EngineConfig::validate refuses them)";
  }
}

void kv_store_row(const KvLayerView& kv, bool value, std::span<const uint32_t> table, int64_t pos,
                  int32_t kv_head, const float* in) {
  const int32_t hd = kv.head_dim;
  auto* base = static_cast<uint8_t*>(value ? kv.v : kv.k);
  uint8_t* row = base + row_offset(kv, table, pos, kv_head, hd * (int64_t)kv_elem_bytes(kv.dtype));
  switch (kv.dtype) {
    case KvDtype::kF32:
      std::memcpy(row, in, hd * sizeof(float));
      break;
    case KvDtype::kF16:
      for (int32_t i = 0; i < hd; ++i) {
        const uint16_t h = f32_to_f16(in[i]);
        std::memcpy(row + 2 * i, &h, 2);
      }
      break;
    case KvDtype::kBF16:
      for (int32_t i = 0; i < hd; ++i) {
        const uint16_t h = f32_to_bf16(in[i]);
        std::memcpy(row + 2 * i, &h, 2);
      }
      break;
    case KvDtype::kInt8: {
      float amax = 0.0f;
      for (int32_t i = 0; i < hd; ++i) amax = std::max(amax, std::fabs(in[i]));
      const float scale = amax / 127.0f;
      const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
      auto* q = reinterpret_cast<int8_t*>(row);
      for (int32_t i = 0; i < hd; ++i) q[i] = (int8_t)std::nearbyint(in[i] * inv);
      auto* sbase = static_cast<uint8_t*>(value ? kv.v_scale : kv.k_scale);
      std::memcpy(sbase + row_offset(kv, table, pos, kv_head, 4), &scale, 4);
      break;
    }
    case KvDtype::kFp8:
      CHECK(false) << "no fp8 KV rows on CPU (EngineConfig::validate refuses them)";
  }
}

}  // namespace kvw::kernels
