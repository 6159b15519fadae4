// gguf/gguf_reader.cc: GgufFile::open: mmap the file and validate all of it up front.
// Layout (little-endian): magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, n_kv x (string
// key, u32 type, value), n_tensors x (string name, u32 n_dims, u64 dims[n_dims], u32 type,
// u64 offset), padding to the alignment, tensor data. A string is u64 length + bytes.
// Every count is checked against the bytes that remain BEFORE anything is reserved, so a
// hostile file cannot make us allocate more than its own size justifies.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "core/huge_pages.h"
#include "gguf/gguf_file.h"

namespace kvw {

namespace {

constexpr uint32_t kMaxDims = 4;
constexpr int kMaxArrayDepth = 8;
// Cap on decoded metadata array elements: each costs ~48 bytes in memory against as little as
// one byte on disk. Real vocabularies have < 300k entries per array.
constexpr uint64_t kMaxMetadataItems = uint64_t{1} << 24;
// Smallest encodings, used to reject absurd counts before reserving.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // empty key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, n_dims 0, type, offset

// Bytes of one scalar value of type t on disk; 0 for string/array/unknown.
uint64_t scalar_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    default:
      return 0;
  }
}

bool known_value_type(uint32_t raw) {
  return raw <= static_cast<uint32_t>(GgufValueType::kFloat64);
}

// The magic as printable text, with anything else escaped, for the error message.
std::string printable(const uint8_t* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\'') {
      s += static_cast<char>(p[i]);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", p[i]);
      s += buf;
    }
  }
  return s;
}

}  // namespace

class GgufParser {
 public:
  explicit GgufParser(GgufFile& f) : f_(f) {}

  Status parse() {
    KVW_RETURN_IF_ERROR(parse_header());
    KVW_RETURN_IF_ERROR(parse_metadata());
    KVW_RETURN_IF_ERROR(parse_alignment());
    KVW_RETURN_IF_ERROR(parse_tensor_infos());
    return place_tensor_data();
  }

 private:
  Error fail(const std::string& what) const {
    return Error{f_.path_ + ": " + context_ + ": " + what};
  }
  uint64_t remaining() const { return f_.size_ - pos_; }

  Status read_raw(void* out, uint64_t n, const char* what) {
    if (n > remaining()) {
      return fail(std::string(what) + " at offset " + std::to_string(pos_) +
                  " runs past end of file (" + std::to_string(f_.size_) + " bytes)");
    }
    std::memcpy(out, f_.base_ + pos_, n);
    pos_ += n;
    return {};
  }

  template <typename T>
  Result<T> read(const char* what) {
    T v;
    KVW_RETURN_IF_ERROR(read_raw(&v, sizeof v, what));
    return v;
  }

  Result<std::string> read_string(const char* what) {
    auto len = read<uint64_t>(what);
    if (!len.ok()) return len.error();
    if (*len > remaining()) {
      return fail(std::string(what) + " length " + std::to_string(*len) +
                  " runs past end of file (" + std::to_string(remaining()) + " bytes left)");
    }
    std::string s(reinterpret_cast<const char*>(f_.base_ + pos_), *len);
    pos_ += *len;
    return s;
  }

  Status parse_header() {
    context_ = "header";
    uint8_t magic[4];
    if (f_.size_ < 4) {
      return fail("magic runs past end of file (" + std::to_string(f_.size_) + " bytes)");
    }
    KVW_RETURN_IF_ERROR(read_raw(magic, 4, "magic"));
    if (std::memcmp(magic, "GGUF", 4) != 0) {
      return fail("bad magic '" + printable(magic, 4) + "' (expected 'GGUF')");
    }
    auto version = read<uint32_t>("version");
    if (!version.ok()) return version.error();
    if (*version == 1) return fail("unsupported version 1 (GGUF v1 is obsolete; expected 2 or 3)");
    if (*version != 2 && *version != 3) {
      return fail("unsupported version " + std::to_string(*version) + " (expected 2 or 3)");
    }
    f_.version_ = *version;
    auto n_tensors = read<uint64_t>("n_tensors");
    if (!n_tensors.ok()) return n_tensors.error();
    auto n_kv = read<uint64_t>("n_kv");
    if (!n_kv.ok()) return n_kv.error();
    n_tensors_ = *n_tensors;
    n_kv_ = *n_kv;
    // Each needs some bytes of its own; both together must fit in what is left.
    if (n_kv_ > remaining() / kMinKvBytes) return count_error("n_kv", n_kv_, kMinKvBytes);
    if (n_tensors_ > (remaining() - n_kv_ * kMinKvBytes) / kMinTensorInfoBytes) {
      return count_error("n_tensors", n_tensors_, kMinTensorInfoBytes);
    }
    return {};
  }

  Error count_error(const char* field, uint64_t count, uint64_t min_bytes) const {
    return fail(std::string(field) + " " + std::to_string(count) +
                " runs past end of file (each needs at least " + std::to_string(min_bytes) +
                " bytes, " + std::to_string(remaining()) + " bytes left)");
  }

  Status parse_metadata() {
    f_.kvs_.reserve(n_kv_);
    std::unordered_map<std::string, uint64_t> seen;
    for (uint64_t i = 0; i < n_kv_; ++i) {
      context_ = "metadata key #" + std::to_string(i);
      auto key = read_string("key");
      if (!key.ok()) return key.error();
      context_ +=
          " '" + printable(reinterpret_cast<const uint8_t*>(key->data()), key->size()) + "'";
      if (auto [it, fresh] = seen.emplace(*key, i); !fresh) {
        return fail("duplicate key (first at metadata key #" + std::to_string(it->second) + ")");
      }
      auto type = read<uint32_t>("value type");
      if (!type.ok()) return type.error();
      auto value = read_value(*type, 0);
      if (!value.ok()) return value.error();
      f_.kvs_.push_back(GgufKv{std::move(*key), std::move(*value)});
    }
    return {};
  }

  Result<GgufValue> read_value(uint32_t raw_type, int depth) {
    if (!known_value_type(raw_type)) return fail("unknown value type " + std::to_string(raw_type));
    const auto type = static_cast<GgufValueType>(raw_type);
    GgufValue v;
    v.type = type;
    switch (type) {
      case GgufValueType::kUint8:
        return read_int<uint8_t>(v);
      case GgufValueType::kInt8:
        return read_int<int8_t>(v);
      case GgufValueType::kUint16:
        return read_int<uint16_t>(v);
      case GgufValueType::kInt16:
        return read_int<int16_t>(v);
      case GgufValueType::kUint32:
        return read_int<uint32_t>(v);
      case GgufValueType::kInt32:
        return read_int<int32_t>(v);
      case GgufValueType::kUint64:
        return read_int<uint64_t>(v);
      case GgufValueType::kInt64:
        return read_int<int64_t>(v);
      case GgufValueType::kFloat32: {
        auto x = read<float>("value");
        if (!x.ok()) return x.error();
        v.v = double{*x};
        return v;
      }
      case GgufValueType::kFloat64: {
        auto x = read<double>("value");
        if (!x.ok()) return x.error();
        v.v = *x;
        return v;
      }
      case GgufValueType::kBool: {
        auto x = read<uint8_t>("value");
        if (!x.ok()) return x.error();
        if (*x > 1) return fail("bool value " + std::to_string(*x) + " is not 0 or 1");
        v.v = uint64_t{*x};
        return v;
      }
      case GgufValueType::kString: {
        auto s = read_string("string");
        if (!s.ok()) return s.error();
        v.v = std::move(*s);
        return v;
      }
      case GgufValueType::kArray: {
        auto a = read_array(depth + 1);
        if (!a.ok()) return a.error();
        v.v = std::move(*a);
        return v;
      }
    }
    return fail("unknown value type " + std::to_string(raw_type));  // unreachable
  }

  template <typename T>
  Result<GgufValue> read_int(GgufValue& v) {
    auto x = read<T>("value");
    if (!x.ok()) return x.error();
    if constexpr (std::is_signed_v<T>) {
      v.v = int64_t{*x};
    } else {
      v.v = uint64_t{*x};
    }
    return v;
  }

  Result<GgufArray> read_array(int depth) {
    if (depth > kMaxArrayDepth) {
      return fail("arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
    }
    auto elem = read<uint32_t>("array element type");
    if (!elem.ok()) return elem.error();
    if (!known_value_type(*elem))
      return fail("unknown array element type " + std::to_string(*elem));
    auto count = read<uint64_t>("array length");
    if (!count.ok()) return count.error();
    const auto elem_type = static_cast<GgufValueType>(*elem);
    uint64_t min_bytes = scalar_bytes(elem_type);
    if (elem_type == GgufValueType::kString) min_bytes = 8;
    if (elem_type == GgufValueType::kArray) min_bytes = 4 + 8;
    if (*count > remaining() / min_bytes) {
      return fail("array length " + std::to_string(*count) + " of " +
                  gguf_value_type_name(elem_type) + " runs past end of file (" +
                  std::to_string(remaining()) + " bytes left)");
    }
    num_items_ += *count;
    if (num_items_ > kMaxMetadataItems) {
      return fail("metadata arrays hold more than " + std::to_string(kMaxMetadataItems) +
                  " elements in total");
    }
    GgufArray a;
    a.elem_type = elem_type;
    a.items.reserve(*count);
    for (uint64_t i = 0; i < *count; ++i) {
      auto item = read_value(*elem, depth);
      if (!item.ok()) return item.error();
      a.items.push_back(std::move(*item));
    }
    return a;
  }

  Status parse_alignment() {
    const GgufValue* v = f_.find("general.alignment");
    if (v == nullptr) return {};
    context_ = "metadata 'general.alignment'";
    auto a = f_.get_int("general.alignment");
    if (!a.ok())
      return fail(std::string("must be an unsigned integer, got ") + gguf_value_type_name(v->type));
    if (*a <= 0 || !std::has_single_bit(static_cast<uint64_t>(*a))) {
      return fail("alignment " + std::to_string(*a) + " is not a power of two");
    }
    f_.alignment_ = static_cast<uint64_t>(*a);
    return {};
  }

  Status parse_tensor_infos() {
    f_.tensors_.reserve(n_tensors_);
    std::unordered_map<std::string, uint64_t> seen;
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      context_ = "tensor info #" + std::to_string(i);
      auto name = read_string("name");
      if (!name.ok()) return name.error();
      context_ = "tensor '" +
                 printable(reinterpret_cast<const uint8_t*>(name->data()), name->size()) + "'";
      if (auto [it, fresh] = seen.emplace(*name, i); !fresh) {
        return fail("duplicate tensor name (first is tensor #" + std::to_string(it->second) + ")");
      }
      GgufTensorInfo t;
      t.name = std::move(*name);
      KVW_RETURN_IF_ERROR(parse_shape(t));
      auto raw_type = read<uint32_t>("type");
      if (!raw_type.ok()) return raw_type.error();
      const auto type = ggml_type_from_raw(*raw_type);
      if (!type) return fail("unknown type " + std::to_string(*raw_type));
      t.type = *type;
      const TypeTraits& tr = type_traits(t.type);
      const int64_t row = t.shape.empty() ? 1 : t.shape[0];
      if (row % tr.block_elems != 0) {
        return fail("row length " + std::to_string(row) + " is not a multiple of the " +
                    std::string(tr.name) + " block size " + std::to_string(tr.block_elems));
      }
      const uint64_t blocks = t.num_elements / tr.block_elems;
      if (blocks > f_.size_ / tr.block_bytes) {
        return fail(std::to_string(t.num_elements) + " elements of " + std::string(tr.name) +
                    " are larger than the file (" + std::to_string(f_.size_) + " bytes)");
      }
      t.num_bytes = blocks * tr.block_bytes;
      auto offset = read<uint64_t>("offset");
      if (!offset.ok()) return offset.error();
      t.offset = *offset;
      f_.tensors_.push_back(std::move(t));
    }
    return {};
  }

  Status parse_shape(GgufTensorInfo& t) {
    auto n_dims = read<uint32_t>("n_dims");
    if (!n_dims.ok()) return n_dims.error();
    if (*n_dims > kMaxDims) {
      return fail("n_dims " + std::to_string(*n_dims) + " exceeds " + std::to_string(kMaxDims));
    }
    uint64_t n = 1;
    std::string dims_text;
    bool overflow = false;
    for (uint32_t d = 0; d < *n_dims; ++d) {
      auto dim = read<uint64_t>("dim");
      if (!dim.ok()) return dim.error();
      dims_text += (d == 0 ? "" : " x ") + std::to_string(*dim);
      constexpr uint64_t kMax = std::numeric_limits<int64_t>::max();
      if (*dim > kMax || (*dim != 0 && n > kMax / *dim)) overflow = true;
      if (!overflow) n *= *dim;
      t.shape.push_back(static_cast<int64_t>(overflow ? 0 : *dim));
    }
    if (overflow) return fail("dims " + dims_text + " overflow int64 element count");
    t.num_elements = n;
    return {};
  }

  Status place_tensor_data() {
    const uint64_t a = f_.alignment_;
    const uint64_t pad = (a - pos_ % a) % a;
    uint64_t start = pos_ + pad;  // no overflow: pos_ <= size and a <= 2^63
    if (start > f_.size_) {
      if (!f_.tensors_.empty()) {
        context_ = "data section";
        return fail("aligned start " + std::to_string(start) + " is past end of file (" +
                    std::to_string(f_.size_) + " bytes)");
      }
      start = f_.size_;  // a file without tensors may omit the trailing padding
    }
    f_.data_ = f_.base_ + start;
    const uint64_t data_bytes = f_.size_ - start;
    for (const GgufTensorInfo& t : f_.tensors_) {
      context_ = "tensor '" + t.name + "'";
      if (t.offset % a != 0) {
        return fail("offset " + std::to_string(t.offset) + " is not a multiple of alignment " +
                    std::to_string(a));
      }
      if (t.offset > data_bytes || t.num_bytes > data_bytes - t.offset) {
        return fail("data at offset " + std::to_string(t.offset) + " (+" +
                    std::to_string(t.num_bytes) + " bytes) runs past end of file (data section " +
                    std::to_string(data_bytes) + " bytes)");
      }
    }
    return {};
  }

  GgufFile& f_;
  uint64_t pos_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  uint64_t num_items_ = 0;  // metadata array elements decoded so far
  std::string context_;     // field being parsed, for error messages
};

namespace {
std::atomic<uint64_t> g_open_count{0};
}  // namespace

uint64_t GgufFile::open_count() {
  return g_open_count.load();
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  g_open_count.fetch_add(1);
  std::unique_ptr<GgufFile> f(new GgufFile());  // private constructor: make_unique can't reach it
  f->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{path + ": cannot open: " + std::strerror(errno)};
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error{path + ": not a regular file"};
  }
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return Error{path + ": mmap failed: " + std::strerror(err)};
    }
    f->base_ = static_cast<const uint8_t*>(p);
    f->mapped_ = true;
  }
  ::close(fd);  // the mapping stays valid
  GgufParser parser(*f);
  KVW_RETURN_IF_ERROR(parser.parse());
  return f;
}

Status GgufFile::set_writable(bool writable) {
  if (base_ == nullptr || owned_ != nullptr) return Status::ok_status();  // anon: writable
  if (::mprotect(const_cast<uint8_t*>(base_), size_, PROT_READ | (writable ? PROT_WRITE : 0)) !=
      0) {
    return Error{path_ + ": mprotect failed: " + std::strerror(errno)};
  }
  return Status::ok_status();
}

Status GgufFile::move_tensors_to_memory() {
  if (!mapped_ || owned_ != nullptr) return Status::ok_status();
  const uint64_t off = (uint64_t)(data_ - base_);
  const uint64_t n = size_ - off;
  if (n == 0) return Status::ok_status();
  owned_ = map_huge_pages(n, &owned_bytes_);
  if (owned_ == nullptr) {
    return Error{path_ + ": cannot allocate " + std::to_string(n) +
                 " bytes for the tensor data: " + std::strerror(errno)};
  }
  // Copy chunk by chunk, unmapping each file chunk (metadata was parsed into owned values).
  constexpr uint64_t kChunk = uint64_t{64} << 20;
  for (uint64_t c = 0; c < size_; c += kChunk) {
    const uint64_t end = std::min(size_, c + kChunk);
    const uint64_t from = std::max(c, off);
    if (from < end) std::memcpy(owned_ + (from - off), base_ + from, end - from);
    ::munmap(const_cast<uint8_t*>(base_) + c, end - c);
  }
  mapped_ = false;
  data_ = owned_;
  return Status::ok_status();
}

GgufFile::~GgufFile() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(base_), size_);
  unmap_huge_pages(owned_, owned_bytes_);
}

}  // namespace kvw
