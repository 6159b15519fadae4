// core/kv_dtype.h: element types of the KV cache, shared by the KV manager (which sizes blocks)
// and the kernels (which read and write them).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kvw {

enum class KvDtype : uint8_t {
  kF32,
  kF16,
  kBF16,
  kInt8,  // symmetric int8 per element + one f32 scale per (token, kv head) for K and for V
};

inline std::string_view kv_dtype_name(KvDtype d) {
  switch (d) {
    case KvDtype::kF32:
      return "f32";
    case KvDtype::kF16:
      return "f16";
    case KvDtype::kBF16:
      return "bf16";
    case KvDtype::kInt8:
      return "int8";
  }
  return "?";
}

inline std::optional<KvDtype> parse_kv_dtype(std::string_view s) {
  if (s == "f32" || s == "fp32") return KvDtype::kF32;
  if (s == "f16" || s == "fp16" || s == "auto") return KvDtype::kF16;
  if (s == "bf16") return KvDtype::kBF16;
  if (s == "int8") return KvDtype::kInt8;
  return std::nullopt;
}

// Bytes of one stored element (int8 scales are extra, see kv_row_bytes).
inline uint64_t kv_elem_bytes(KvDtype d) {
  switch (d) {
    case KvDtype::kF32:
      return 4;
    case KvDtype::kF16:
    case KvDtype::kBF16:
      return 2;
    case KvDtype::kInt8:
      return 1;
  }
  return 0;
}

// Bytes of one (token, kv head) row of head_dim elements, including the int8 scale.
inline uint64_t kv_row_bytes(KvDtype d, int32_t head_dim) {
  switch (d) {
    case KvDtype::kF32:
      return 4ull * head_dim;
    case KvDtype::kF16:
    case KvDtype::kBF16:
      return 2ull * head_dim;
    case KvDtype::kInt8:
      return 1ull * head_dim + 4;
  }
  return 0;
}

}  // namespace kvw
