// Split decode (model/forward_decode.cc): a decode token deep enough to span several attention
// segments gets its segments computed on any thread and merged in position order; its logits
// must be the same bits for every thread count, alone or beside other decodes, and equal to the
// same position computed inside a prefill tile.
#include <gtest/gtest.h>

#include <numeric>

#include "kernels/kernels.h"
#include "model_test_util.h"

namespace kvw {
namespace {

using test::bit_equal;

MakeModelSpec deep_spec() {
  MakeModelSpec s;
  s.n_embd = 256;
  s.n_ff = 512;
  s.n_head = 8;
  s.n_head_kv = 2;  // group 4: each split item is one KV head's four query heads
  s.weight_type = GgmlType::kQ8_0;
  s.n_ctx = 2048;
  s.seed = 5;
  return s;
}

// 1100 positions: five segments of 256, the last one partial.
constexpr int kDepth = 1100;
static_assert(kDepth > 4 * kernels::kAttnSegment);

// Prefills tokens [0, n - 1) in chunks of `chunk`, then returns the logits of decoding token
// n - 1, in a step that also decodes `others` one-token sequences (at depth 200: one segment,
// finished without a merge).
std::vector<float> decode_last(Model& m, KvArena& kv, const std::vector<int32_t>& tokens,
                               int others, int64_t chunk = 500) {
  const int32_t bs = kv.config().block_size;
  std::vector<uint32_t> table((tokens.size() + bs - 1) / bs);
  std::iota(table.rbegin(), table.rend(), 0u);  // reversed: every block hop is a jump back
  const int32_t V = m.hparams().n_vocab;
  std::vector<float> l(chunk * V);
  const int64_t last = (int64_t)tokens.size() - 1;
  for (int64_t pos = 0; pos < last; pos += chunk) {
    const int64_t n = std::min<int64_t>(chunk, last - pos);
    SeqInput in{
        .tokens = std::span(tokens).subspan(pos, n), .start_pos = pos, .block_table = table};
    EXPECT_TRUE(m.forward({&in, 1}, kv, l.data()).ok());
  }
  // Other sequences: a 200-token prefill each, then one decode token beside ours.
  const int64_t other_blocks = (200 + bs) / bs;
  std::vector<std::vector<uint32_t>> tables(others);
  std::vector<int32_t> other_tokens(201, 7);
  for (int o = 0; o < others; ++o) {
    for (int64_t b = 0; b < other_blocks; ++b)
      tables[o].push_back((uint32_t)(table.size() + o * other_blocks + b));
    SeqInput in{.tokens = std::span(other_tokens).subspan(0, 200), .block_table = tables[o]};
    EXPECT_TRUE(m.forward({&in, 1}, kv, l.data()).ok());
  }
  std::vector<SeqInput> step;
  for (int o = 0; o < others; ++o) {
    step.push_back({.tokens = std::span(other_tokens).subspan(200, 1),
                    .start_pos = 200,
                    .block_table = tables[o]});
  }
  step.insert(
      step.begin() + others / 2,
      {.tokens = std::span(tokens).subspan(last, 1), .start_pos = last, .block_table = table});
  std::vector<float> all(step.size() * V);
  EXPECT_TRUE(m.forward(step, kv, all.data()).ok());
  const size_t mine = others / 2;
  return {all.begin() + mine * V, all.begin() + (mine + 1) * V};
}

// The same last position computed inside a prefill tile (chunks of `chunk`, all logits).
std::vector<float> prefill_last(Model& m, KvArena& kv, const std::vector<int32_t>& tokens,
                                int64_t chunk = 500) {
  const int32_t bs = kv.config().block_size;
  std::vector<uint32_t> table((tokens.size() + bs - 1) / bs);
  std::iota(table.begin(), table.end(), 0u);
  const int32_t V = m.hparams().n_vocab;
  std::vector<float> l(chunk * V);
  int64_t n = 0;
  for (int64_t pos = 0; pos < (int64_t)tokens.size(); pos += n) {
    n = std::min<int64_t>(chunk, (int64_t)tokens.size() - pos);
    SeqInput in{.tokens = std::span(tokens).subspan(pos, n),
                .start_pos = pos,
                .block_table = table,
                .all_logits = true};
    EXPECT_TRUE(m.forward({&in, 1}, kv, l.data()).ok());
  }
  return {l.begin() + (n - 1) * V, l.begin() + n * V};
}

// bf16_dot: with --attention-dot bf16 (ModelOptions::attention_bf16_dot). depth tokens, the
// prompt prefilled in chunks of `chunk`.
void expect_split_invariant(KvDtype dtype, const MakeModelSpec& spec = deep_spec(),
                            const std::string& name = "deep_decode", bool bf16_dot = false,
                            int64_t depth = kDepth, int64_t chunk = 500) {
  const std::string path = test::write_model(name + "_" + kv_dtype_name(dtype), spec);
  std::vector<float> first;
  for (int threads : {1, 2, 4}) {
    ModelOptions opt;
    opt.n_threads = threads;
    opt.max_batch_tokens = 512;
    opt.attention_bf16_dot = bf16_dot;
    auto loaded = Model::load(path, opt);
    ASSERT_TRUE(loaded.ok()) << loaded.message();
    auto m = std::move(*loaded);
    const auto tokens = test::random_tokens(depth, m->hparams().n_vocab, 9);
    KvArena kv(m->kv_config(depth / 16 + 1 + 3 * 20, 16, dtype));
    for (int others : {0, 3}) {
      const auto got = decode_last(*m, kv, tokens, others, chunk);
      if (first.empty()) {
        first = got;
        KvArena kv2(m->kv_config(depth / 16 + 1, 16, dtype));
        EXPECT_TRUE(bit_equal(prefill_last(*m, kv2, tokens, chunk), first))
            << "decode differs from the same position in a prefill tile";
      }
      EXPECT_TRUE(bit_equal(got, first)) << threads << " threads, " << others << " others";
    }
  }
}

TEST(ForwardDecodeSplit, DeepDecodeLogitsBitIdenticalForOneTwoFourThreadsBatchedAndPrefilledF16) {
  expect_split_invariant(KvDtype::kF16);
}

TEST(ForwardDecodeSplit, DeepDecodeLogitsBitIdenticalForOneTwoFourThreadsBatchedAndPrefilledInt8) {
  expect_split_invariant(KvDtype::kInt8);
}

// Gemma-2's soft-capped scores (a cap of 2, so tanh bends them) and gpt-oss's sinks take the
// same split: window layers of 300 start mid-segment and span two or three segments.
TEST(ForwardDecodeSplit, SoftcappedGemma2DecodeBitIdenticalForEveryThreadCountAndPrefill) {
  MakeModelSpec s = test::preset_spec("gemma2-tiny", "q8_0", 5);
  s.attn_softcap = 2.0f;
  s.sliding_window = 300;
  s.n_ctx = 2048;
  expect_split_invariant(KvDtype::kF16, s, "deep_decode_gemma2");
}

TEST(ForwardDecodeSplit, SinkGptOssDecodeBitIdenticalForEveryThreadCountAndPrefill) {
  MakeModelSpec s = test::preset_spec("gpt-oss-tiny", "q8_0", 5);
  s.sliding_window = 300;
  s.n_ctx = 2048;
  expect_split_invariant(KvDtype::kInt8, s, "deep_decode_gptoss");
}

// --attention-dot bf16 keeps every invariance above within the mode (the kernels score each
// position and pair it for PV the same way in decode tiles, prefill tiles and split segments),
// also at an odd depth prefilled in odd chunks (the decode's last chunk ends mid pair, prefill
// tiles start mid pair) and with Gemma-2's soft cap and a window of 300 (starts mid pair every
// other position), and really changes the logits (its q.k and PV products are bf16).
void expect_bf16_dot_split_invariant(KvDtype dtype) {
  if (!kernels::attention_bf16_dot_supported(kernels::kernels()))
    GTEST_SKIP() << "no AVX512_BF16 attention on this CPU";
  expect_split_invariant(dtype, deep_spec(), "deep_decode_bf16dot", true);
  // F32 weights: Q8_0's activation quantisation can round a last-bit difference away.
  MakeModelSpec f32 = deep_spec();
  f32.weight_type = GgmlType::kF32;
  expect_split_invariant(dtype, f32, "deep_decode_bf16dot_odd", true, kDepth + 1, 333);
  MakeModelSpec gemma2 = test::preset_spec("gemma2-tiny", "q8_0", 5);
  gemma2.attn_softcap = 2.0f;
  gemma2.sliding_window = 300;
  gemma2.n_ctx = 2048;
  gemma2.weight_type = GgmlType::kF32;
  expect_split_invariant(dtype, gemma2, "deep_decode_bf16dot_gemma2", true, kDepth + 1, 333);
  ModelOptions opt;
  opt.n_threads = 2;
  opt.max_batch_tokens = 512;
  const std::string path =
      test::write_model(std::string("deep_decode_bf16dot_") + kv_dtype_name(dtype), deep_spec());
  std::vector<std::vector<float>> logits;
  for (bool bf16_dot : {false, true}) {
    opt.attention_bf16_dot = bf16_dot;
    auto m = Model::load(path, opt);
    ASSERT_TRUE(m.ok()) << m.message();
    const auto tokens = test::random_tokens(kDepth, (*m)->hparams().n_vocab, 9);
    KvArena kv((*m)->kv_config(kDepth / 16 + 1, 16, dtype));
    logits.push_back(decode_last(**m, kv, tokens, 0));
  }
  EXPECT_FALSE(bit_equal(logits[0], logits[1])) << "bf16 dot changed nothing";
}

TEST(ForwardDecodeSplit, Bf16DotDecodeBitIdenticalForEveryThreadCountBatchedAndPrefilledF16) {
  expect_bf16_dot_split_invariant(KvDtype::kF16);
}

TEST(ForwardDecodeSplit, Bf16DotDecodeBitIdenticalForEveryThreadCountBatchedAndPrefilledBf16) {
  expect_bf16_dot_split_invariant(KvDtype::kBF16);
}

}  // namespace
}  // namespace kvw
