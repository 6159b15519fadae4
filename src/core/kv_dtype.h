// core/kv_dtype.h: element types of the KV cache, shared by the planner (which sizes caches for
// any GPU), the KV manager (which sizes blocks) and the kernels (which read and write them).
// The CPU engine stores every type but fp8 (kv_dtype_on_cpu); fp8 exists for planning GPUs.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kvw {

enum class KvDtype : uint8_t {
  kF32,
  kF16,
  kBF16,
  kFp8,   // fp8 (e4m3 or e5m2): one byte per element, no scale; GPU plans only
  kInt8,  // symmetric int8 per element + one f32 scale per (token, kv head) for K and for V
};

inline const char* kv_dtype_name(KvDtype d) {
  switch (d) {
    case KvDtype::kF32:
      return "f32";
    case KvDtype::kF16:
      return "f16";
    case KvDtype::kBF16:
      return "bf16";
    case KvDtype::kFp8:
      return "fp8";
    case KvDtype::kInt8:
      return "int8";
  }
  return "?";
}

// Case-insensitive; "auto" is f16 (callers that resolve "auto" otherwise check it first).
inline Result<KvDtype> parse_kv_dtype(std::string_view name) {
  std::string n(name);
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  if (n == "f32" || n == "fp32" || n == "float32") return KvDtype::kF32;
  if (n == "f16" || n == "fp16" || n == "float16" || n == "half" || n == "auto") {
    return KvDtype::kF16;
  }
  if (n == "bf16" || n == "bfloat16") return KvDtype::kBF16;
  if (n == "fp8" || n == "fp8_e4m3" || n == "fp8_e5m2") return KvDtype::kFp8;
  if (n == "int8") return KvDtype::kInt8;
  return Error{"unknown KV cache dtype '" + std::string(name) +
               "' (expected auto, f16, bf16, f32, fp8 or int8)"};
}

// Whether kvwarden's CPU kernels (kernels/kv_rows.cc) can store the type.
inline bool kv_dtype_on_cpu(KvDtype d) {
  return d != KvDtype::kFp8;
}

// Bytes of one stored element: 4, 2, 2, 1, 1 (int8 scales are extra, see kv_scale_bytes).
inline uint64_t kv_elem_bytes(KvDtype d) {
  switch (d) {
    case KvDtype::kF32:
      return 4;
    case KvDtype::kF16:
    case KvDtype::kBF16:
      return 2;
    case KvDtype::kFp8:
    case KvDtype::kInt8:
      return 1;
  }
  return 0;
}

// Bytes of the f32 scale stored per (token, kv head) row (per latent row for MLA): 4 or 0.
inline uint64_t kv_scale_bytes(KvDtype d) {
  return d == KvDtype::kInt8 ? 4 : 0;
}

// Bytes of one (token, kv head) row of head_dim elements, including the int8 scale.
inline uint64_t kv_row_bytes(KvDtype d, int32_t head_dim) {
  return kv_elem_bytes(d) * (uint64_t)head_dim + kv_scale_bytes(d);
}

}  // namespace kvw
