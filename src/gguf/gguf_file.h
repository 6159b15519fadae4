// gguf/gguf_file.h: read-only view of a GGUF (v2, v3) file through mmap.
// open() parses and validates everything up front (header, metadata, tensor infos, offsets),
// so later accessors cannot fail on bounds. This is the only untrusted file input: every error
// names the file and the field, and nothing is allocated beyond what the file itself justifies.
// Thread safety: immutable after open(); safe to share across threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf_value.h"
#include "gguf/tensor_types.h"

namespace kvw {

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // ggml order: shape[0] is the fastest-varying (row length)
  GgmlType type;
  uint64_t offset;  // from the start of the data section (aligned)
  uint64_t num_elements;
  uint64_t num_bytes;
};

class GgufFile {
 public:
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Calls to open() in this process, failed ones included: tests check that a start-up path
  // (Engine::create, kvwarden serve) opens and parses the model file once.
  static uint64_t open_count();
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_bytes() const { return size_; }

  const std::vector<GgufKv>& metadata() const { return kvs_; }  // file order
  const GgufValue* find(std::string_view key) const;            // nullptr if absent

  // Typed getters. Errors name the file and key ("m.gguf: key 'llama.block_count': missing").
  // Integers accept any integer type whose value fits; floats accept f32 or f64.
  Result<int64_t> get_int(std::string_view key) const;
  Result<double> get_float(std::string_view key) const;
  Result<bool> get_bool(std::string_view key) const;
  Result<std::string> get_string(std::string_view key) const;
  Result<std::vector<std::string>> get_string_array(std::string_view key) const;
  Result<std::vector<float>> get_float_array(std::string_view key) const;
  Result<std::vector<int32_t>> get_int_array(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  const uint8_t* tensor_data(const GgufTensorInfo& t) const { return data_ + t.offset; }

  // Load-time repacking (model/weights.cc pack_matrices): while writable, pointers from
  // tensor_data() may be written through. The mapping is MAP_PRIVATE, so the file never changes:
  // each page written becomes a private anonymous page that replaces the file page this process
  // mapped, and resident bytes stay those of the file. Errors: mprotect failing.
  Status set_writable(bool writable);

  // Moves the tensor data out of the file mapping into anonymous memory on transparent huge
  // pages (2 MiB-aligned, MADV_HUGEPAGE), 64 MiB at a time, unmapping each file chunk once
  // copied, so resident bytes never exceed the file's by more than one chunk. Why: a step streams
  // every weight, and over 4 KiB file pages each page is a TLB miss and a stop for the hardware
  // prefetcher (measured: decode at 40-55% of the speed from huge pages; llama.cpp's -mmp 0
  // shows the same). Pointers from tensor_data() taken before are invalid after. The copy is
  // private (the file is not written) and writable. Errors: the allocation failing.
  Status move_tensors_to_memory();
  bool tensors_in_memory() const { return owned_ != nullptr; }
  // move_tensors_to_memory's region (tensor data rounded up to 2 MiB); empty before the move.
  std::span<const uint8_t> tensor_memory() const { return {owned_, owned_bytes_}; }

 private:
  GgufFile() = default;
  friend class GgufParser;

  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  const uint8_t* base_ = nullptr;  // mmapped file (unmapped, mapped_ false, once moved)
  uint64_t size_ = 0;
  bool mapped_ = false;
  uint8_t* owned_ = nullptr;  // move_tensors_to_memory's region, owned_bytes_ long
  uint64_t owned_bytes_ = 0;
  const uint8_t* data_ = nullptr;  // start of the tensor data section
  std::vector<GgufKv> kvs_;
  std::vector<GgufTensorInfo> tensors_;
};

}  // namespace kvw
