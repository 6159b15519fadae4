// gguf/gguf_writer.cc: serialises metadata and tensors into the GGUF layout that
// gguf_reader.cc parses (see the layout comment there), padding the data section start and
// every tensor to the alignment, as ggml does.

#include "gguf/gguf_writer.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/check.h"

namespace kvw {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is little-endian");

constexpr uint64_t kDefaultAlignment = 32;  // what readers assume without general.alignment

class ByteSink {
 public:
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }
  template <typename T>
  void put(T v) {
    bytes(&v, sizeof v);
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) {
    while (buf_.size() % alignment != 0) buf_.push_back(0);
  }
  uint64_t size() const { return buf_.size(); }
  const std::vector<uint8_t>& data() const { return buf_; }

 private:
  std::vector<uint8_t> buf_;
};

// Integer payload whichever variant alternative holds it (callers may build either).
uint64_t int_bits(const GgufValue& v) {
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return *u;
  if (const auto* s = std::get_if<int64_t>(&v.v)) return static_cast<uint64_t>(*s);
  CHECK(false) << gguf_value_type_name(v.type) << " value holds no integer";
  return 0;
}

double float_value(const GgufValue& v) {
  if (const auto* d = std::get_if<double>(&v.v)) return *d;
  CHECK(false) << gguf_value_type_name(v.type) << " value holds no float";
  return 0;
}

// The value's payload, without its type tag (arrays carry their element type inside).
void put_value(ByteSink& out, const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return out.put(static_cast<uint8_t>(int_bits(v)));
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return out.put(static_cast<uint16_t>(int_bits(v)));
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
      return out.put(static_cast<uint32_t>(int_bits(v)));
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
      return out.put(int_bits(v));
    case GgufValueType::kFloat32:
      return out.put(static_cast<float>(float_value(v)));
    case GgufValueType::kFloat64:
      return out.put(float_value(v));
    case GgufValueType::kString:
      return out.str(std::get<std::string>(v.v));
    case GgufValueType::kArray: {
      const GgufArray& a = std::get<GgufArray>(v.v);
      out.put(static_cast<uint32_t>(a.elem_type));
      out.put<uint64_t>(a.items.size());
      for (const GgufValue& item : a.items) {
        CHECK(item.type == a.elem_type) << "array of " << gguf_value_type_name(a.elem_type)
                                        << " holds a " << gguf_value_type_name(item.type);
        put_value(out, item);
      }
      return;
    }
  }
  CHECK(false) << "unknown GgufValueType " << static_cast<uint32_t>(v.type);
}

}  // namespace

GgufWriter::GgufWriter(uint32_t version, uint64_t alignment)
    : version_(version), alignment_(alignment) {
  CHECK(version == 2 || version == 3) << "GGUF version " << version;
  CHECK(std::has_single_bit(alignment)) << "alignment " << alignment;
}

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (GgufKv& kv : kvs_) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  }
  kvs_.push_back(GgufKv{key, std::move(value)});
}

void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (const std::string& s : v) items.push_back(GgufValue::str(s));
  set(key, GgufValue::array(GgufValueType::kString, std::move(items)));
}

void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (float x : v) items.push_back(GgufValue::f32(x));
  set(key, GgufValue::array(GgufValueType::kFloat32, std::move(items)));
}

void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (int32_t x : v) items.push_back(GgufValue::i32(x));
  set(key, GgufValue::array(GgufValueType::kInt32, std::move(items)));
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> shape,
                            std::vector<uint8_t> data) {
  CHECK(shape.size() <= 4) << name << ": " << shape.size() << " dims";
  int64_t num_elements = 1;
  for (int64_t d : shape) {
    CHECK(d >= 0) << name << ": negative dim";
    num_elements *= d;
  }
  const int64_t row = shape.empty() ? 1 : shape[0];
  CHECK(row_bytes(type, row).has_value()) << name << ": row " << row << " not whole blocks";
  const TypeTraits& tr = type_traits(type);
  const uint64_t want = static_cast<uint64_t>(num_elements / tr.block_elems * tr.block_bytes);
  CHECK(data.size() == want) << name << ": " << data.size() << " bytes, shape needs " << want;
  tensors_.push_back(Tensor{name, type, std::move(shape), std::move(data)});
}

Status GgufWriter::write(const std::string& path) const {
  std::vector<GgufKv> kvs = kvs_;
  const bool has_alignment_key = std::any_of(
      kvs.begin(), kvs.end(), [](const GgufKv& kv) { return kv.key == "general.alignment"; });
  if (!has_alignment_key && alignment_ != kDefaultAlignment) {
    kvs.push_back(GgufKv{"general.alignment", GgufValue::u32(static_cast<uint32_t>(alignment_))});
  }

  ByteSink out;
  out.bytes("GGUF", 4);
  out.put<uint32_t>(version_);
  out.put<uint64_t>(tensors_.size());
  out.put<uint64_t>(kvs.size());
  for (const GgufKv& kv : kvs) {
    out.str(kv.key);
    out.put(static_cast<uint32_t>(kv.value.type));
    put_value(out, kv.value);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    out.str(t.name);
    out.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) out.put<uint64_t>(static_cast<uint64_t>(d));
    out.put(static_cast<uint32_t>(t.type));
    out.put<uint64_t>(offset);
    offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  if (!tensors_.empty()) out.pad_to(alignment_);
  for (const Tensor& t : tensors_) {
    out.bytes(t.data.data(), t.data.size());
    out.pad_to(alignment_);
  }

  // Written beside the target and renamed into place: readers that mmap the old file (another
  // process, a running server) keep a valid mapping, and a failed write leaves no half file.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(tmp.c_str(), "wb"), &std::fclose);
  if (!file) return Error{path + ": cannot create: " + std::strerror(errno)};
  const bool wrote = std::fwrite(out.data().data(), 1, out.size(), file.get()) == out.size();
  const int write_errno = errno;
  const bool closed = std::fclose(file.release()) == 0;
  if (!wrote || !closed) {
    std::remove(tmp.c_str());
    return Error{path + ": write failed: " + std::strerror(wrote ? errno : write_errno)};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    return Error{path + ": cannot replace: " + std::strerror(e)};
  }
  return {};
}

}  // namespace kvw
