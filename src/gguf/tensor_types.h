// gguf/tensor_types.h: the ggml tensor types kvwarden reads and writes, their block geometry,
// and scalar (reference) quantise/dequantise of whole rows.
// Numbering follows ggml's enum ggml_type, which is what GGUF files store.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kvw {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,  // activation format for K-quant dot products; never a weight type here
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kBF16 = 30,
  kMXFP4 = 39,
};

struct TypeTraits {
  std::string_view name;  // "f32", "q4_K", ... as gguf-dump prints them
  int64_t block_elems;    // elements per block (1 for float types)
  int64_t block_bytes;    // bytes per block
};

// Traits of a raw type number read from a file; nullopt for types we do not support.
std::optional<GgmlType> ggml_type_from_raw(uint32_t raw);
const TypeTraits& type_traits(GgmlType type);
std::optional<GgmlType> ggml_type_from_name(std::string_view name);  // "q8_0", "Q8_0", "f16" ...

// Bytes of a row of n elements; nullopt when n is not a multiple of the block size.
std::optional<uint64_t> row_bytes(GgmlType type, int64_t n);

// Reference conversions of one row of n elements (n a multiple of the block size).
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);

}  // namespace kvw
