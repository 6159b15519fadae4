// model/families/families.cc: the registry lists every family file in src/model/families (CMake
// generates the list from the folder), each file's families in its order, files by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "model/families/family.h"

namespace kvw {
namespace {

// The architectures a family file defines: its ModelFamily initialisers' `.arch = "..."`, in
// file order (a spec's `s.arch = ...` is not one).
std::vector<std::string> archs_defined_in(const std::filesystem::path& file) {
  std::ifstream in(file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  static const std::regex kArch(R"([{,]\s*\.arch\s*=\s*"([^"]+)\")");
  std::vector<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kArch);
       it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

TEST(FamilyRegistry, ListsEveryFamilyFileByNameEachInItsOrder) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(KVW_FAMILIES_DIR)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".cc" && name != "families.cc" && name != "tensor_table.cc")
      files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> expected;
  for (const auto& file : files) {
    const std::vector<std::string> archs = archs_defined_in(file);
    EXPECT_FALSE(archs.empty()) << file << " defines no ModelFamily";
    expected.insert(expected.end(), archs.begin(), archs.end());
  }
  std::vector<std::string> listed;
  std::string joined;
  for (const ModelFamily* f : all_families()) {
    listed.emplace_back(f->arch);
    joined += (joined.empty() ? "" : ", ") + std::string(f->arch);
  }
  EXPECT_EQ(listed, expected);
  EXPECT_EQ(supported_families(), joined);
  ASSERT_GE(files.size(), 7u);  // the folder was found
}

TEST(FamilyRegistry, FindsEachListedFamilyByArchAndModelType) {
  for (const ModelFamily* f : all_families()) {
    EXPECT_EQ(find_family(f->arch), f) << f->arch;
    for (std::string_view t : f->hf.model_types) {
      if (t.empty()) continue;
      EXPECT_EQ(find_family_by_model_type(t), f) << t;
    }
  }
  EXPECT_EQ(find_family("not-a-family"), nullptr);
}

}  // namespace
}  // namespace kvw
