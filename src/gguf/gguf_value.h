// gguf/gguf_value.h: a GGUF metadata value (scalar, string, or array of values, arrays nestable).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace kvw {

// Numbering as stored in GGUF files.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

const char* gguf_value_type_name(GgufValueType t);

struct GgufValue;

struct GgufArray {
  GgufValueType elem_type = GgufValueType::kUint8;
  std::vector<GgufValue> items;
};

struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  // Integers of any width live in i64/u64 (by signedness), floats in f64, bools in u64 (0/1).
  std::variant<uint64_t, int64_t, double, std::string, GgufArray> v;

  static GgufValue u32(uint32_t x) { return {GgufValueType::kUint32, uint64_t{x}}; }
  static GgufValue i32(int32_t x) { return {GgufValueType::kInt32, int64_t{x}}; }
  static GgufValue u64(uint64_t x) { return {GgufValueType::kUint64, x}; }
  static GgufValue f32(float x) { return {GgufValueType::kFloat32, double{x}}; }
  static GgufValue boolean(bool x) { return {GgufValueType::kBool, uint64_t{x ? 1u : 0u}}; }
  static GgufValue str(std::string s) { return {GgufValueType::kString, std::move(s)}; }
  static GgufValue array(GgufValueType elem, std::vector<GgufValue> items) {
    return {GgufValueType::kArray, GgufArray{elem, std::move(items)}};
  }
};

struct GgufKv {
  std::string key;
  GgufValue value;
};

}  // namespace kvw
