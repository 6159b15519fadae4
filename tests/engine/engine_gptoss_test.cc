// gpt-oss files in the engine (sinks, alternating 16-token windows, biases, 16 MXFP4 experts
// top-4 with the clamped SwiGLU, YaRN): a request's greedy tokens are the same alone, batched,
// chunked, from a prefix hit, and preempted (recompute and swap), with f16 and int8 KV.
#include <gtest/gtest.h>

#include "engine_family_util.h"

namespace kvw {
namespace {

TEST(EngineGptOss, GreedyOutputIdenticalAloneBatchedChunkedPrefixHitPreemptedF16AndInt8) {
  const std::string model = testutil::write_preset("gpt-oss-tiny", 93);
  testutil::expect_same_tokens_everywhere(model, KvDtype::kF16);
  testutil::expect_same_tokens_everywhere(model, KvDtype::kInt8);
}

// Attention matrices Q8_0 (8-bit activations), experts MXFP4: the same guarantees.
TEST(EngineGptOss, Q8_0FileGreedyOutputIdenticalAloneBatchedChunkedPrefixHitPreempted) {
  testutil::expect_same_tokens_everywhere(
      testutil::write_preset("gpt-oss-tiny", 94, GgmlType::kQ8_0), KvDtype::kF16);
}

}  // namespace
}  // namespace kvw
