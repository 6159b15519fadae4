#include "apps/kvwarden/default_model.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace kvw::app {

std::string find_default_model() {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (const char* env = std::getenv("KVW_DEFAULT_MODEL"); env != nullptr && *env != '\0') {
    return fs::exists(env, ec) ? std::string(env) : std::string();
  }
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path() / "../share/kvwarden/default.gguf";
    if (fs::exists(installed, ec)) return installed.lexically_normal().string();
  }
  const fs::path in_tree = fs::path(KVW_SOURCE_DIR) / "models/kvwarden-default.gguf";
  return fs::exists(in_tree, ec) ? in_tree.string() : std::string();
}

std::string missing_default_model_message() {
  if (const char* env = std::getenv("KVW_DEFAULT_MODEL"); env != nullptr && *env != '\0') {
    return "no --model given and the default model $KVW_DEFAULT_MODEL names no file: " +
           std::string(env);
  }
  return "no --model given and no default model found (share/kvwarden/default.gguf beside the "
         "binary or models/kvwarden-default.gguf in the source tree); set --model or "
         "$KVW_DEFAULT_MODEL";
}

}  // namespace kvw::app
