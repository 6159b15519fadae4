// gguf/gguf_value.cc: names of GGUF metadata value types, as gguf-dump prints them.

#include "gguf/gguf_value.h"

namespace kvw {

const char* gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
      return "u8";
    case GgufValueType::kInt8:
      return "i8";
    case GgufValueType::kUint16:
      return "u16";
    case GgufValueType::kInt16:
      return "i16";
    case GgufValueType::kUint32:
      return "u32";
    case GgufValueType::kInt32:
      return "i32";
    case GgufValueType::kFloat32:
      return "f32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kUint64:
      return "u64";
    case GgufValueType::kInt64:
      return "i64";
    case GgufValueType::kFloat64:
      return "f64";
  }
  return "unknown";
}

}  // namespace kvw
