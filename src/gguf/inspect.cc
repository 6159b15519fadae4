// gguf/inspect.cc: the text layout of `kvwarden inspect`.

#include "gguf/inspect.h"

#include <algorithm>
#include <cstdio>
#include <iomanip>

namespace kvw {
namespace {

constexpr size_t kMaxStringChars = 64;  // long strings (chat templates) are cut in the table

std::string quote(const std::string& s) {
  std::string out = "\"";
  const size_t n = std::min(s.size(), kMaxStringChars);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);  // UTF-8 passes through
    }
  }
  out += '"';
  if (s.size() > n) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string type_text(const GgufValue& v) {
  if (v.type != GgufValueType::kArray) return gguf_value_type_name(v.type);
  return std::string("[") + gguf_value_type_name(std::get<GgufArray>(v.v).elem_type) + "]";
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::string format_gguf_value(const GgufValue& v, size_t max_items) {
  switch (v.type) {
    case GgufValueType::kBool:
      return std::get<uint64_t>(v.v) ? "true" : "false";
    case GgufValueType::kFloat32:
    case GgufValueType::kFloat64: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.9g", std::get<double>(v.v));
      return buf;
    }
    case GgufValueType::kString:
      return quote(std::get<std::string>(v.v));
    case GgufValueType::kArray: {
      const GgufArray& a = std::get<GgufArray>(v.v);
      std::string s = "[";
      const size_t shown = std::min(a.items.size(), max_items);
      for (size_t i = 0; i < shown; ++i)
        s += (i ? ", " : "") + format_gguf_value(a.items[i], max_items);
      if (shown < a.items.size()) {
        s += (shown ? ", ... (" : "... (") + std::to_string(a.items.size()) + " items)";
      }
      return s + "]";
    }
    default:
      if (const auto* u = std::get_if<uint64_t>(&v.v)) return std::to_string(*u);
      if (const auto* i = std::get_if<int64_t>(&v.v)) return std::to_string(*i);
      return "?";
  }
}

void print_inspect(const GgufFile& file, std::ostream& out) {
  out << file.path() << ": GGUF v" << file.version() << ", alignment " << file.alignment() << ", "
      << file.file_bytes() << " bytes\n";

  const auto& kvs = file.metadata();
  size_t key_w = 3;
  for (const GgufKv& kv : kvs) key_w = std::max(key_w, kv.key.size());
  out << "\nmetadata: " << kvs.size() << " keys\n";
  out << std::right << std::setw(5) << "#"
      << "  " << std::left << std::setw(key_w) << "key"
      << "  " << std::setw(10) << "type"
      << "  value\n";
  for (size_t i = 0; i < kvs.size(); ++i) {
    out << std::right << std::setw(5) << i << "  " << std::left << std::setw(key_w) << kvs[i].key
        << "  " << std::setw(10) << type_text(kvs[i].value) << "  "
        << format_gguf_value(kvs[i].value) << "\n";
  }

  const auto& tensors = file.tensors();
  size_t name_w = 4;
  size_t shape_w = 5;
  for (const GgufTensorInfo& t : tensors) {
    name_w = std::max(name_w, t.name.size());
    shape_w = std::max(shape_w, shape_text(t.shape).size());
  }
  out << "\ntensors: " << tensors.size() << "\n";
  out << std::right << std::setw(5) << "#"
      << "  " << std::left << std::setw(name_w) << "name"
      << "  " << std::setw(5) << "type"
      << "  " << std::setw(shape_w) << "shape"
      << "  " << std::right << std::setw(12) << "bytes"
      << "  " << std::setw(12) << "offset"
      << "\n";
  uint64_t total_elements = 0;
  uint64_t total_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensorInfo& t = tensors[i];
    out << std::right << std::setw(5) << i << "  " << std::left << std::setw(name_w) << t.name
        << "  " << std::setw(5) << type_traits(t.type).name << "  " << std::setw(shape_w)
        << shape_text(t.shape) << "  " << std::right << std::setw(12) << t.num_bytes << "  "
        << std::setw(12) << t.offset << "\n";
    total_elements += t.num_elements;
    total_bytes += t.num_bytes;
  }
  out << "\ntotals: " << tensors.size() << " tensors, " << total_elements << " elements, "
      << total_bytes << " bytes of tensor data\n";
}

Status print_inspect(const std::string& path, std::ostream& out) {
  auto file = GgufFile::open(path);
  if (!file.ok()) return file.error();
  print_inspect(**file, out);
  return {};
}

}  // namespace kvw
