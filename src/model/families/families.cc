#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/families/family.h"
#include "model/model_maker.h"

namespace kvw {

// Each file in this folder but this one and tensor_table.cc holds families and defines
// `std::span<const ModelFamily* const> <file>_families()`; CMake lists the files, sorted by name,
// in family_files.inc as KVW_FAMILY_FILE(<file>) (src/model/CMakeLists.txt). A listed file that
// lacks the function fails to link; an unlisted one cannot exist.
namespace families {
#define KVW_FAMILY_FILE(file) std::span<const ModelFamily* const> file##_families();
#include "family_files.inc"
#undef KVW_FAMILY_FILE
}  // namespace families

namespace {

// Files by name, each file's families in its order. Built on first use, so it never reads
// another file's tables before their static initialisation.
const std::vector<const ModelFamily*>& registry() {
  static const std::vector<const ModelFamily*> all = [] {
    std::vector<const ModelFamily*> out;
#define KVW_FAMILY_FILE(file) \
  for (const ModelFamily* f : families::file##_families()) out.push_back(f);
#include "family_files.inc"
#undef KVW_FAMILY_FILE
    return out;
  }();
  return all;
}

}  // namespace

void write_size_keys(const MakeModelSpec& s, const std::string& prefix, int64_t n_ff,
                     int64_t n_head_kv, GgufWriter& w) {
  w.set_u32(prefix + "context_length", s.n_ctx);
  w.set_u32(prefix + "embedding_length", s.n_embd);
  w.set_u32(prefix + "block_count", s.n_layer);
  w.set_u32(prefix + "feed_forward_length", n_ff);
  w.set_u32(prefix + "attention.head_count", s.n_head);
  w.set_u32(prefix + "attention.head_count_kv", n_head_kv);
}

std::span<const ModelFamily* const> all_families() {
  return registry();
}

const ModelFamily* find_family(std::string_view arch) {
  for (const ModelFamily* f : registry()) {
    if (f->arch == arch) return f;
  }
  return nullptr;
}

const ModelFamily* find_family_by_model_type(std::string_view name) {
  for (const ModelFamily* f : registry()) {
    for (std::string_view t : f->hf.model_types) {
      if (!t.empty() && t == name) return f;
    }
  }
  return find_family(name);
}

std::string supported_families() {
  std::string s;
  for (const ModelFamily* f : registry()) s += (s.empty() ? "" : ", ") + std::string(f->arch);
  return s;
}

std::string families_taking(uint32_t maker_flag) {
  std::vector<std::string_view> names;
  for (const ModelFamily* f : registry()) {
    if (f->maker.flags & maker_flag) names.push_back(f->arch);
  }
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + std::string(names[i]);
  }
  return out;
}

namespace families {

Status read_int(const GgufFile& f, const std::string& key, int32_t& out, bool required) {
  if (f.find(key) == nullptr) {
    if (required) return Error{f.path() + ": key '" + key + "': missing"};
    return {};
  }
  auto v = f.get_int(key);
  if (!v) return Error{v.message()};
  if (*v < 0 || *v > (int64_t{1} << 30)) {
    return Error{f.path() + ": key '" + key + "': value " + std::to_string(*v) + " out of range"};
  }
  out = (int32_t)*v;
  return {};
}

Status read_float(const GgufFile& f, const std::string& key, float& out) {
  if (f.find(key) == nullptr) return {};
  auto v = f.get_float(key);
  if (!v) return Error{v.message()};
  out = (float)*v;
  return {};
}

Status read_bool(const GgufFile& f, const std::string& key, bool& out) {
  if (f.find(key) == nullptr) return {};
  auto v = f.get_bool(key);
  if (!v) return Error{v.message()};
  out = *v;
  return {};
}

}  // namespace families
}  // namespace kvw
