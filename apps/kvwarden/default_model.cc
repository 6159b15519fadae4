#include "apps/kvwarden/default_model.h"

#include <cstdlib>
#include <filesystem>
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

}  // namespace kvw::app
