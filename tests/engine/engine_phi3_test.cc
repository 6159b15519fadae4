// phi3 files in the engine (fused QKV and gate/up, LongRoPE, Phi-4-mini's partial rotary and tied
// output; f32 and Q5_0 weights): a request's greedy tokens are the same alone, beside six others,
// with its prompt chunked into 16-token steps, from a prefix-cache hit, and preempted (recompute
// and swap) under a tiny KV budget, with f16 and int8 KV. The engine sets the model up for
// --max-model-len, which picks LongRoPE's factors.
#include <gtest/gtest.h>

#include <set>

#include "engine/engine.h"
#include "engine_family_util.h"
#include "engine_test_util.h"

namespace kvw {
namespace {

using testutil::config_for;
using testutil::expect_no_leak;
using testutil::expect_same_tokens_everywhere;
using testutil::greedy;
using testutil::make_engine;
using testutil::prompt;
using testutil::run_one;
using testutil::write_preset;

TEST(EnginePhi3, GreedyOutputIdenticalAloneBatchedChunkedPrefixHitPreemptedF16AndInt8) {
  const std::string model = write_preset("phi3-tiny", 80);
  expect_same_tokens_everywhere(model, KvDtype::kF16);
  expect_same_tokens_everywhere(model, KvDtype::kInt8);
}

TEST(EnginePhi4Mini, GreedyOutputIdenticalAloneBatchedChunkedPrefixHitPreemptedF16AndInt8) {
  const std::string model = write_preset("phi4-mini-tiny", 81);
  expect_same_tokens_everywhere(model, KvDtype::kF16);
  expect_same_tokens_everywhere(model, KvDtype::kInt8);
}

// Q5_0 (llama-quantize's fallback on rows that are not a multiple of 256; 128 here) goes
// through the dequantising matmul with f32 activations: the same guarantees. Its logits against
// the float64 reference: tests/reference phi3_q5_0 and llama_q5_0.
TEST(EnginePhi3, Q5_0FileGreedyOutputIdenticalAloneBatchedChunkedPrefixHitPreempted) {
  expect_same_tokens_everywhere(write_preset("phi3-tiny", 83, GgmlType::kQ5_0), KvDtype::kF16);
}

// --max-model-len reaches the model: at the original context (256) the short LongRoPE factors
// apply, above it the long ones, and the greedy text differs.
TEST(EnginePhi3, MaxModelLenPicksTheLongRopeFactors) {
  const std::string model = write_preset("phi3-tiny", 82);
  std::vector<std::vector<int32_t>> outs;
  for (int64_t len : {256, 512}) {
    EngineConfig cfg = config_for(model, 64, KvDtype::kF16);
    cfg.sched.max_model_len = len;
    auto e = make_engine(cfg);
    ASSERT_NE(e, nullptr);
    outs.push_back(run_one(*e, greedy(prompt(9, 60, e->model().hparams().n_vocab), 30)).tokens);
    expect_no_leak(*e);
  }
  EXPECT_NE(outs[0], outs[1]);
}

}  // namespace
}  // namespace kvw
