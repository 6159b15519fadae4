// model/families: every architecture kvwarden reads is one row of the family table, and the
// row's switches reach the hyper-parameters of a file of that architecture.
#include "model/families/family.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "model/families/tensor_table.h"
#include "model_test_util.h"

namespace kvw {
namespace {

TEST(ModelFamily, EachFamilysSwitchesReachItsFilesHyperParameters) {
  std::vector<MakeModelSpec> specs;
  for (const ModelFamily* family : all_families())
    specs.push_back(test::preset_spec(std::string(family->tiny_preset())));
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
    EXPECT_EQ(hp->gemma.post_norms, family->post_norms) << hp->arch;
    EXPECT_EQ(hp->gemma.scale_embd, family->scale_embd) << hp->arch;
    seen.insert(hp->arch);
  }
  // A family added to the table needs a make-model file here too.
  for (const ModelFamily* family : all_families()) {
    EXPECT_TRUE(seen.count(std::string(family->arch))) << family->arch << " has no file here";
  }
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// make-model and the loader read one declaration per family: the file make-model writes for a
// family's preset holds exactly the declaration's required tensors (made from the hyper-
// parameters read back from that file), in its order and shapes, and the model loads it.
TEST(ModelFamily, EveryFamilysFileHoldsExactlyItsDeclaredTensors) {
  for (const ModelFamily* family : all_families()) {
    ASSERT_FALSE(family->tiny_preset().empty()) << family->arch << " has no make-model preset";
    const MakeModelSpec spec = test::preset_spec(std::string(family->tiny_preset()));
    ASSERT_EQ(spec.arch, family->arch) << family->tiny_preset();
    const std::string path = test::write_model("declared_" + spec.arch, spec);
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.ok()) << f.message();
    auto hp = hparams_from_gguf(**f);
    ASSERT_TRUE(hp.ok()) << hp.message();
    std::vector<std::string> declared, found;
    const TensorTable table = declared_tensors(*hp);
    for (const TensorDecl& d : table.entries()) {
      if (!d.optional) declared.push_back(d.name + " " + shape_str(d.shape));
    }
    for (const GgufTensorInfo& t : (*f)->tensors())
      found.push_back(t.name + " " + shape_str(t.shape));
    EXPECT_EQ(found, declared) << family->arch;
    EXPECT_GT(declared.size(), 4u) << family->arch;
    EXPECT_NE(test::load_model(path, 1), nullptr) << family->arch;
  }
}

// The loader takes each family's names and shapes from the declaration: for every family, a
// required tensor of the last layer dropped, or stored one row short, is refused naming it
// with found vs expected.
TEST(ModelFamily, EveryFamilysLoaderRefusesAMissingOrMisshapenDeclaredTensor) {
  for (const ModelFamily* family : all_families()) {
    const MakeModelSpec spec = test::preset_spec(std::string(family->tiny_preset()));
    const std::string path = test::write_model("refuse_" + spec.arch, spec);
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.ok());
    auto hp = hparams_from_gguf(**f);
    ASSERT_TRUE(hp.ok());
    // The last required f32 tensor of the last layer (a norm or bias: any type shape fits).
    const std::string last = "blk." + std::to_string(hp->n_layer - 1) + ".";
    const TensorDecl* victim = nullptr;
    const TensorTable table = declared_tensors(*hp);
    for (const TensorDecl& d : table.entries()) {
      if (!d.optional && d.store == TensorStore::kF32 && d.shape.size() == 1 &&
          d.name.starts_with(last)) {
        victim = &d;
      }
    }
    ASSERT_NE(victim, nullptr) << family->arch;
    const std::string name = victim->name;
    const int64_t n = victim->shape[0];
    const std::string dropped = test::rewrite(
        path, "refuse_missing_" + spec.arch, test::kNoMeta,
        [&](GgufWriter&, const GgufTensorInfo& t, const uint8_t*) { return t.name != name; });
    test::expect_refused(dropped, {"'" + name + "': missing"});
    const std::string shorter = test::rewrite(
        path, "refuse_shape_" + spec.arch, test::kNoMeta,
        [&](GgufWriter& w, const GgufTensorInfo& t, const uint8_t* p) {
          if (t.name != name) return true;
          w.add_tensor(t.name, t.type, {n - 2}, std::vector<uint8_t>(p, p + (n - 2) * 4));
          return false;
        });
    test::expect_refused(shorter, {"'" + name + "': shape [" + std::to_string(n - 2) +
                                   "], expected [" + std::to_string(n) + "]"});
  }
}

// make-model's presets live in their family's rules: every preset makes a valid spec of its own
// family, names are unique, and an unknown name is refused listing them all.
TEST(ModelFamily, EveryPresetIsAValidSpecOfItsOwnFamily) {
  std::set<std::string_view> names;
  for (const ModelFamily* family : all_families()) {
    ASSERT_NE(family->maker.validate, nullptr) << family->arch;
    ASSERT_NE(family->maker.write_keys, nullptr) << family->arch;
    for (const MakerPreset& p : family->maker.presets) {
      EXPECT_TRUE(names.insert(p.name).second) << p.name << " twice";
      auto spec = make_model_preset(std::string(p.name));
      ASSERT_TRUE(spec.ok()) << p.name;
      EXPECT_EQ(spec->arch, family->arch) << p.name;
      const Status st = spec->validate();
      EXPECT_TRUE(st.ok()) << p.name << ": " << st.message();
    }
  }
  auto unknown = make_model_preset("no-such-preset");
  ASSERT_FALSE(unknown.ok());
  for (std::string_view name : names)
    EXPECT_NE(unknown.message().find(std::string(name)), std::string::npos) << name;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Each flag only some families read (MakerFlag), changed on every family's tiny spec. Where the
// family lacks the bit: refused naming the flag and exactly the families whose rules take it.
// Where it has it: accepted, and the file it writes differs from the preset's and loads (a flag
// a family takes but ignores would write the same bytes). A new bit needs a row here.
TEST(ModelFamily, AFamilyOnlyFlagChangesItsFamilysFileAndIsRefusedElsewhere) {
  const struct {
    uint32_t bit;
    const char* flag;
    void (*set)(MakeModelSpec&);
  } rows[] = {
      {kMakeHeadDim, "--head-dim", [](MakeModelSpec& s) { s.head_dim = 2 * s.head_len(); }},
      {kMakeExperts, "--experts", [](MakeModelSpec& s) { s.n_expert = s.n_expert_used = 2; }},
      {kMakeExpertFfn, "--expert-ffn", [](MakeModelSpec& s) { s.n_ff_exp = 32; }},
      {kMakeSharedExpert, "--shared-expert-ffn", [](MakeModelSpec& s) { s.n_ff_shexp = 64; }},
      {kMakeWindow, "--sliding-window", [](MakeModelSpec& s) { s.sliding_window += 32; }},
      {kMakeMla, "--kv-lora-rank", [](MakeModelSpec& s) { s.kv_lora_rank = 32; }},
      {kMakeMla, "--gating", [](MakeModelSpec& s) { s.gating = ExpertGating::kSigmoid; }},
      {kMakeGemma, "--swa-period", [](MakeModelSpec& s) { s.swa_period = 3; }},
      {kMakeGemma, "--final-softcap", [](MakeModelSpec& s) { s.final_softcap = 20.0f; }},
      {kMakeLocalRopeBase, "--rope-theta-swa",
       [](MakeModelSpec& s) { s.rope_theta_swa = 5000.0f; }},
      {kMakeLongRope, "--rope-dim", [](MakeModelSpec& s) { s.n_rot = s.head_len() / 2; }},
      {kMakeAttnSoftcap, "--attn-softcap", [](MakeModelSpec& s) { s.attn_softcap = 40.0f; }},
      {kMakeLongRope, "--longrope", [](MakeModelSpec& s) { s.longrope = !s.longrope; }},
      {kMakeExpertType, "--expert-type", [](MakeModelSpec& s) { s.expert_type = GgmlType::kQ8_0; }},
  };
  uint32_t covered = 0, used = 0;
  for (const auto& r : rows) covered |= r.bit;
  for (const ModelFamily* family : all_families()) used |= family->maker.flags;
  EXPECT_EQ(used & ~covered, 0u) << "a MakerFlag bit has no row here";
  for (const ModelFamily* family : all_families()) {
    const MakeModelSpec preset = test::preset_spec(std::string(family->tiny_preset()));
    const std::string base = file_bytes(test::write_model("flag_base", preset));
    for (const auto& r : rows) {
      MakeModelSpec s = preset;
      r.set(s);
      const Status st = s.validate();
      const std::string who = std::string(family->arch) + " " + r.flag;
      if (!(family->maker.flags & r.bit)) {
        ASSERT_FALSE(st.ok()) << who << ": accepted";
        EXPECT_NE(
            st.message().find(std::string(r.flag) + " needs --arch " + families_taking(r.bit)),
            std::string::npos)
            << who << ": " << st.message();
        continue;
      }
      ASSERT_TRUE(st.ok()) << who << ": " << st.message();
      const std::string path = test::write_model("flag_set", s);
      EXPECT_TRUE(file_bytes(path) != base) << who << " wrote the preset's file";
      auto f = GgufFile::open(path);
      ASSERT_TRUE(f.ok()) << who;
      EXPECT_TRUE(hparams_from_gguf(**f).ok()) << who;
    }
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
