// Plan equals serve for every family: each family's make-model preset, loaded in the engine's
// Model, allocates exactly the workspace and KV rows `plan --engine` gives, for several step
// sizes and thread counts; and a shape with no GGUF facts (catalogue, config.json) converts to
// the dimensions the model reads from the file.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kv/kv_arena.h"
#include "model/families/family.h"
#include "model/model.h"
#include "model/model_maker.h"
#include "model/workspace_layout.h"
#include "planner/engine_budget.h"
#include "planner/model_source.h"

namespace kvw::planner {
namespace {

// Every small make-model preset of every registered family (a family or preset added to
// model/families is planned here with no edit): the tiny ones, Mixtral-style llama experts,
// DeepSeek-V3's split MLA and routing, Phi-4-mini's partial rotation.
std::vector<std::string> family_presets() {
  std::vector<std::string> presets;
  for (const ModelFamily* family : all_families()) {
    EXPECT_FALSE(family->tiny_preset().empty()) << family->arch;
    for (const MakerPreset& p : family->maker.presets) {
      if (p.make().n_embd <= 256) presets.emplace_back(p.name);
    }
  }
  return presets;
}

// The preset's file with every matrix in `type`; "" when its rows are not whole blocks of the
// type (deepseek-v3-tiny's q_lora_rank 48 in Q8_0), so it is planned in f32 only.
std::string write_preset(const std::string& preset, GgmlType type) {
  auto s = make_model_preset(preset);
  EXPECT_TRUE(s.ok()) << preset << ": " << (s.ok() ? "" : s.message());
  s->weight_type = type;
  // Typed experts too (gpt-oss's preset writes MXFP4 ones, which read Q8_0 activation rows): the
  // file is then the uniform type the shapes without a file plan for.
  if (find_family(s->arch)->maker.flags & kMakeExpertType) s->expert_type = type;
  if (type != GgmlType::kF32 && !s->validate().ok()) return "";
  const std::string path = ::testing::TempDir() + "/family_budget_" + preset + "_" +
                           std::string(type_traits(type).name) + ".gguf";
  const Status st = make_model(*s, path);
  EXPECT_TRUE(st.ok()) << st.message();
  return path;
}

// Every dimension but the matmul needs (those come from the tensor table).
void expect_same_dims(const ModelDims& a, const ModelDims& b, const std::string& who) {
  EXPECT_EQ(a.n_layer, b.n_layer) << who;
  EXPECT_EQ(a.n_embd, b.n_embd) << who;
  EXPECT_EQ(a.n_head, b.n_head) << who;
  EXPECT_EQ(a.n_head_kv, b.n_head_kv) << who;
  EXPECT_EQ(a.head_dim, b.head_dim) << who;
  EXPECT_EQ(a.n_ff, b.n_ff) << who;
  EXPECT_EQ(a.n_rot, b.n_rot) << who;
  EXPECT_EQ(a.local_rope, b.local_rope) << who;
  EXPECT_EQ(a.cache_heads, b.cache_heads) << who;
  EXPECT_EQ(a.cache_head_dim, b.cache_head_dim) << who;
  EXPECT_EQ(a.shared_kv, b.shared_kv) << who;
  EXPECT_EQ(a.n_expert, b.n_expert) << who;
  EXPECT_EQ(a.n_expert_used, b.n_expert_used) << who;
  EXPECT_EQ(a.n_ff_exp, b.n_ff_exp) << who;
  EXPECT_EQ(a.n_ff_shared, b.n_ff_shared) << who;
  EXPECT_EQ(a.q_lora_rank, b.q_lora_rank) << who;
  EXPECT_EQ(a.kv_lora_rank, b.kv_lora_rank) << who;
  EXPECT_EQ(a.qk_nope_dim, b.qk_nope_dim) << who;
  EXPECT_EQ(a.v_head_dim, b.v_head_dim) << who;
}

TEST(FamilyBudget, EveryFamilysWorkspaceAndKvEqualThePlan) {
  const struct {
    int64_t tokens;
    int threads;
  } steps[] = {{1, 1}, {37, 2}, {256, 3}};
  for (const std::string& preset : family_presets()) {
    for (GgmlType type : {GgmlType::kF32, GgmlType::kQ8_0}) {
      const std::string path = write_preset(preset, type);
      if (path.empty()) continue;
      auto shape = load_model_shape(path);
      ASSERT_TRUE(shape.ok()) << shape.message();
      for (const auto& step : steps) {
        const std::string who =
            path + " T " + std::to_string(step.tokens) + " threads " + std::to_string(step.threads);
        ModelOptions mo;
        mo.n_threads = step.threads;
        mo.max_batch_tokens = (int32_t)step.tokens;
        auto model = Model::load(path, mo);
        ASSERT_TRUE(model.ok()) << model.message();
        EngineOptions opt;
        opt.max_num_batched_tokens = step.tokens;
        opt.n_threads = step.threads;
        opt.max_model_len = 256;
        opt.max_num_seqs = 2;
        auto b = plan_engine_budget(*shape, opt);
        ASSERT_TRUE(b.ok()) << b.message();
        EXPECT_EQ(b->workspace_bytes, (*model)->workspace_bytes()) << who;
        EXPECT_GT(b->workspace_bytes, 0u) << who;
        KvArena arena((*model)->kv_config((uint32_t)b->num_blocks, 16, KvDtype::kF16,
                                          (uint32_t)b->num_window_slots));
        EXPECT_EQ(b->kv_pool_bytes, arena.bytes()) << who;
      }
      for (KvDtype d : {KvDtype::kF16, KvDtype::kInt8}) {
        auto model = Model::load(path, ModelOptions{.n_threads = 1, .max_batch_tokens = 8});
        ASSERT_TRUE(model.ok()) << model.message();
        EXPECT_EQ(engine_kv_bytes_per_token_layer(*shape, d) * (uint64_t)shape->n_layer * 16,
                  KvArena::block_bytes((*model)->kv_config(1, 16, d)))
            << path << " " << kv_dtype_name(d);
      }
    }
  }
}

TEST(FamilyBudget, ShapesWithoutAFileConvertToTheModelsDimensions) {
  // What the catalogue and config.json paths plan with: the shape's fields converted, not a
  // second formula. Every family's converted dimensions equal the ones its model reads.
  for (const std::string& preset : family_presets()) {
    const std::string path = write_preset(preset, GgmlType::kF32);
    auto shape = load_model_shape(path);
    ASSERT_TRUE(shape.ok()) << shape.message();
    auto model = Model::load(path, ModelOptions{.n_threads = 1, .max_batch_tokens = 8});
    ASSERT_TRUE(model.ok()) << model.message();
    ModelShape no_file = *shape;
    no_file.gguf.reset();
    const ModelDims converted = engine_dims(no_file, Dtype{"f32", 1, 4});
    expect_same_dims(converted, (*model)->dims(), preset);
    // Uniform f32: no quantised activation rows, and a GEMM scratch at least the model's.
    EXPECT_EQ(converted.matmul.act_q8_0_row_bytes, 0) << preset;
    EXPECT_GE(engine_workspace_bytes(no_file, 64, 2, Dtype{"f32", 1, 4}),
              workspace_layout((*model)->dims(), 64, 2).bytes())
        << preset;
  }
}

}  // namespace
}  // namespace kvw::planner
