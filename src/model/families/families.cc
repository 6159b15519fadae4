#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/families/family.h"
#include "model/model_maker.h"

namespace kvw {

namespace families {
extern const ModelFamily kLlama, kQwen2, kQwen2Moe, kQwen3, kQwen3Moe, kGemma2, kGemma3, kDeepseek2,
    kPhi3, kGptOss;
}  // namespace families

namespace {

// Explicit, not self-registering: a static library drops object files nothing refers to.
const ModelFamily* const kFamilies[] = {
    &families::kLlama,    &families::kQwen2,  &families::kQwen2Moe, &families::kQwen3,
    &families::kQwen3Moe, &families::kGemma2, &families::kGemma3,   &families::kDeepseek2,
    &families::kPhi3,     &families::kGptOss};

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
  return kFamilies;
}

const ModelFamily* find_family(std::string_view arch) {
  for (const ModelFamily* f : kFamilies) {
    if (f->arch == arch) return f;
  }
  return nullptr;
}

const ModelFamily* find_family_by_model_type(std::string_view name) {
  for (const ModelFamily* f : kFamilies) {
    for (std::string_view t : f->hf.model_types) {
      if (!t.empty() && t == name) return f;
    }
  }
  return find_family(name);
}

std::string supported_families() {
  std::string s;
  for (const ModelFamily* f : kFamilies) s += (s.empty() ? "" : ", ") + std::string(f->arch);
  return s;
}

std::string families_taking(uint32_t maker_flag) {
  std::vector<std::string_view> names;
  for (const ModelFamily* f : kFamilies) {
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
