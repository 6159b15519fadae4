// gguf/gguf_file.cc: lookups and typed metadata getters of an opened GgufFile.
// Parsing lives in gguf_reader.cc; everything here reads the already validated structures.

#include "gguf/gguf_file.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

namespace kvw {
namespace {

bool is_integer(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

// The value of an integer-typed GgufValue if it fits in int64.
std::optional<int64_t> as_int64(const GgufValue& v) {
  if (!is_integer(v.type)) return std::nullopt;
  if (const auto* u = std::get_if<uint64_t>(&v.v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  if (const auto* s = std::get_if<int64_t>(&v.v)) return *s;
  return std::nullopt;
}

std::string describe_int(const GgufValue& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return std::to_string(*u);
  if (const auto* s = std::get_if<int64_t>(&v.v)) return std::to_string(*s);
  return "?";
}

bool is_integer_value(const GgufValue& v) {
  return is_integer(v.type);
}
bool is_float_value(const GgufValue& v) {
  return v.type == GgufValueType::kFloat32 || v.type == GgufValueType::kFloat64;
}
template <typename ElemOk>
bool array_of(const GgufValue& v, ElemOk elem_ok) {
  return v.type == GgufValueType::kArray && elem_ok(std::get<GgufArray>(v.v).elem_type);
}

Error key_error(const GgufFile& f, std::string_view key, const std::string& what) {
  return Error{f.path() + ": key '" + std::string(key) + "': " + what};
}

// The value of `key` if present and accepted by `type_ok`; the getters' common error path.
template <typename TypeOk>
Result<const GgufValue*> lookup(const GgufFile& f, std::string_view key, TypeOk type_ok,
                                const char* want) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) return key_error(f, key, "missing");
  if (!type_ok(*v)) {
    std::string got = gguf_value_type_name(v->type);
    if (v->type == GgufValueType::kArray) {
      got = std::string("array of ") + gguf_value_type_name(std::get<GgufArray>(v->v).elem_type);
    }
    return key_error(f, key, std::string("expected ") + want + ", got " + got);
  }
  return v;
}

}  // namespace

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const GgufKv& kv : kvs_) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const GgufTensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<int64_t> GgufFile::get_int(std::string_view key) const {
  auto v = lookup(*this, key, is_integer_value, "an integer");
  if (!v.ok()) return v.error();
  const std::optional<int64_t> x = as_int64(**v);
  if (!x) return key_error(*this, key, "value " + describe_int(**v) + " does not fit int64");
  return *x;
}

Result<double> GgufFile::get_float(std::string_view key) const {
  auto v = lookup(*this, key, is_float_value, "f32 or f64");
  if (!v.ok()) return v.error();
  return std::get<double>((*v)->v);
}

Result<bool> GgufFile::get_bool(std::string_view key) const {
  auto v = lookup(
      *this, key, [](const GgufValue& x) { return x.type == GgufValueType::kBool; }, "bool");
  if (!v.ok()) return v.error();
  return std::get<uint64_t>((*v)->v) != 0;
}

Result<std::string> GgufFile::get_string(std::string_view key) const {
  auto v = lookup(
      *this, key, [](const GgufValue& x) { return x.type == GgufValueType::kString; }, "string");
  if (!v.ok()) return v.error();
  return std::get<std::string>((*v)->v);
}

Result<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
  auto v = lookup(
      *this, key,
      [](const GgufValue& x) {
        return array_of(x, [](GgufValueType e) { return e == GgufValueType::kString; });
      },
      "array of string");
  if (!v.ok()) return v.error();
  const GgufArray& a = std::get<GgufArray>((*v)->v);
  std::vector<std::string> out;
  out.reserve(a.items.size());
  for (const GgufValue& item : a.items) out.push_back(std::get<std::string>(item.v));
  return out;
}

Result<std::vector<float>> GgufFile::get_float_array(std::string_view key) const {
  auto v = lookup(
      *this, key,
      [](const GgufValue& x) {
        return array_of(x, [](GgufValueType e) {
          return e == GgufValueType::kFloat32 || e == GgufValueType::kFloat64;
        });
      },
      "array of f32 or f64");
  if (!v.ok()) return v.error();
  const GgufArray& a = std::get<GgufArray>((*v)->v);
  std::vector<float> out;
  out.reserve(a.items.size());
  for (const GgufValue& item : a.items) {
    // f64 beyond float range becomes +-inf explicitly (the cast alone would be undefined).
    const double d = std::get<double>(item.v);
    const double max = std::numeric_limits<float>::max();
    out.push_back(d > max ? INFINITY : d < -max ? -INFINITY : static_cast<float>(d));
  }
  return out;
}

Result<std::vector<int32_t>> GgufFile::get_int_array(std::string_view key) const {
  auto v = lookup(
      *this, key, [](const GgufValue& x) { return array_of(x, is_integer); }, "array of integers");
  if (!v.ok()) return v.error();
  const GgufArray& a = std::get<GgufArray>((*v)->v);
  std::vector<int32_t> out;
  out.reserve(a.items.size());
  for (size_t i = 0; i < a.items.size(); ++i) {
    const std::optional<int64_t> x = as_int64(a.items[i]);
    if (!x || *x < std::numeric_limits<int32_t>::min() ||
        *x > std::numeric_limits<int32_t>::max()) {
      return key_error(*this, key,
                       "element #" + std::to_string(i) + " value " + describe_int(a.items[i]) +
                           " does not fit int32");
    }
    out.push_back(static_cast<int32_t>(*x));
  }
  return out;
}

}  // namespace kvw
