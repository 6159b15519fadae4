// config.json and GGUF inputs, and kvwarden's own engine budget checked against the engine's
// real buffers (Model::workspace_bytes, KvArena::bytes_per_block).
#include <gtest/gtest.h>

#include <fstream>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "kv/kv_arena.h"
#include "kv/kv_manager.h"
#include "model/model.h"
#include "model/model_maker.h"
#include "planner/catalog.h"
#include "planner/engine_budget.h"
#include "planner/memory_plan.h"
#include "planner/model_source.h"

namespace kvw::planner {
namespace {

TEST(ConfigJson, LlamaGqaMatchesTheCatalogue) {
  const char* cfg = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 8192, "rope_theta": 500000.0, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16"})";
  auto m = shape_from_config_json(cfg, "llama3.json");
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->head_dim, 128);  // derived: hidden_size / heads
  EXPECT_EQ(kv_bytes_per_token(*m, KvDtype::kBF16, 1), 131072u);
  EXPECT_EQ(count_params(*m).total(), count_params(*find_model("llama-3-8b")).total());
}

TEST(ConfigJson, DeepSeekV2LiteIsMlaAndMoe) {
  const char* cfg = R"({"model_type": "deepseek_v2", "hidden_size": 2048,
    "intermediate_size": 10944, "num_attention_heads": 16, "num_key_value_heads": 16,
    "num_hidden_layers": 27, "vocab_size": 102400, "max_position_embeddings": 163840,
    "kv_lora_rank": 512, "q_lora_rank": null, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
    "v_head_dim": 128, "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
    "moe_intermediate_size": 1408, "first_k_dense_replace": 1})";
  auto m = shape_from_config_json(cfg, "v2lite.json");
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_TRUE(m->is_mla());
  EXPECT_EQ(m->q_lora_rank, 0);
  EXPECT_EQ(kv_bytes_per_token(*m, KvDtype::kBF16, 1), 27u * 576 * 2);
  EXPECT_EQ(count_params(*m).total(), count_params(*find_model("deepseek-v2-lite")).total());
}

TEST(ConfigJson, SlidingWindowRulesPerFamily) {
  // Mistral: every layer windowed.
  auto mistral = shape_from_config_json(
      R"({"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
      "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
      "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096})",
      "mistral.json");
  ASSERT_TRUE(mistral.ok()) << mistral.message();
  EXPECT_EQ(mistral->window_of_layer(31), 4096);
  // Qwen2.5 ships sliding_window but use_sliding_window=false: full attention.
  auto qwen = shape_from_config_json(
      R"({"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
      "num_attention_heads": 28, "num_key_value_heads": 4, "num_hidden_layers": 28,
      "vocab_size": 152064, "max_position_embeddings": 131072, "sliding_window": 131072,
      "use_sliding_window": false, "tie_word_embeddings": false})",
      "qwen.json");
  ASSERT_TRUE(qwen.ok()) << qwen.message();
  EXPECT_EQ(qwen->window_of_layer(0), 0);
  EXPECT_TRUE(qwen->qkv_bias);
  EXPECT_EQ(count_params(*qwen).total(), count_params(*find_model("qwen2.5-7b")).total());
  // Gemma-2: alternate layers, explicit head_dim, tied embeddings by default.
  auto gemma = shape_from_config_json(
      R"({"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
      "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
      "num_hidden_layers": 42, "vocab_size": 256000, "max_position_embeddings": 8192,
      "sliding_window": 4096})",
      "gemma.json");
  ASSERT_TRUE(gemma.ok()) << gemma.message();
  EXPECT_EQ(gemma->window_of_layer(0), 4096);
  EXPECT_EQ(gemma->window_of_layer(1), 0);
  EXPECT_TRUE(gemma->tied_embeddings);
  // layer_types (hybrid stacks) override the family rule.
  auto hybrid = shape_from_config_json(
      R"({"model_type": "x", "hidden_size": 64, "intermediate_size": 128,
      "num_attention_heads": 4, "num_hidden_layers": 3, "vocab_size": 100, "sliding_window": 8,
      "layer_types": ["linear_attention", "sliding_attention", "full_attention"]})",
      "hybrid.json");
  ASSERT_TRUE(hybrid.ok()) << hybrid.message();
  EXPECT_EQ(hybrid->window_of_layer(0), -1);
  EXPECT_EQ(hybrid->window_of_layer(1), 8);
  EXPECT_EQ(hybrid->window_of_layer(2), 0);
}

// config.json is read through the family that claims its model_type (model/families): its
// window rule, default biases and Q/K norms, so the importer names no architecture itself.
TEST(ConfigJson, FamilyRulesComeFromTheFamilyTable) {
  // Qwen1.5-MoE: qwen2moe's rules, as Qwen2's (sliding_window off unless enabled, biases with no
  // attention_bias key); the shared expert from shared_expert_intermediate_size.
  auto qmoe = shape_from_config_json(
      R"({"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
      "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 24,
      "vocab_size": 151936, "max_position_embeddings": 8192, "sliding_window": 32768,
      "use_sliding_window": false, "num_experts": 60, "num_experts_per_tok": 4,
      "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632})",
      "qwen2moe.json");
  ASSERT_TRUE(qmoe.ok()) << qmoe.message();
  EXPECT_EQ(qmoe->window_of_layer(0), 0);
  EXPECT_TRUE(qmoe->qkv_bias);
  EXPECT_EQ(qmoe->shared_ff(), 5632);
  EXPECT_EQ(kv_bytes_per_token(*qmoe, KvDtype::kBF16, 1),
            kv_bytes_per_token(*find_model("qwen1.5-moe-a2.7b"), KvDtype::kBF16, 1));
  // gpt-oss without layer_types: its family windows even layers, as its GGUF files do.
  auto oss = shape_from_config_json(
      R"({"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
      "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8,
      "head_dim": 64, "vocab_size": 201088, "max_position_embeddings": 131072,
      "sliding_window": 128, "num_local_experts": 32, "num_experts_per_tok": 4})",
      "gpt-oss.json");
  ASSERT_TRUE(oss.ok()) << oss.message();
  EXPECT_EQ(oss->window_of_layer(0), 128);
  EXPECT_EQ(oss->window_of_layer(1), 0);
  // Qwen3: per-head Q/K norms from the family; no biases.
  auto qwen3 = shape_from_config_json(
      R"({"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
      "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
      "num_hidden_layers": 36, "vocab_size": 151936, "max_position_embeddings": 40960})",
      "qwen3.json");
  ASSERT_TRUE(qwen3.ok()) << qwen3.message();
  EXPECT_TRUE(qwen3->qk_norm);
  EXPECT_FALSE(qwen3->qkv_bias);
  EXPECT_EQ(count_params(*qwen3).total(), count_params(*find_model("qwen3-8b")).total());
}

TEST(ConfigJson, BadInputIsOneClearError) {
  auto junk = shape_from_config_json("{not json", "junk.json");
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.message().find("junk.json"), std::string::npos);
  auto wrong = shape_from_config_json(R"({"hidden_size": "big"})", "w.json");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find("hidden_size"), std::string::npos) << wrong.message();
  auto heads = shape_from_config_json(
      R"({"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
      "num_key_value_heads": 3, "num_hidden_layers": 2, "vocab_size": 100})",
      "h.json");
  ASSERT_FALSE(heads.ok());
  EXPECT_NE(heads.message().find("num_key_value_heads"), std::string::npos);
  EXPECT_FALSE(load_model_shape("no-such-model").ok());
  EXPECT_FALSE(load_model_shape("/nonexistent/config.json").ok());
}

TEST(ConfigJson, LoadModelShapeReadsAFile) {
  const std::string path = ::testing::TempDir() + "/planner_config.json";
  std::ofstream(path) << R"({"model_type": "llama", "hidden_size": 2048,
    "intermediate_size": 5632, "num_attention_heads": 32, "num_key_value_heads": 4,
    "num_hidden_layers": 22, "vocab_size": 32000, "max_position_embeddings": 2048})";
  auto m = load_model_shape(path);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(kv_bytes_per_token(*m, KvDtype::kF16, 1), 22u * 2 * 4 * 64 * 2);
}

std::string make(const MakeModelSpec& s, const std::string& file) {
  const std::string path = ::testing::TempDir() + "/" + file;
  const Status st = make_model(s, path);
  EXPECT_TRUE(st.ok()) << st.message();
  return path;
}

TEST(Gguf, WeightsAreTheExactSumOfTensorBytes) {
  MakeModelSpec s;
  s.n_embd = 256;
  s.n_head = 8;
  s.n_head_kv = 2;
  s.n_ff = 512;
  s.n_layer = 3;
  s.weight_type = GgmlType::kQ4_K;
  const std::string path = make(s, "planner_q4k.gguf");
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok());
  uint64_t sum = 0;
  for (const auto& t : (*f)->tensors()) sum += t.num_bytes;
  auto m = load_model_shape(path);
  ASSERT_TRUE(m.ok()) << m.message();
  ASSERT_TRUE(m->gguf.has_value());
  EXPECT_EQ(m->gguf->weight_bytes, sum);
  EXPECT_EQ(m->n_kv_head, 2);
  EXPECT_EQ(m->head_dim, 32);
  PlanInputs in;
  in.gpu_name = "test";
  in.gpu_memory_bytes = kGiB;
  in.weight_dtype = Dtype{"bf16", 1, 2};  // ignored: the file's bytes are exact
  auto p = plan_memory(*m, in);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->weight_bytes_total, sum);
  EXPECT_EQ(p->stages[0].weight_bytes, sum);
}

// Loads `path` in the engine and checks the planner's budget against its real buffers.
void expect_engine_matches(const std::string& path, int64_t T, int n_threads) {
  ModelOptions mo;
  mo.n_threads = n_threads;
  mo.max_batch_tokens = (int32_t)T;
  auto model = Model::load(path, mo);
  ASSERT_TRUE(model.ok()) << model.message();
  auto shape = load_model_shape(path);
  ASSERT_TRUE(shape.ok()) << shape.message();
  EXPECT_EQ(engine_workspace_bytes(*shape, T, (*model)->num_threads(), Dtype{}),
            (*model)->workspace_bytes())
      << path;
  // Every KV dtype the engine has: f32, f16, bf16, int8 (with per token-head f32 scales).
  for (KvDtype d : {KvDtype::kF32, KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8}) {
    EXPECT_EQ(engine_kv_bytes_per_token_layer(*shape, d) * (uint64_t)shape->n_layer * 16,
              KvArena::block_bytes((*model)->kv_config(1, 16, d)))
        << kv_dtype_name(d);
  }
  EngineOptions opt;
  opt.max_num_batched_tokens = T;
  opt.n_threads = (*model)->num_threads();
  opt.max_model_len = 512;
  opt.max_num_seqs = 4;
  auto b = plan_engine_budget(*shape, opt);
  ASSERT_TRUE(b.ok()) << b.message();
  EXPECT_EQ(b->weights_bytes, (*model)->weights().total_bytes);
  EXPECT_EQ(b->workspace_bytes, (*model)->workspace_bytes());
  EXPECT_EQ(b->num_blocks, 4u * 32);
  // Hybrid window models also have window slots (4 x (1 + 3) + T / 16 of them here).
  KvArena arena((*model)->kv_config((uint32_t)b->num_blocks, 16, kvw::KvDtype::kF16,
                                    (uint32_t)b->num_window_slots));
  EXPECT_EQ(b->kv_pool_bytes, arena.bytes());
  if (b->hybrid_window > 0) {
    EXPECT_EQ(b->num_window_slots, uint64_t(16 + (T + 15) / 16)) << path;
  }
  EXPECT_EQ(b->total_bytes,
            b->weights_bytes + b->workspace_bytes + b->kv_pool_bytes + b->reserve_bytes);
}

TEST(EngineBudget, EqualsTheEnginesBuffersForF32Q8AndKQuantModels) {
  MakeModelSpec s;
  s.n_embd = 256;
  s.n_head = 8;
  s.n_head_kv = 2;
  s.n_ff = 768;
  s.n_layer = 2;
  expect_engine_matches(make(s, "planner_f32.gguf"), 64, 2);
  s.weight_type = GgmlType::kQ8_0;
  expect_engine_matches(make(s, "planner_q8.gguf"), 128, 1);
  // Q5_0 and IQ4_NL (llama-quantize's fallbacks) pack and read Q8_0 rows as Q8_0 does.
  s.weight_type = GgmlType::kQ5_0;
  expect_engine_matches(make(s, "planner_q5_0.gguf"), 48, 2);
  s.weight_type = GgmlType::kIQ4_NL;
  expect_engine_matches(make(s, "planner_iq4_nl.gguf"), 48, 2);
  s.weight_type = GgmlType::kQ4_1;  // and Q4_1 / Q5_1, whose min term reads the same rows
  expect_engine_matches(make(s, "planner_q4_1.gguf"), 48, 2);
  s.weight_type = GgmlType::kQ5_1;
  expect_engine_matches(make(s, "planner_q5_1.gguf"), 48, 2);
  s.weight_type = GgmlType::kQ6_K;
  s.arch = "qwen2";
  s.tied = true;
  expect_engine_matches(make(s, "planner_q6k.gguf"), 32, 3);
}

TEST(EngineBudget, EqualsTheEnginesBuffersForMoeModels) {
  // Mixtral-style: the workspace holds T x experts_used gathered rows for the experts.
  MakeModelSpec s = *make_model_preset("mixtral-tiny");
  s.n_embd = 256;
  s.n_ff = 512;
  expect_engine_matches(make(s, "planner_moe_f32.gguf"), 64, 2);
  s.weight_type = GgmlType::kQ4_K;
  s.n_expert_used = 3;
  expect_engine_matches(make(s, "planner_moe_q4k.gguf"), 48, 3);
}

TEST(EngineBudget, EqualsTheEnginesBuffersForMlaModels) {
  // DeepSeek's per-head k_b / v_b matrices (fused attn_kv_b: k_b read transposed, unpacked) and
  // the packed GEMM scratch of every packed matrix, in both layouts and three weight types
  // (V3-tiny's q_lora_rank 48 is not a whole number of Q8_0 blocks).
  const struct {
    const char* preset;
    GgmlType type;
  } cases[] = {{"deepseek-v2-lite-tiny", GgmlType::kF32},
               {"deepseek-v2-lite-tiny", GgmlType::kQ8_0},
               {"deepseek-v3-tiny", GgmlType::kF32},
               {"deepseek-v3-tiny", GgmlType::kF16}};
  for (const auto& c : cases) {
    MakeModelSpec s = *make_model_preset(c.preset);
    s.weight_type = c.type;
    const std::string name =
        std::string("planner_") + c.preset + "_" + std::string(type_traits(c.type).name);
    expect_engine_matches(make(s, name + ".gguf"), 96, 2);
    s.mla_layout = s.mla_layout == MlaLayout::kSplit ? MlaLayout::kKvB : MlaLayout::kSplit;
    expect_engine_matches(make(s, name + "_other_layout.gguf"), 40, 3);
  }
}

TEST(EngineBudget, EqualsTheEnginesBuffersForQwen3Models) {
  // Heads of 64 over n_embd 128 / 4 heads: q and the attention output are 256 wide, twice
  // n_embd, and the KV row is key_length long. Tied (the preset) and untied, f32 and Q8_0.
  MakeModelSpec s = *make_model_preset("qwen3-tiny");
  const std::string tied = make(s, "planner_qwen3_f32.gguf");
  expect_engine_matches(tied, 64, 2);
  s.tied = false;
  s.weight_type = GgmlType::kQ8_0;
  expect_engine_matches(make(s, "planner_qwen3_q8.gguf"), 40, 3);
  auto shape = load_model_shape(tied);
  ASSERT_TRUE(shape.ok()) << shape.message();
  EXPECT_EQ(shape->arch, "qwen3");
  EXPECT_EQ(shape->head_dim, 64);
  // 2 layers x (K + V) x 2 KV heads x 64 x 2 B: 1024 B per token in f16 (n_embd / n_head would
  // give 512).
  EXPECT_EQ(kv_bytes_per_token(*shape, KvDtype::kF16, 1), 2u * 2 * 2 * 64 * 2);
  EXPECT_EQ(engine_kv_bytes_per_token_layer(*shape, KvDtype::kF16) * 2, 1024u);
  // qwen3moe: the same attention, and the workspace's gathered expert rows.
  MakeModelSpec moe = *make_model_preset("qwen3moe-tiny");
  expect_engine_matches(make(moe, "planner_qwen3moe_f32.gguf"), 64, 2);
  moe.weight_type = GgmlType::kQ8_0;
  expect_engine_matches(make(moe, "planner_qwen3moe_q8.gguf"), 48, 3);
}

TEST(EngineBudget, EqualsTheEnginesBuffersForGemmaModels) {
  // gemma2-tiny: 4 layers alternating local (16-token window) and global, heads of 64 over a 128
  // embedding, 2 KV heads; gemma3-tiny: 5 local layers then a global one, 1 KV head. Both keep
  // a second rope row per token for the local layers (the workspace counts it).
  MakeModelSpec g2 = *make_model_preset("gemma2-tiny");
  const std::string g2_path = make(g2, "planner_gemma2_f32.gguf");
  expect_engine_matches(g2_path, 64, 2);
  g2.weight_type = GgmlType::kQ8_0;
  expect_engine_matches(make(g2, "planner_gemma2_q8.gguf"), 40, 3);
  MakeModelSpec g3 = *make_model_preset("gemma3-tiny");
  const std::string g3_path = make(g3, "planner_gemma3_f32.gguf");
  expect_engine_matches(g3_path, 64, 2);
  g3.tied = false;
  g3.weight_type = GgmlType::kQ8_0;
  expect_engine_matches(make(g3, "planner_gemma3_q8.gguf"), 48, 3);

  auto s2 = load_model_shape(g2_path);
  ASSERT_TRUE(s2.ok()) << s2.message();
  EXPECT_EQ(s2->arch, "gemma2");
  EXPECT_TRUE(s2->local_rope);
  for (int l = 0; l < 4; ++l) EXPECT_EQ(s2->window_of_layer(l), l % 2 == 0 ? 16 : 0) << l;
  EXPECT_EQ(engine_window(*s2), 0);  // the global layers keep every block
  // By hand: 4 layers x (K + V) x 2 KV heads x 64 x 2 B = 2048 B per token in f16.
  EXPECT_EQ(engine_kv_bytes_per_token_layer(*s2, KvDtype::kF16) * 4, 2048u);
  EXPECT_EQ(engine_blocks_per_seq(*s2, 512, 16), 32);
  // The GPU plan caps the two local layers at their window (16 tokens: 2 blocks of 16).
  const uint64_t layer = 2u * 2 * 64 * 2;
  EXPECT_EQ(kv_bytes_per_sequence(*s2, KvDtype::kF16, 1, 0, 4, 512, 16),
            2 * layer * 512 + 2 * layer * 32);

  auto s3 = load_model_shape(g3_path);
  ASSERT_TRUE(s3.ok()) << s3.message();
  EXPECT_TRUE(s3->qk_norm);
  for (int l = 0; l < 6; ++l) EXPECT_EQ(s3->window_of_layer(l), l == 5 ? 0 : 16) << l;
  // 6 layers x (K + V) x 1 KV head x 64 x 2 B = 1536 B per token in f16.
  EXPECT_EQ(engine_kv_bytes_per_token_layer(*s3, KvDtype::kF16) * 6, 1536u);
}

// gemma3-shaped file, by hand: per token the global layer holds 1 x 2 (K, V) x 1 KV head x 64 x
// 2 B = 256 B (f16; int8: 2 x (64 + 4 scale bytes) = 136 B) for every position, the 5 local
// layers 5 x 256 = 1280 B (int8: 680 B) only in window slots: 4 sequences x (ceil(15 / 16) + 3)
// + 64 / 16 = 20 of them. A 1 MiB KV budget then holds 20 blocks with their slots (24576 B
// each) plus (1 MiB - 20 x 24576) / 4096 = 136 more: 156 blocks, where --swa-full gets
// 1 MiB / 24576 = 42. At 512 tokens (32 blocks, 2 window slots) that is 4 sequences, not 1.
TEST(EngineBudget, HybridWindowLayersCostOnlyTheirWindowGemma3ByHand) {
  auto m = load_model_shape(make(*make_model_preset("gemma3-tiny"), "planner_gemma3_hybrid.gguf"));
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(engine_hybrid_window(*m, false), 16);
  EXPECT_EQ(engine_hybrid_window(*m, true), 0);
  EngineOptions opt;
  opt.max_num_batched_tokens = 64;
  opt.max_model_len = 512;
  opt.max_num_seqs = 4;
  opt.memory_budget_bytes = uint64_t{1} << 30;
  auto probe = plan_engine_budget(*m, opt);
  ASSERT_TRUE(probe.ok()) << probe.message();
  const uint64_t fixed = probe->total_bytes - probe->kv_pool_bytes;
  opt.memory_budget_bytes = fixed + (uint64_t{1} << 20);
  for (KvDtype d : {KvDtype::kF16, KvDtype::kInt8}) {
    opt.kv_dtype = d;
    auto b = plan_engine_budget(*m, opt);
    ASSERT_TRUE(b.ok()) << b.message();
    EXPECT_EQ(b->kv_bytes_per_token, d == KvDtype::kF16 ? 256u : 136u);
    EXPECT_EQ(b->kv_window_bytes_per_token, d == KvDtype::kF16 ? 1280u : 680u);
    EXPECT_EQ(b->num_window_layers, 5);
  }
  opt.kv_dtype = KvDtype::kF16;
  auto b = plan_engine_budget(*m, opt);
  ASSERT_TRUE(b.ok()) << b.message();
  EXPECT_EQ(b->max_window_slots, 20u);
  EXPECT_EQ(b->num_window_slots, 20u);
  EXPECT_EQ(b->num_blocks, 156u);
  EXPECT_EQ(b->kv_pool_bytes, 156u * 4096 + 20u * 20480);
  EXPECT_EQ(b->kv_blocks_per_seq, 32u);
  EXPECT_EQ(b->kv_bytes_per_seq, 32u * 4096 + 2u * 20480);
  EXPECT_EQ(b->max_seqs_at_max_len, 4u);
  opt.swa_full = true;
  auto full = plan_engine_budget(*m, opt);
  ASSERT_TRUE(full.ok()) << full.message();
  EXPECT_EQ(full->kv_bytes_per_token, 1536u);
  EXPECT_EQ(full->num_window_slots, 0u);
  EXPECT_EQ(full->num_blocks, 42u);
  EXPECT_EQ(full->max_seqs_at_max_len, 1u);
}

TEST(EngineBudget, EqualsTheEnginesBuffersForGptOssModels) {
  // gpt-oss-tiny: 4 layers, even ones windowed (16), heads of 32 (q 256 wide over a 128
  // embedding), 2 KV heads, 16 MXFP4 experts of 64 with 2-D bias tables (added, never packed),
  // top-4; the attention in f32, then Q8_0.
  MakeModelSpec s = *make_model_preset("gpt-oss-tiny");
  const std::string f32 = make(s, "planner_gptoss_f32.gguf");
  expect_engine_matches(f32, 64, 2);
  s.weight_type = GgmlType::kQ8_0;
  expect_engine_matches(make(s, "planner_gptoss_q8.gguf"), 48, 3);
  auto m = load_model_shape(f32);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->arch, "gpt-oss");
  EXPECT_EQ(m->head_dim, 32);
  EXPECT_TRUE(m->qkv_bias);
  EXPECT_FALSE(m->local_rope);
  for (int l = 0; l < 4; ++l) EXPECT_EQ(m->window_of_layer(l), l % 2 == 0 ? 16 : 0) << l;
  EXPECT_EQ(engine_window(*m), 0);
  // By hand: 4 layers x (K + V) x 2 KV heads x 32 x 2 B = 1024 B per token in f16 (sinks are
  // weights: nothing per token).
  EXPECT_EQ(engine_kv_bytes_per_token_layer(*m, KvDtype::kF16) * 4, 1024u);
  EXPECT_EQ(m->n_routed_experts, 16);
  EXPECT_EQ(m->n_experts_per_tok, 4);
  EXPECT_EQ(m->moe_ff, 64);
}

TEST(Catalog, GptOssKvBytesByHand) {
  // gpt-oss-20b: 24 layers x (K + V) x 8 KV heads x 64 x 2 B = 49152 B per token in bf16; half
  // of the layers windowed to 128, so the GPU plan holds 12 layers whole and 12 at 9 blocks of
  // 16 (128 positions starting anywhere in a block touch 9).
  const ModelShape* m = find_model("gpt-oss-20b");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(kv_bytes_per_token(*m, KvDtype::kBF16, 1), 49152u);
  for (int l = 0; l < 24; ++l) EXPECT_EQ(m->window_of_layer(l), l % 2 == 0 ? 128 : 0) << l;
  const uint64_t layer = 2u * 8 * 64 * 2;
  EXPECT_EQ(kv_bytes_per_sequence(*m, KvDtype::kBF16, 1, 0, 24, 8192, 16),
            12 * layer * 8192 + 12 * layer * 144);
  const ModelShape* big = find_model("openai/gpt-oss-120b");
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(kv_bytes_per_token(*big, KvDtype::kBF16, 1), 36u * 2 * 8 * 64 * 2);  // 73728
  EXPECT_EQ(big->n_routed_experts, 128);
}

TEST(ModelSource, GptOssConfigWindowsEvenLayersFromLayerTypes) {
  // gpt-oss-20b's config.json (the fields the planner reads): layer_types alternate sliding and
  // full attention, experts are intermediate_size wide.
  std::string types;
  for (int l = 0; l < 24; ++l) {
    types +=
        std::string(l ? ", " : "") + (l % 2 == 0 ? "\"sliding_attention\"" : "\"full_attention\"");
  }
  auto m = shape_from_config_json(
      R"({"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
      "num_hidden_layers": 24, "num_attention_heads": 64, "num_key_value_heads": 8,
      "head_dim": 64, "vocab_size": 201088, "max_position_embeddings": 131072,
      "sliding_window": 128, "num_local_experts": 32, "num_experts_per_tok": 4,
      "attention_bias": true, "tie_word_embeddings": false, "layer_types": [)" +
          types + "]}",
      "gpt-oss-20b.json");
  ASSERT_TRUE(m.ok()) << m.message();
  for (int l = 0; l < 24; ++l) EXPECT_EQ(m->window_of_layer(l), l % 2 == 0 ? 128 : 0) << l;
  EXPECT_EQ(m->moe_ff, 2880);
  EXPECT_EQ(m->n_routed_experts, 32);
  EXPECT_TRUE(m->qkv_bias);
  EXPECT_EQ(kv_bytes_per_token(*m, KvDtype::kBF16, 1),
            kv_bytes_per_token(*find_model("gpt-oss-20b"), KvDtype::kBF16, 1));
}

TEST(ModelSource, Gemma3ConfigHasFiveLocalLayersPerGlobalAndALocalRope) {
  // The multimodal wrapper's text_config, as Gemma-3-4B's config.json nests it.
  auto m = shape_from_config_json(
      R"({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text",
      "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 34,
      "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
      "vocab_size": 262208, "max_position_embeddings": 131072, "sliding_window": 1024,
      "sliding_window_pattern": 6}})",
      "gemma3.json");
  ASSERT_TRUE(m.ok()) << m.message();
  for (int l = 0; l < 12; ++l) EXPECT_EQ(m->window_of_layer(l), l % 6 == 5 ? 0 : 1024) << l;
  EXPECT_TRUE(m->local_rope);
}

TEST(EngineBudget, EqualsTheEnginesBuffersForPhi3Models) {
  // Fused attn_qkv and ffn_up (the engine reads row ranges of them), LongRoPE factor vectors,
  // a window (16384) longer than the context; f32 and Q8_0; Phi-4-mini's GQA and tied output.
  MakeModelSpec s = *make_model_preset("phi3-tiny");
  const std::string f32 = make(s, "planner_phi3_f32.gguf");
  expect_engine_matches(f32, 64, 2);
  s.weight_type = GgmlType::kQ8_0;
  expect_engine_matches(make(s, "planner_phi3_q8.gguf"), 40, 3);
  const std::string phi4 = make(*make_model_preset("phi4-mini-tiny"), "planner_phi4_mini.gguf");
  expect_engine_matches(phi4, 48, 2);
  auto shape = load_model_shape(f32);
  ASSERT_TRUE(shape.ok()) << shape.message();
  EXPECT_EQ(shape->arch, "phi3");
  EXPECT_EQ(shape->head_dim, 32);
  // 2 layers x (K + V) x 4 KV heads x 32 x 2 B = 1024 B per token in f16.
  EXPECT_EQ(kv_bytes_per_token(*shape, KvDtype::kF16, 1), 1024u);
  auto shape4 = load_model_shape(phi4);
  ASSERT_TRUE(shape4.ok()) << shape4.message();
  // 2 layers x (K + V) x 2 KV heads x 32 x 2 B = 512 B per token; tied: no output matrix.
  EXPECT_EQ(kv_bytes_per_token(*shape4, KvDtype::kF16, 1), 512u);
  EXPECT_TRUE(shape4->tied_embeddings);
}

TEST(EngineBudget, MoeDecodeReadsOnlyTheUsedExperts) {
  MakeModelSpec s = *make_model_preset("mixtral-tiny");  // 8 experts, 2 used
  s.n_embd = 128;
  s.n_ff = 256;
  const std::string path = make(s, "planner_moe_decode.gguf");
  auto shape = load_model_shape(path);
  ASSERT_TRUE(shape.ok()) << shape.message();
  EXPECT_EQ(shape->n_routed_experts, 8);
  EXPECT_EQ(shape->n_experts_per_tok, 2);
  EXPECT_EQ(shape->moe_ff, 256);
  // The file's bytes: one expert tensor is 8 x 256 x 128 f32; three per layer, four layers.
  const uint64_t experts = 4 * 3 * (8ull * 256 * 128 * 4);
  EXPECT_EQ(shape->gguf->routed_expert_bytes, experts);
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok());
  const uint64_t embd = (*f)->find_tensor("token_embd.weight")->num_bytes;
  EXPECT_EQ(shape->gguf->decode_bytes_per_token,
            shape->gguf->weight_bytes - embd - experts + experts / 4);
  EngineOptions opt;
  opt.max_model_len = 256;
  opt.max_num_seqs = 2;
  auto b = plan_engine_budget(*shape, opt);
  ASSERT_TRUE(b.ok()) << b.message();
  EXPECT_EQ(b->weights_bytes, shape->gguf->weight_bytes);  // every expert stays mapped
  EXPECT_EQ(b->decode_weight_bytes, shape->gguf->decode_bytes_per_token);
  EXPECT_NE(b->to_string().find("of weights read per token, 2 of 8 experts"), std::string::npos)
      << b->to_string();
  // Parameters: all experts in total(), two of eight per layer in active().
  const ParamCounts pc = count_params(*shape);
  EXPECT_EQ(pc.routed_experts, 4ull * 8 * 3 * 256 * 128);
  EXPECT_EQ(pc.active(), pc.total() - pc.routed_experts / 4 * 3);
}

TEST(Gguf, Deepseek2FileGivesTheMlaShapeAndTheEngineBudgetsOneLatentRow) {
  // DeepSeek-V2-Lite's attention and expert keys at a small width (llama.cpp's names).
  GgufWriter w;
  const std::string a = "deepseek2.";
  w.set_string("general.architecture", "deepseek2");
  for (const auto& [k, v] :
       std::vector<std::pair<std::string, uint32_t>>{{"context_length", 4096},
                                                     {"embedding_length", 256},
                                                     {"block_count", 3},
                                                     {"feed_forward_length", 1024},
                                                     {"attention.head_count", 16},
                                                     {"attention.head_count_kv", 16},
                                                     {"rope.dimension_count", 64},
                                                     {"attention.kv_lora_rank", 512},
                                                     {"attention.key_length", 192},
                                                     {"attention.value_length", 128},
                                                     {"leading_dense_block_count", 1},
                                                     {"expert_count", 64},
                                                     {"expert_used_count", 6},
                                                     {"expert_shared_count", 2},
                                                     {"expert_feed_forward_length", 128}}) {
    w.set_u32(a + k, v);
  }
  w.set_f32(a + "expert_weights_scale", 1.0f);
  w.add_tensor("token_embd.weight", GgmlType::kF32, {256, 64},
               std::vector<uint8_t>(256 * 64 * 4, 0));
  const std::string path = ::testing::TempDir() + "/ds2_plan.gguf";
  ASSERT_TRUE(w.write(path).ok());
  auto shape = load_model_shape(path);
  ASSERT_TRUE(shape.ok()) << shape.message();
  EXPECT_TRUE(shape->is_mla());
  EXPECT_EQ(shape->qk_nope_head_dim, 128);
  EXPECT_EQ(shape->n_routed_experts, 64);
  EXPECT_EQ(shape->n_shared_experts, 2);
  EXPECT_EQ(shape->first_k_dense, 1);
  // One latent of 512 + 64 per token per layer: 3 layers x 576 x 2 B.
  EXPECT_EQ(kv_bytes_per_token(*shape, KvDtype::kBF16, 1), 3u * 576 * 2);
  // The engine caches the same row (K and V share it): f16 576 x 2 B, int8 576 + a 4-byte scale.
  EngineOptions opt;
  opt.max_model_len = 4096;
  opt.max_num_seqs = 4;
  auto b = plan_engine_budget(*shape, opt);
  ASSERT_TRUE(b.ok()) << b.message();
  EXPECT_EQ(b->kv_bytes_per_token, 3u * 576 * 2);
  opt.kv_dtype = KvDtype::kInt8;
  b = plan_engine_budget(*shape, opt);
  ASSERT_TRUE(b.ok()) << b.message();
  EXPECT_EQ(b->kv_bytes_per_token, 3u * (576 + 4));
}

TEST(EngineBudget, BudgetModeGivesTheKvPoolWhatIsLeft) {
  MakeModelSpec s;
  s.n_embd = 128;
  s.n_head = 4;
  s.n_head_kv = 4;
  s.n_ff = 256;
  auto shape = load_model_shape(make(s, "planner_budget.gguf"));
  ASSERT_TRUE(shape.ok());
  EngineOptions opt;
  opt.kv_dtype = KvDtype::kInt8;
  opt.memory_budget_bytes = 256 * kMiB;
  auto b = plan_engine_budget(*shape, opt);
  ASSERT_TRUE(b.ok()) << b.message();
  // int8: 2 x 4 heads x (32 + 4) B per layer per token.
  EXPECT_EQ(b->kv_bytes_per_token, (uint64_t)shape->n_layer * 2 * 4 * (32 + 4));
  const uint64_t fixed = b->weights_bytes + b->workspace_bytes + b->reserve_bytes;
  EXPECT_EQ(b->num_blocks, (256 * kMiB - fixed) / b->kv_bytes_per_block);
  EXPECT_LE(b->total_bytes, 256 * kMiB);
  EXPECT_GT(b->total_bytes + b->kv_bytes_per_block, 256 * kMiB);
  opt.memory_budget_bytes = 1 * kMiB;
  auto small = plan_engine_budget(*shape, opt);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.message().find("budget"), std::string::npos) << small.message();
  EXPECT_FALSE(plan_engine_budget(*find_model("deepseek-v2-lite"), EngineOptions{}).ok());
}

// Without a budget a long max_model_len does not multiply the pool by max_num_seqs: it holds
// max_num_seqs x 4096 tokens (what the old 4096 default gave), and one full-length sequence.
TEST(EngineBudget, NoBudgetPoolIsCappedPerSequenceButFitsOneFullSequence) {
  MakeModelSpec s;
  s.n_embd = 128;
  s.n_head = 4;
  s.n_head_kv = 4;
  s.n_ff = 256;
  auto shape = load_model_shape(make(s, "planner_long.gguf"));
  ASSERT_TRUE(shape.ok());
  EngineOptions opt;
  opt.max_num_seqs = 8;
  opt.max_model_len = 4096;
  auto at_cap = plan_engine_budget(*shape, opt);
  ASSERT_TRUE(at_cap.ok()) << at_cap.message();
  EXPECT_EQ(at_cap->num_blocks, 8u * 256);
  opt.max_model_len = 10240;
  auto longer = plan_engine_budget(*shape, opt);
  ASSERT_TRUE(longer.ok()) << longer.message();
  EXPECT_EQ(longer->num_blocks, 8u * 256);
  EXPECT_EQ(longer->kv_blocks_per_seq, 640u);
  EXPECT_EQ(longer->max_seqs_at_max_len, 3u);
  opt.max_num_seqs = 1;
  auto one = plan_engine_budget(*shape, opt);
  ASSERT_TRUE(one.ok()) << one.message();
  EXPECT_EQ(one->num_blocks, 640u);
}

// A Mistral-style GGUF (every layer windowed): a sequence at full context holds the window's
// blocks only, the same bound the KvManager keeps, so the pool is sized for (and reports) that.
TEST(EngineBudget, SlidingWindowCapsBlocksPerSequenceLikeTheKvManager) {
  MakeModelSpec s;
  s.n_embd = 128;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 256;
  s.sliding_window = 40;
  auto shape = load_model_shape(make(s, "planner_window.gguf"));
  ASSERT_TRUE(shape.ok()) << shape.message();
  EXPECT_EQ(engine_window(*shape), 40);
  const KvManager kv({.num_blocks = 8, .block_size = 16, .sliding_window = 40}, nullptr);
  EXPECT_EQ(engine_blocks_per_seq(*shape, 512, 16), int64_t(kv.max_window_blocks()));  // 4
  EXPECT_EQ(engine_blocks_per_seq(*shape, 20, 16), 2);  // shorter than the window
  EngineOptions opt;
  opt.max_model_len = 512;
  opt.max_num_seqs = 6;
  auto b = plan_engine_budget(*shape, opt);
  ASSERT_TRUE(b.ok()) << b.message();
  EXPECT_EQ(b->num_blocks, 6u * 4);  // not 6 x 32
  EXPECT_EQ(b->kv_blocks_per_seq, 4u);
  EXPECT_EQ(b->kv_bytes_per_seq, 4 * b->kv_bytes_per_block);
  EXPECT_EQ(b->max_seqs_at_max_len, 6u);
  EXPECT_EQ(b->sliding_window, 40);
  // The GPU plan's per-sequence formula gives the same bytes (f16 KV, one rank).
  EXPECT_EQ(kv_bytes_per_sequence(*shape, KvDtype::kF16, 1, 0, shape->n_layer, 512, 16),
            b->kv_bytes_per_seq);
  EXPECT_NE(b->to_string().find("seq: " + std::to_string(b->kv_bytes_per_seq) +
                                " B/sequence (4 blocks) at 512 tokens, sliding window 40; "
                                "room for 6 such sequences"),
            std::string::npos)
      << b->to_string();
  // Under a memory budget the same pool holds 8x more sequences of 512 tokens than unwindowed.
  opt.memory_budget_bytes = 256 * kMiB;
  auto windowed = plan_engine_budget(*shape, opt);
  ModelShape full = *shape;
  full.window_pattern = WindowPattern::kNone;
  full.sliding_window = 0;
  auto unwindowed = plan_engine_budget(full, opt);
  ASSERT_TRUE(windowed.ok()) << windowed.message();
  ASSERT_TRUE(unwindowed.ok()) << unwindowed.message();
  EXPECT_EQ(windowed->num_blocks, unwindowed->num_blocks);
  EXPECT_EQ(windowed->max_seqs_at_max_len, windowed->num_blocks / 4);
  EXPECT_EQ(unwindowed->max_seqs_at_max_len, unwindowed->num_blocks / 32);
}

// serve's request row: request memory, connections and streams, taken from the KV pool's share
// of a budget and shown in the table.
TEST(EngineBudget, RequestRowIsCountedAndComesOutOfTheKvPool) {
  RequestMemoryOptions r;
  r.request_memory_bytes = 64 * kMiB;
  r.max_num_seqs = 16;
  r.max_queue = 48;
  r.stream_buffer_bytes = 64 << 10;
  r.max_model_len = 256;
  r.grammar_cache_bytes = 8 * kMiB;
  const int64_t conns = default_max_connections(16, 48);
  EXPECT_EQ(conns, 1024);  // 2 x 64 + 512 < 1024
  EXPECT_EQ(max_open_streams(16, 48), 64);
  EXPECT_EQ(request_row_bytes(r), 64 * kMiB + 8 * kMiB + 1024 * kConnectionBytes +
                                      64 * (2 * (64 << 10) + 256 * kAnswerBytesPerToken));
  EXPECT_EQ(max_open_streams(16, 0), 32);  // unbounded queue: the engine's own bound
  MakeModelSpec s;
  s.n_embd = 128;
  s.n_head = 4;
  s.n_head_kv = 4;
  s.n_ff = 256;
  auto shape = load_model_shape(make(s, "planner_request_row.gguf"));
  ASSERT_TRUE(shape.ok());
  EngineOptions opt;
  opt.memory_budget_bytes = 256 * kMiB;
  auto without = plan_engine_budget(*shape, opt);
  opt.request_bytes = request_row_bytes(r);
  auto with = plan_engine_budget(*shape, opt);
  ASSERT_TRUE(without.ok() && with.ok());
  EXPECT_EQ(with->request_bytes, request_row_bytes(r));
  EXPECT_EQ(with->total_bytes, with->weights_bytes + with->workspace_bytes + with->kv_pool_bytes +
                                   with->reserve_bytes + with->request_bytes);
  EXPECT_LE(with->total_bytes, 256 * kMiB);
  EXPECT_LT(with->num_blocks, without->num_blocks);
  EXPECT_NE(with->to_string().find("request"), std::string::npos);
  EXPECT_EQ(without->to_string().find("request"), std::string::npos);
}

}  // namespace
}  // namespace kvw::planner
