// Hand-computed KV sizes for each attention type, sharding and window rule.
#include <gtest/gtest.h>

#include "planner/catalog.h"
#include "planner/memory_plan.h"

namespace kvw::planner {
namespace {

const ModelShape& model(const char* name) {
  const ModelShape* m = find_model(name);
  EXPECT_NE(m, nullptr) << name;
  return *m;
}

TEST(KvMath, MhaLlama2_7bIs524288BytesPerTokenAtF16) {
  const ModelShape& m = model("llama-2-7b");
  EXPECT_STREQ(m.attention_kind(), "MHA");
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kF16, 1), 2u * 32 * 32 * 128 * 2);
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kF16, 1), 524288u);
  // Linear in length: a 4096-token sequence is exactly 4096 x per-token (block-aligned).
  EXPECT_EQ(kv_bytes_per_sequence(m, KvDtype::kF16, 1, 0, m.n_layer, 4096, 16), 524288ull * 4096);
  EXPECT_EQ(kv_bytes_per_sequence(m, KvDtype::kF16, 1, 0, m.n_layer, 2048, 16) * 2,
            kv_bytes_per_sequence(m, KvDtype::kF16, 1, 0, m.n_layer, 4096, 16));
}

TEST(KvMath, GqaLlama3_8bIs131072BytesPerToken) {
  const ModelShape& m = model("llama-3-8b");
  EXPECT_STREQ(m.attention_kind(), "GQA");
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kBF16, 1), 2u * 32 * 8 * 128 * 2);
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kBF16, 1), 131072u);
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kFp8, 1), 65536u);
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kF32, 1), 262144u);
}

// Hand-checked per-token KV bytes (2 for K and V x layers x KV heads x head_dim x bytes) of the
// phi3 and qwen3 catalogue entries.
TEST(KvMath, Phi3FamilyBytesPerToken) {
  // Phi-3-mini and Phi-3.5-mini: MHA, 32 KV heads of 96 (3072 / 32), 32 layers.
  for (const char* name : {"phi-3-mini", "phi-3.5-mini"}) {
    const ModelShape& m = model(name);
    EXPECT_STREQ(m.attention_kind(), "MHA") << name;
    EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kF16, 1), 2u * 32 * 32 * 96 * 2) << name;
    EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kF16, 1), 393216u) << name;
  }
  // Phi-3-mini's 2047-token window caps a sequence's KV; Phi-3.5-mini's 128K context has none.
  EXPECT_EQ(model("phi-3-mini").window_of_layer(0), 2047);
  EXPECT_EQ(model("phi-3.5-mini").window_of_layer(0), 0);
  // Phi-4-mini: GQA 24 / 8 heads of 128, 32 layers: a third of Phi-3-mini's.
  const ModelShape& p4 = model("phi-4-mini");
  EXPECT_STREQ(p4.attention_kind(), "GQA");
  EXPECT_EQ(kv_bytes_per_token(p4, KvDtype::kF16, 1), 2u * 32 * 8 * 128 * 2);
  EXPECT_EQ(kv_bytes_per_token(p4, KvDtype::kF16, 1), 131072u);
  EXPECT_EQ(kv_bytes_per_token(p4, KvDtype::kInt8, 1), 32u * 2 * 8 * (128 + 4));
}

TEST(KvMath, Qwen3BytesPerToken) {
  // Qwen3-8B: 36 layers, 8 KV heads of 128.
  EXPECT_EQ(kv_bytes_per_token(model("qwen3-8b"), KvDtype::kBF16, 1), 2u * 36 * 8 * 128 * 2);
  EXPECT_EQ(kv_bytes_per_token(model("qwen3-8b"), KvDtype::kBF16, 1), 147456u);
  // Qwen3-30B-A3B: 48 layers, 4 KV heads of 128 (experts add no KV).
  EXPECT_EQ(kv_bytes_per_token(model("qwen3-30b-a3b"), KvDtype::kBF16, 1), 2u * 48 * 4 * 128 * 2);
  EXPECT_EQ(kv_bytes_per_token(model("qwen3-30b-a3b"), KvDtype::kBF16, 1), 98304u);
}

TEST(KvMath, MqaHasOneKvHead) {
  ModelShape m = model("llama-2-7b");
  m.name = "llama-2-7b-mqa";
  m.n_kv_head = 1;
  EXPECT_STREQ(m.attention_kind(), "MQA");
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kF16, 1), 2u * 32 * 1 * 128 * 2);  // 16384
  // Under TP 8 the single head is replicated: every rank still holds 16384 B per token.
  EXPECT_EQ(kv_heads_per_rank(m, 8), 1);
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kF16, 8), 16384u);
}

TEST(KvMath, Int8AddsOneF32ScalePerTokenPerHeadForKAndV) {
  const ModelShape& m = model("llama-3-8b");
  // 32 layers x 2 x 8 heads x (128 x 1 B + 4 B)
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kInt8, 1), 32u * 2 * 8 * (128 + 4));
}

TEST(KvMath, MlaDeepSeekV2StoresOneLatentOf576PerLayer) {
  const ModelShape& m = model("deepseek-v2");
  EXPECT_STREQ(m.attention_kind(), "MLA");
  EXPECT_EQ(kv_elems_per_token_layer(m, 1), 512 + 64);
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kBF16, 1), 60u * (512 + 64) * 2);
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kBF16, 1), 69120u);
  // The latent is not split by TP: every rank caches all of it.
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kBF16, 8), 69120u);
  // DeepSeek-V2 paper, Table 1: MLA caches (d_c + d_h^R) l = 4.5 d_h l elements per token.
  EXPECT_EQ((512 + 64) * 2, 9 * 128);
  // The naive "2 x heads x head_dim" formula would claim 60 x 2 x 128 x 128 x 2 B = 3.75 MiB.
  EXPECT_EQ(60u * 2 * 128 * 128 * 2 / kv_bytes_per_token(m, KvDtype::kBF16, 1), 56u);
}

// DeepSeek 67B (DeepSeek LLM paper): 95 layers, d_model 8192, 64 heads, 8 KV heads (GQA).
ModelShape deepseek_67b() {
  ModelShape m;
  m.name = "deepseek-llm-67b";
  m.n_layer = 95;
  m.n_embd = 8192;
  m.n_head = 64;
  m.n_kv_head = 8;
  m.head_dim = 128;
  m.n_ff = 22016;
  m.n_vocab = 102400;
  return m;
}

TEST(KvMath, DeepSeekV2ReductionVersusDeepSeek67B) {
  const ModelShape& v2 = model("deepseek-v2");
  const ModelShape d67 = deepseek_67b();
  ASSERT_TRUE(d67.validate().ok());
  EXPECT_EQ(kv_bytes_per_token(d67, KvDtype::kBF16, 1), 95u * 2 * 8 * 128 * 2);  // 389120
  // Same dtype (bf16 both): 1 - 69120 / 389120 = 82.24 %.
  const double same = 1.0 - (double)kv_bytes_per_token(v2, KvDtype::kBF16, 1) /
                                (double)kv_bytes_per_token(d67, KvDtype::kBF16, 1);
  EXPECT_NEAR(same, 0.8224, 1e-4);
  // The paper's 93.3 % compares 67B's 16-bit cache with V2's deployed cache, which it quantises
  // to 6 bits per element on average: 1 - (60 x 576 x 6) / (95 x 2048 x 16) = 93.34 %.
  const double elems_v2 = 60.0 * kv_elems_per_token_layer(v2, 1);
  const double elems_67 = 95.0 * kv_elems_per_token_layer(d67, 1);
  EXPECT_NEAR(1.0 - (elems_v2 * 6) / (elems_67 * 16), 0.933, 5e-4);
  // Against an MHA model of V2's own width (128 heads x 128 dims, 60 layers) MLA saves 98.2 %.
  EXPECT_NEAR(1.0 - elems_v2 / (60.0 * 2 * 128 * 128), 0.9824, 1e-4);
}

TEST(KvMath, MistralSlidingWindowCapsEveryLayerAt257Blocks) {
  const ModelShape& m = model("mistral-7b");
  const uint64_t per_token = 32u * 2 * 8 * 128 * 2;  // 131072
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kBF16, 1), per_token);
  EXPECT_EQ(kv_bytes_per_sequence(m, KvDtype::kBF16, 1, 0, 32, 1000, 16),
            per_token * 1008);  // 63 blocks of 16
  // Up to the window the sequence holds all its blocks (4096 tokens: 256). Past it, blocks wholly
  // behind the window are freed, but the 4096 positions a token attends to start anywhere in a
  // block: ceil((4096 + 15) / 16) = 257 blocks.
  EXPECT_EQ(kv_bytes_per_sequence(m, KvDtype::kBF16, 1, 0, 32, 4096, 16), per_token * 4096);
  EXPECT_EQ(kv_bytes_per_sequence(m, KvDtype::kBF16, 1, 0, 32, 32768, 16), per_token * 4112);
  EXPECT_EQ(kv_bytes_per_sequence(m, KvDtype::kBF16, 1, 0, 32, 8192, 16),
            kv_bytes_per_sequence(m, KvDtype::kBF16, 1, 0, 32, 4097, 16));
}

TEST(KvMath, WindowBlocksCountTheBoundaryBlock) {
  EXPECT_EQ(window_blocks(1000, 0, 16), 63);   // no window: ceil(1000 / 16)
  EXPECT_EQ(window_blocks(20, 40, 16), 2);     // shorter than the window
  EXPECT_EQ(window_blocks(10000, 40, 16), 4);  // 40 positions from a block's last slot
  EXPECT_EQ(window_blocks(10000, 32, 16), 3);  // a multiple of the block: + 1
  EXPECT_EQ(window_blocks(10000, 33, 16), 3);  // 1 (mod 16): no extra block
  EXPECT_EQ(window_blocks(4100, 4096, 16), 257);
}

TEST(KvMath, Gemma2CapsHalfTheLayers) {
  const ModelShape& m = model("gemma-2-9b");
  const uint64_t layer = 2u * 8 * 256 * 2;  // 8192 B per token per layer
  EXPECT_EQ(m.window_of_layer(0), 4096);
  EXPECT_EQ(m.window_of_layer(1), 0);
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kBF16, 1), 42 * layer);
  // 8192 tokens: 21 global layers hold 8192, 21 local layers 257 blocks (4112 tokens).
  EXPECT_EQ(kv_bytes_per_sequence(m, KvDtype::kBF16, 1, 0, 42, 8192, 16),
            21 * layer * 8192 + 21 * layer * 4112);
  // Below the window every layer holds the whole sequence.
  EXPECT_EQ(kv_bytes_per_sequence(m, KvDtype::kBF16, 1, 0, 42, 2048, 16), 42 * layer * 2048);
}

// Gemma-2-2B: 26 layers x (K + V) x 4 KV heads x 256 x 2 B = 26 x 4096 = 106496 B per token;
// Gemma-2-27B: 46 x 2 x 16 x 128 x 2 = 46 x 8192 = 376832 (bf16).
TEST(KvMath, Gemma2SizesBytesPerToken) {
  EXPECT_EQ(kv_bytes_per_token(model("gemma-2-2b"), KvDtype::kBF16, 1), 106496u);
  EXPECT_EQ(kv_bytes_per_token(model("gemma-2-27b"), KvDtype::kBF16, 1), 376832u);
  // Layers 0, 2, ... windowed to 4096, odd layers global.
  EXPECT_EQ(model("gemma-2-27b").window_of_layer(44), 4096);
  EXPECT_EQ(model("gemma-2-27b").window_of_layer(45), 0);
}

// Gemma-3-1B: 26 layers, MQA (1 KV head) of 256: 2 x 1 x 256 x 2 B = 1024 B per layer per token,
// 26 x 1024 = 26624 B per token. Layers 5, 11, 17, 23 are global (l % 6 == 5), the other 22
// windowed to 512: at 8192 tokens a local layer keeps ceil((512 + 15) / 16) = 33 blocks of 16 =
// 528 tokens, so a sequence holds 4 x 1024 x 8192 + 22 x 1024 x 528 = 33554432 + 11894784 =
// 45449216 B. Gemma-3-27B: 62 x 2 x 16 x 128 x 2 = 62 x 8192 = 507904 B per token.
TEST(KvMath, Gemma3WindowsFiveLayersInSix) {
  const ModelShape& m = model("gemma-3-1b");
  EXPECT_STREQ(m.attention_kind(), "MQA");
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kBF16, 1), 26624u);
  int global = 0;
  for (int l = 0; l < 26; ++l) global += m.window_of_layer(l) == 0;
  EXPECT_EQ(global, 4);
  EXPECT_EQ(m.window_of_layer(5), 0);
  EXPECT_EQ(m.window_of_layer(6), 512);
  EXPECT_EQ(kv_bytes_per_sequence(m, KvDtype::kBF16, 1, 0, 26, 8192, 16), 45449216u);
  // int8: one f32 scale per head for K and V: 26 x 2 x 1 x (256 + 4) = 13520 B per token.
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kInt8, 1), 13520u);
  EXPECT_EQ(kv_bytes_per_token(model("gemma-3-27b"), KvDtype::kBF16, 1), 507904u);
}

// gpt-oss-20b in int8: 24 layers x 2 x 8 KV heads x (64 + 4) B = 26112 B per token. Its sinks are
// n_head logits per layer in the weights, nothing per token: the 64 query heads do not count.
TEST(KvMath, GptOssSinksAddNoKv) {
  const ModelShape& m = model("gpt-oss-20b");
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kInt8, 1), 26112u);
  ModelShape mha = m;
  mha.n_kv_head = mha.n_head;  // were every head cached: 8 x as much
  EXPECT_EQ(kv_bytes_per_token(mha, KvDtype::kInt8, 1), 8 * 26112u);
}

// Qwen1.5-MoE-A2.7B: 24 layers x 2 x 16 KV heads (MHA) x 128 x 2 B = 196608 B per token; its 60
// experts and shared expert add none.
TEST(KvMath, Qwen2MoeBytesPerToken) {
  const ModelShape& m = model("qwen1.5-moe-a2.7b");
  EXPECT_STREQ(m.attention_kind(), "MHA");
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kBF16, 1), 196608u);
  EXPECT_EQ(m.window_of_layer(0), 0);
}

TEST(KvMath, HybridLayerTypesSkipLayersWithoutKv) {
  ModelShape m = model("llama-3-8b");
  m.layer_window.assign(32, -1);
  for (int l = 3; l < 32; l += 4) m.layer_window[(size_t)l] = 0;  // 8 attention layers of 32
  m.layer_window[0] = 1024;
  ASSERT_TRUE(m.validate().ok());
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kBF16, 1), 9u * 4096);
  EXPECT_EQ(kv_bytes_per_sequence(m, KvDtype::kBF16, 1, 0, 32, 4096, 16),
            8u * 4096 * 4096 + 1u * 4096 * 1040);  // window 1024: 65 blocks
}

TEST(KvMath, TensorParallelSplitsKvHeadsOrReplicates) {
  const ModelShape& m = model("llama-3-70b");  // 8 KV heads
  EXPECT_EQ(kv_heads_per_rank(m, 1), 8);
  EXPECT_EQ(kv_heads_per_rank(m, 4), 2);
  EXPECT_EQ(kv_heads_per_rank(m, 8), 1);
  EXPECT_EQ(kv_heads_per_rank(m, 16), 1);  // replicated on 2 ranks each
  const uint64_t full = kv_bytes_per_token(m, KvDtype::kBF16, 1);
  EXPECT_EQ(full, 80u * 2 * 8 * 128 * 2);
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kBF16, 4), full / 4);
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kBF16, 8), full / 8);
  // 16 ranks cannot go below one head each: the per-rank figure stops shrinking.
  EXPECT_EQ(kv_bytes_per_token(m, KvDtype::kBF16, 16), full / 8);
}

TEST(KvMath, BlocksRoundUpPartialBlocks) {
  const ModelShape& m = model("llama-3-8b");
  EXPECT_EQ(kv_bytes_per_sequence(m, KvDtype::kBF16, 1, 0, 32, 17, 16), 131072u * 32);
  EXPECT_EQ(kv_bytes_per_sequence(m, KvDtype::kBF16, 1, 0, 32, 16, 16), 131072u * 16);
  // A layer range (pipeline stage) holds its share only.
  EXPECT_EQ(kv_bytes_per_sequence(m, KvDtype::kBF16, 1, 0, 16, 16, 16), 131072u * 8);
}

}  // namespace
}  // namespace kvw::planner
