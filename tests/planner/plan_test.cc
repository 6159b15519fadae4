// Parameter counts against published sizes, the budget split and its inversions, verdicts,
// JSON shape and catalogue integrity.
#include <gtest/gtest.h>

#include <set>

#include "model/families/family.h"
#include "planner/catalog.h"
#include "planner/memory_plan.h"
#include "planner/plan_report.h"

namespace kvw::planner {
namespace {

const ModelShape& model(const char* name) {
  const ModelShape* m = find_model(name);
  EXPECT_NE(m, nullptr) << name;
  return *m;
}

double billions(const char* name) {
  return (double)count_params(model(name)).total() / 1e9;
}

TEST(Params, MatchPublishedModelSizes) {
  EXPECT_NEAR(billions("llama-2-7b"), 6.74, 0.01);
  EXPECT_NEAR(billions("llama-2-70b"), 68.98, 0.01);
  EXPECT_NEAR(billions("llama-3-8b"), 8.03, 0.01);
  EXPECT_NEAR(billions("llama-3.1-405b"), 405.85, 0.1);
  EXPECT_NEAR(billions("gemma-2-9b"), 9.24, 0.01);
  // Gemma-2-2B 2,614,341,888 and Gemma-3-1B 999,885,952 parameters (model cards; four norms
  // per layer, gemma3 with per-head Q/K norms).
  EXPECT_EQ(count_params(model("gemma-3-1b")).total(), 999885952u);
  EXPECT_NEAR(billions("gemma-2-2b"), 2.614, 0.001);
  EXPECT_NEAR(billions("qwen2.5-7b"), 7.62, 0.01);
  EXPECT_NEAR(billions("tinyllama-1.1b"), 1.10, 0.01);
  EXPECT_NEAR(billions("qwen3-8b"), 8.19, 0.01);  // card: 8.2B
  // Phi-3-mini: keras-hub's preset lists 3821079552 parameters; untied, MHA heads of 96.
  EXPECT_EQ(count_params(model("phi-3-mini")).total(), 3821079552ull);
  EXPECT_EQ(count_params(model("phi-3.5-mini")).total(), 3821079552ull);
  // Phi-4-mini (card: 3.8B): tied 200064 x 3072 embedding counted once, GQA 24/8 heads of 128.
  EXPECT_EQ(count_params(model("phi-4-mini")).total(),
            200064ull * 3072 +
                32ull * (2 * 3072 * 3072 + 2 * 3072 * 1024 + 3 * 3072 * 8192 + 2 * 3072) + 3072);
  EXPECT_NEAR(billions("phi-4-mini"), 3.84, 0.01);
}

TEST(Params, MoeCountsEveryExpert) {
  // Mixtral-8x7B: 46.7B total although only 2 of 8 experts run per token.
  EXPECT_NEAR(billions("mixtral-8x7b"), 46.70, 0.01);
  const ParamCounts c = count_params(model("mixtral-8x7b"));
  EXPECT_EQ(c.routed_experts, 32ull * 8 * 3 * 4096 * 14336);
  EXPECT_EQ(c.router, 32ull * 8 * 4096);
  EXPECT_NEAR(billions("qwen3-30b-a3b"), 30.53, 0.02);
  EXPECT_NEAR(billions("deepseek-v2-lite"), 15.7, 0.05);
  EXPECT_NEAR(billions("deepseek-v2"), 235.7, 0.3);
  EXPECT_NEAR(billions("deepseek-v3"), 671.0, 0.3);  // 685B on the hub includes the 14B MTP layer
}

TEST(Params, ActiveCountsTheUsedExpertsOnly) {
  // Published active parameters per token: Mixtral-8x7B 12.9B, Qwen3-30B-A3B 3.3B,
  // DeepSeek-V2-Lite 2.4B, DeepSeek-V3 37B; a dense model's are all of them.
  EXPECT_NEAR(count_params(model("mixtral-8x7b")).active() / 1e9, 12.88, 0.01);
  EXPECT_NEAR(count_params(model("qwen3-30b-a3b")).active() / 1e9, 3.35, 0.01);  // card: 3.3B
  EXPECT_NEAR(count_params(model("deepseek-v2-lite")).active() / 1e9, 2.4, 0.3);
  EXPECT_NEAR(count_params(model("deepseek-v3")).active() / 1e9, 37.5, 0.6);
  const ParamCounts dense = count_params(model("llama-3-8b"));
  EXPECT_EQ(dense.active(), dense.total());
}

PlanInputs inputs(uint64_t gpu_bytes, int64_t tp, int64_t len, int64_t conc) {
  PlanInputs in;
  in.gpu_name = "test";
  in.gpu_memory_bytes = gpu_bytes;
  in.gpu_memory_utilization = 0.9;
  in.tp = tp;
  in.weight_dtype = Dtype{"bf16", 1, 2};
  in.kv_dtype = KvDtype::kBF16;
  in.max_model_len = len;
  in.concurrency = conc;
  in.block_size = 16;
  in.max_num_batched_tokens = 2048;
  return in;
}

TEST(Plan, BudgetSplitAddsUpAndConcurrencyInvertsLength) {
  const ModelShape& m = model("llama-3-8b");
  auto p = plan_memory(m, inputs(80 * kGiB, 1, 8192, 16));
  ASSERT_TRUE(p.ok()) << p.message();
  const StagePlan& s = p->stages[0];
  EXPECT_EQ(p->weight_bytes_total, count_params(m).total() * 2);
  EXPECT_EQ(s.budget_bytes, (uint64_t)(80 * kGiB * 0.9));
  EXPECT_EQ((uint64_t)s.kv_pool_bytes + s.weight_bytes + s.activation_bytes + s.overhead_bytes,
            s.budget_bytes);
  EXPECT_EQ(s.kv_bytes_per_seq, 131072ull * 8192);
  EXPECT_EQ(s.num_blocks, s.kv_pool_bytes / (131072 * 16));
  EXPECT_EQ(p->max_concurrency, s.kv_pool_bytes / (int64_t)(131072ull * 8192));
  // Inversion: at the computed max concurrency the max length is at least max_model_len, and
  // one more sequence does not fit at that length.
  const int64_t n = p->max_concurrency;
  EXPECT_GE(max_len_for(m, p->in, s, n, 1 << 20), 8192);
  EXPECT_LT(max_len_for(m, p->in, s, n + 1, 1 << 20), 8192);
  // Max length at the target concurrency: the largest block-aligned length that fits.
  const int64_t len = max_len_for(m, p->in, s, 16, 1 << 20);
  const int64_t blocks = s.kv_pool_bytes / 16 / (131072 * 16);
  EXPECT_EQ(len, blocks * 16);
  EXPECT_EQ(p->verdict, Verdict::kFits);
  // Memory would hold 16 sequences longer than Llama-3's 8192 positions: the model binds.
  EXPECT_GT(len, 8192);
  EXPECT_EQ(p->max_len_at_concurrency, 8192);
  EXPECT_EQ(p->binding_constraint, "model_context");
  // At 64 sequences memory binds first.
  PlanInputs in64 = p->in;
  in64.concurrency = 64;
  auto p64 = plan_memory(m, in64);
  ASSERT_TRUE(p64.ok());
  EXPECT_EQ(p64->max_len_at_concurrency, max_len_for(m, in64, p64->stages[0], 64, 8192));
  EXPECT_LT(p64->max_len_at_concurrency, 8192);
  EXPECT_EQ(p64->binding_constraint, "kv_cache");
}

TEST(Plan, WeightsThatDoNotFitAreTheBindingConstraint) {
  auto p = plan_memory(model("llama-3.1-70b"), inputs(80 * kGiB, 1, 8192, 1));
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->verdict, Verdict::kWeightsTooLarge);
  EXPECT_EQ(p->binding_constraint, "weights");
  EXPECT_EQ(p->max_concurrency, 0);
  // Four GPUs hold the 141 GB of bf16 weights.
  auto p4 = plan_memory(model("llama-3.1-70b"), inputs(80 * kGiB, 4, 8192, 1));
  ASSERT_TRUE(p4.ok());
  EXPECT_EQ(p4->verdict, Verdict::kFits);
  EXPECT_EQ(p4->stages[0].weight_bytes, (p4->weight_bytes_total + 3) / 4);
}

TEST(Plan, ConcurrencyLimitedAndKvTooSmall) {
  auto p = plan_memory(model("llama-2-7b"), inputs(24 * kGiB, 1, 4096, 64));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->verdict, Verdict::kConcurrencyLimited);
  EXPECT_GT(p->max_concurrency, 0);
  EXPECT_LT(p->max_concurrency, 64);
  EXPECT_LT(p->max_len_at_concurrency, 4096);
  auto tiny = plan_memory(model("llama-2-7b"), inputs(16 * kGiB, 1, 4096, 1));
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->verdict, Verdict::kKvTooSmall);
  EXPECT_EQ(tiny->binding_constraint, "kv_cache");
}

TEST(Plan, ModelContextBindsWhenMemoryIsPlentiful) {
  auto p = plan_memory(model("tinyllama-1.1b"), inputs(80 * kGiB, 1, 2048, 1));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->max_len_at_concurrency, 2048);
  EXPECT_TRUE(p->max_len_capped_by_model);
  EXPECT_EQ(p->binding_constraint, "model_context");
}

TEST(Plan, PipelineStagesSplitLayersAndTheHeadGoesLast) {
  auto p = plan_memory(model("llama-3-8b"), [] {
    PlanInputs in = inputs(24 * kGiB, 1, 4096, 4);
    in.pp = 3;
    return in;
  }());
  ASSERT_TRUE(p.ok()) << p.message();
  ASSERT_EQ(p->stages.size(), 3u);
  EXPECT_EQ(p->stages[0].layer_end - p->stages[0].layer_begin, 11);
  EXPECT_EQ(p->stages[2].layer_end, 32);
  EXPECT_EQ(p->stages[2].layer_end - p->stages[2].layer_begin, 10);
  EXPECT_EQ(p->stages[0].kv_bytes_per_token, 11u * 4096);
  EXPECT_GT(p->stages[2].activation_bytes, p->stages[1].activation_bytes);  // logits
}

TEST(Plan, RejectsUnshardableInputsWithOneLine) {
  auto p = plan_memory(model("llama-3-8b"), inputs(80 * kGiB, 3, 4096, 1));
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.message().find("--tp 3"), std::string::npos) << p.message();
  PlanInputs bad = inputs(80 * kGiB, 1, 4096, 1);
  bad.gpu_memory_utilization = 1.5;
  auto q = plan_memory(model("llama-3-8b"), bad);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.message().find("--gpu-memory-utilization"), std::string::npos);
}

TEST(Plan, DeepSeekV25On8xA100At32k) {
  // The question from the issue: DeepSeek-V2.5 at 32k context on 8 x A100-80GB, bf16.
  const GpuSpec* a100 = find_gpu("a100-80gb");
  ASSERT_NE(a100, nullptr);
  PlanInputs in = inputs(a100->memory_bytes, 8, 32768, 64);
  auto p = plan_memory(model("deepseek-v2.5"), in);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->kv_bytes_per_seq_total, 69120ull * 32768);  // 2.11 GiB, on every GPU
  EXPECT_EQ(p->stages[0].kv_bytes_per_seq, 69120ull * 32768);
  EXPECT_EQ(p->stages[0].weight_bytes, (p->weight_bytes_total + 7) / 8);
  EXPECT_GT(p->max_concurrency, 0);
  bool unconfirmed_note = false;
  for (const auto& n : p->notes) unconfirmed_note |= n.find("unconfirmed") != std::string::npos;
  EXPECT_TRUE(unconfirmed_note);
}

TEST(Report, JsonHasTheDocumentedShape) {
  auto p = plan_memory(model("llama-3-8b"), inputs(80 * kGiB, 1, 8192, 16));
  ASSERT_TRUE(p.ok());
  const nlohmann::json j = plan_to_json(*p);
  for (const char* k : {"model", "inputs", "params", "weights_bytes", "kv", "stages",
                        "max_concurrency", "max_len_at_concurrency", "verdict",
                        "binding_constraint", "verdict_text", "notes", "recommended", "explain"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["kv"]["per_token_bytes"].get<uint64_t>(), 131072u);
  EXPECT_EQ(j["kv"]["per_block_bytes"].get<uint64_t>(), 131072u * 16);
  EXPECT_EQ(j["model"]["attention"], "GQA");
  EXPECT_EQ(j["verdict"], "fits");
  EXPECT_EQ(j["stages"].size(), 1u);
  EXPECT_EQ(j["stages"][0]["num_blocks"].get<int64_t>(), p->stages[0].num_blocks);
  EXPECT_NE(j["recommended"]["vllm"].get<std::string>().find("--max-num-seqs 16"),
            std::string::npos);
  ASSERT_GT(j["explain"].size(), 5u);
  EXPECT_TRUE(j["explain"][0].contains("formula"));
}

// kvwarden's launch line must run as printed but for the file to bring: the CPU engine stores no
// fp8 KV (int8 is its one-byte cache), and a catalogue plan names a GGUF, not a catalogue entry.
TEST(Report, KvwardenLineUsesACacheTypeServeTakesAndNamesAGgufFile) {
  PlanInputs in = inputs(80 * kGiB, 1, 8192, 16);
  in.kv_dtype = KvDtype::kFp8;
  auto p = plan_memory(model("llama-3-8b"), in);
  ASSERT_TRUE(p.ok());
  const std::string line = recommended_flags(*p).kvwarden;
  EXPECT_NE(line.find("--kv-cache-dtype int8"), std::string::npos) << line;
  EXPECT_EQ(line.find("fp8"), std::string::npos) << line;
  EXPECT_NE(line.find("--model <llama-3-8b>.gguf "), std::string::npos) << line;
  EXPECT_NE(recommended_flags(*p).vllm.find("--kv-cache-dtype fp8"), std::string::npos);

  ModelShape from_file = model("llama-3-8b");
  from_file.gguf = GgufFacts{.path = "/models/llama-3-8b.Q4_K_M.gguf"};
  auto q = plan_memory(from_file, inputs(80 * kGiB, 1, 8192, 16));
  ASSERT_TRUE(q.ok());
  EXPECT_NE(recommended_flags(*q).kvwarden.find("--model /models/llama-3-8b.Q4_K_M.gguf "),
            std::string::npos)
      << recommended_flags(*q).kvwarden;
}

TEST(Report, ExplainShowsSubstitutedFormulas) {
  auto p = plan_memory(model("llama-2-7b"), inputs(80 * kGiB, 1, 4096, 8));
  ASSERT_TRUE(p.ok());
  const std::string text = plan_to_text(*p, true);
  EXPECT_NE(text.find("2 (K,V) x 32 kv heads x 128 head_dim x 2 B"), std::string::npos) << text;
  EXPECT_NE(text.find("524288 B"), std::string::npos);
  EXPECT_NE(text.find("vllm serve meta-llama/Llama-2-7b-hf"), std::string::npos);
  EXPECT_EQ(plan_to_text(*p, false).find("formulas"), std::string::npos);
}

TEST(Catalog, EveryEntryValidatesAndNamesItsSource) {
  // Every model the issue names.
  for (const char* name :
       {"deepseek-v2",  "deepseek-v2-lite", "deepseek-v2.5",  "deepseek-v3",      "deepseek-r1",
        "llama-2-7b",   "llama-2-13b",      "llama-2-70b",    "llama-3-8b",       "llama-3-70b",
        "llama-3.1-8b", "llama-3.1-70b",    "llama-3.1-405b", "qwen2.5-7b",       "qwen2.5-72b",
        "qwen3-8b",     "qwen3-32b",        "qwen3-30b-a3b",  "mistral-7b",       "mixtral-8x7b",
        "gemma-2-9b",   "gemma-2-27b",      "tinyllama-1.1b", "gemma-2-2b",       "gemma-3-1b",
        "gemma-3-4b",   "gemma-3-12b",      "gemma-3-27b",    "phi-3-mini",       "phi-3.5-mini",
        "phi-4-mini",   "gpt-oss-20b",      "gpt-oss-120b",   "qwen1.5-moe-a2.7b"}) {
    EXPECT_NE(find_model(name), nullptr) << name;
  }
  for (const ModelShape& m : model_catalog()) {
    EXPECT_TRUE(m.validate().ok()) << m.name << ": " << m.validate().message();
    EXPECT_FALSE(m.source.empty()) << m.name;
    if (m.unconfirmed) {
      EXPECT_FALSE(m.note.empty()) << m.name;
    }
  }
  for (const char* gpu : {"a100-40gb", "a100-80gb", "h100", "h200", "h20", "l40s", "l4", "a10g",
                          "rtx4090", "rtx3090", "mi300x"}) {
    EXPECT_NE(find_gpu(gpu), nullptr) << gpu;
  }
  EXPECT_TRUE(model("deepseek-v2.5").unconfirmed);  // model-facts.md: every value = V2's
  EXPECT_FALSE(model("llama-3-8b").unconfirmed);
  EXPECT_GE(gpu_catalog().size(), 11u);
  for (const GpuSpec& g : gpu_catalog()) EXPECT_FALSE(g.source.empty()) << g.name;
  EXPECT_EQ(find_gpu("H200")->memory_bytes, 143771ull << 20);
  EXPECT_TRUE(find_gpu("A100-40GB")->unconfirmed);
  EXPECT_EQ(find_gpu("nonexistent"), nullptr);
  EXPECT_EQ(find_model("META-LLAMA/Llama-2-7b-hf"), find_model("llama-2-7b"));
}

// The catalogue speaks the families kvwarden serves: every entry's model_type is claimed by a
// model/families entry (whose rules plan its config.json), and every family has an entry.
TEST(Catalog, EveryEntryIsARegisteredFamilyAndEveryFamilyHasOne) {
  std::set<const ModelFamily*> covered;
  for (const ModelShape& m : model_catalog()) {
    const ModelFamily* family = find_family_by_model_type(m.arch);
    EXPECT_NE(family, nullptr) << m.name << ": model_type " << m.arch;
    covered.insert(family);
    if (family != nullptr) {
      EXPECT_EQ(m.qk_norm, family->qk_norm) << m.name;
    }
  }
  for (const ModelFamily* family : all_families()) {
    EXPECT_TRUE(covered.count(family)) << family->arch << " has no catalogue entry";
  }
}

TEST(Dtypes, QuantisedFormatsAreExact) {
  auto q4k = parse_weight_dtype("q4_K");
  ASSERT_TRUE(q4k.ok());
  EXPECT_EQ(q4k->bytes(256 * 1000), 144u * 1000);
  auto int4 = parse_weight_dtype("int4");
  ASSERT_TRUE(int4.ok());
  EXPECT_NEAR(int4->bits_per_elem(), 4.156, 1e-3);
  EXPECT_FALSE(parse_weight_dtype("q3_banana").ok());
  EXPECT_FALSE(parse_kv_dtype("int3").ok());
  // Quantised weights keep embeddings and head in bf16.
  PlanInputs in = inputs(80 * kGiB, 1, 4096, 1);
  in.weight_dtype = Dtype{"fp8", 1, 1};
  auto p = plan_memory(model("llama-3-8b"), in);
  ASSERT_TRUE(p.ok());
  const ParamCounts c = count_params(model("llama-3-8b"));
  EXPECT_EQ(p->weight_bytes_total,
            (c.total() - c.embedding - c.output_head) + 2 * (c.embedding + c.output_head));
}

}  // namespace
}  // namespace kvw::planner
