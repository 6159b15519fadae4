// model/families: every architecture kvwarden reads is one row of the family table, and the
// row's switches reach the hyper-parameters of a file of that architecture.
#include "model/families/family.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "model_test_util.h"

namespace kvw {
namespace {

TEST(ModelFamily, EachFamilysSwitchesReachItsFilesHyperParameters) {
  std::vector<MakeModelSpec> specs;
  for (const char* preset : {"tiny", "qwen2moe-tiny", "qwen3-tiny", "qwen3moe-tiny", "gemma2-tiny",
                             "gemma3-tiny", "deepseek-v2-lite-tiny", "phi3-tiny", "gpt-oss-tiny"}) {
    specs.push_back(test::preset_spec(preset));
  }
  MakeModelSpec qwen2;  // no preset: the default shape under qwen2's name
  qwen2.arch = "qwen2";
  specs.push_back(qwen2);
  std::set<std::string> seen;
  for (const MakeModelSpec& s : specs) {
    const std::string path = test::write_model("family_" + s.arch, s);
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.ok()) << f.message();
    auto hp = hparams_from_gguf(**f);
    ASSERT_TRUE(hp.ok()) << hp.message();
    const ModelFamily* family = find_family(hp->arch);
    ASSERT_NE(family, nullptr) << hp->arch;
    EXPECT_EQ(hp->rope.style, family->rope_style) << hp->arch;
    EXPECT_EQ(hp->qk_norm, family->qk_norm) << hp->arch;
    EXPECT_EQ(hp->gate_up_fused, family->gate_up_fused) << hp->arch;
    EXPECT_EQ(hp->mla.is_mla(), family->mla) << hp->arch;
    seen.insert(hp->arch);
  }
  // A family added to the table needs a make-model file here too.
  for (const ModelFamily* family : all_families()) {
    EXPECT_TRUE(seen.count(std::string(family->arch))) << family->arch << " has no file here";
  }
}

TEST(ModelFamily, NamesAreUniqueAndUnknownOnesListEveryFamily) {
  std::set<std::string_view> names;
  for (const ModelFamily* family : all_families()) {
    EXPECT_TRUE(names.insert(family->arch).second) << family->arch << " twice";
    EXPECT_EQ(find_family(family->arch), family);
  }
  EXPECT_EQ(find_family("mamba"), nullptr);
  GgufWriter w;
  w.set_string("general.architecture", "mamba");
  const std::string path = ::testing::TempDir() + "/family_mamba.gguf";
  ASSERT_TRUE(w.write(path).ok());
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok());
  auto hp = hparams_from_gguf(**f);
  ASSERT_FALSE(hp.ok());
  for (const ModelFamily* family : all_families()) {
    EXPECT_NE(hp.message().find(std::string(family->arch)), std::string::npos) << hp.message();
  }
}

}  // namespace
}  // namespace kvw
