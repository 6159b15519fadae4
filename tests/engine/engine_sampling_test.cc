// Seeded sampling in the engine: the rows of a step are sampled on the model's threads, so a
// request's tokens must not depend on the thread that drew them, the requests beside it or how
// its prompt was chunked.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine_test_util.h"

namespace kvw {
namespace {

using testutil::config_with_blocks;
using testutil::make_engine;
using testutil::prompt;
using testutil::run_one;

std::vector<GenerationRequest> sampled_requests(int32_t n_vocab) {
  const GenSampling knobs[] = {
      {.temperature = 1.0f, .seed = 11},
      {.temperature = 0.8f, .top_p = 0.9f, .seed = 12},
      {.temperature = 1.2f, .top_k = 40, .seed = 13},
      {.temperature = 1.0f, .min_p = 0.05f, .seed = 14},
      {.temperature = 0.9f,
       .top_p = 0.95f,
       .presence_penalty = 0.5f,
       .frequency_penalty = 0.3f,
       .seed = 15,
       .logit_bias = {{7, 5.0f}, {9, -100.0f}}},
      {.temperature = 1.0f, .seed = 16, .logprobs = 3},
      {.temperature = 1.0f, .seed = 17},  // same prompt as the first, another seed
  };
  std::vector<GenerationRequest> rs;
  for (size_t i = 0; i < std::size(knobs); ++i) {
    GenerationRequest r;
    r.prompt = prompt(i + 1 == std::size(knobs) ? 200 : 200 + i, 20 + 5 * (int)(i % 6), n_vocab);
    r.max_tokens = 14;
    r.ignore_eos = true;
    r.sampling = knobs[i];
    rs.push_back(std::move(r));
  }
  return rs;
}

TEST(EngineSampling, SeededTokensIdenticalAloneBatchedChunkedAndOnTwoThreads) {
  const std::string model = testutil::tiny_model_path();
  EngineConfig cfg = config_with_blocks(model, 256);
  auto alone_engine = make_engine(cfg);
  ASSERT_NE(alone_engine, nullptr);
  const int32_t n_vocab = alone_engine->model().hparams().n_vocab;
  const std::vector<GenerationRequest> rs = sampled_requests(n_vocab);
  std::vector<std::vector<int32_t>> alone;
  for (const auto& r : rs) {
    auto c = run_one(*alone_engine, r);
    ASSERT_EQ(c.reason, FinishReason::kLength) << c.error;
    alone.push_back(c.tokens);
  }
  alone_engine->shutdown();
  EXPECT_NE(alone.front(), alone.back()) << "another seed must draw other tokens";

  // Two forward threads sample the rows; 16-token steps chunk every prompt.
  cfg.n_threads = 2;
  cfg.sched.max_num_batched_tokens = 16;
  cfg.memory_budget_bytes += uint64_t{8} << 20;
  auto batched_engine = make_engine(cfg);
  ASSERT_NE(batched_engine, nullptr);
  std::vector<std::shared_ptr<TokenChannel>> chs;
  for (const auto& r : rs) {
    auto ch = batched_engine->submit(r);
    ASSERT_TRUE(ch.ok()) << ch.message();
    chs.push_back(*ch);
  }
  for (size_t i = 0; i < rs.size(); ++i) {
    auto c = chs[i]->collect();
    EXPECT_EQ(c.reason, FinishReason::kLength) << c.error;
    EXPECT_EQ(c.tokens, alone[i]) << "request " << i;
  }
  batched_engine->shutdown();
  EXPECT_GT(batched_engine->scheduler().counters().num_steps, 10u);
}

}  // namespace
}  // namespace kvw
