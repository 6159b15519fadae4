// gguf/gguf_writer.h: builds a GGUF v3 (or v2) file in memory and writes it.
// Used by `kvwarden make-model` and by tests that need (possibly hostile) files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/gguf_value.h"
#include "gguf/tensor_types.h"

namespace kvw {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3, uint64_t alignment = 32);

  // Metadata, written in insertion order; setting a key again replaces its value.
  void set(const std::string& key, GgufValue value);
  void set_u32(const std::string& key, uint32_t v) { set(key, GgufValue::u32(v)); }
  void set_f32(const std::string& key, float v) { set(key, GgufValue::f32(v)); }
  void set_bool(const std::string& key, bool v) { set(key, GgufValue::boolean(v)); }
  void set_string(const std::string& key, std::string v) { set(key, GgufValue::str(std::move(v))); }
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);

  // A tensor whose bytes are already in `type`'s layout; shape in ggml order (shape[0] = row).
  // CHECKs that data.size() matches the shape and type.
  void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> shape,
                  std::vector<uint8_t> data);

  // Writes header, metadata, tensor infos, padding and data. Error names the path.
  Status write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
  };
  uint32_t version_;
  uint64_t alignment_;
  std::vector<GgufKv> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace kvw
