// Seeded sampling in the engine: the rows of a step are sampled on the model's threads, so a
// request's tokens must not depend on the thread that drew them, the requests beside it or how
// its prompt was chunked.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/engine.h"
#include "engine_test_util.h"

namespace kvw {
namespace {

using testutil::config_with_blocks;
using testutil::expect_all_free;
using testutil::make_engine;
using testutil::prompt;
using testutil::run_one;

std::shared_ptr<const std::vector<int32_t>> every_fourth_id(int32_t n_vocab) {
  auto ids = std::make_shared<std::vector<int32_t>>();
  for (int32_t id = 3; id < n_vocab; id += 4) ids->push_back(id);
  return ids;
}

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
      {.temperature = 1.0f, .repetition_penalty = 1.3f, .seed = 18},
      // vLLM's min_tokens over a quarter of the vocabulary as stop ids: banned for 5 tokens,
      // then likely to end the request early (kStop) within its 14.
      {.temperature = 1.0f,
       .repetition_penalty = 0.8f,
       .seed = 19,
       .min_tokens = 5,
       .stop_token_ids = every_fourth_id(n_vocab)},
      {.temperature = 1.0f, .seed = 17},  // same prompt as the first, another seed
  };
  std::vector<GenerationRequest> rs;
  for (size_t i = 0; i < std::size(knobs); ++i) {
    GenerationRequest r;
    r.prompt = prompt(i + 1 == std::size(knobs) ? 200 : 200 + i, 20 + 5 * (int)(i % 6), n_vocab);
    if (i == 6) r.prompt = prompt(206, 90, n_vocab);  // repetition_penalty over a long prompt
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
  std::vector<TokenChannel::Collected> alone;
  for (const auto& r : rs) {
    auto c = run_one(*alone_engine, r);
    ASSERT_TRUE(c.reason == FinishReason::kLength || c.reason == FinishReason::kStop) << c.error;
    alone.push_back(c);
  }
  alone_engine->shutdown();
  EXPECT_NE(alone.front().tokens, alone.back().tokens) << "another seed must draw other tokens";
  const TokenChannel::Collected& stopped = alone[alone.size() - 2];
  EXPECT_EQ(stopped.reason, FinishReason::kStop) << "vacuous: no stop id drawn in 14 tokens";
  EXPECT_GE(stopped.tokens.size(), 6u) << "a stop id drawn under min_tokens";

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
    EXPECT_EQ(c.reason, alone[i].reason) << c.error;
    EXPECT_EQ(c.tokens, alone[i].tokens) << "request " << i;
  }
  batched_engine->shutdown();
  EXPECT_GT(batched_engine->scheduler().counters().num_steps, 10u);
}

// vLLM's min_tokens under greedy: a logit_bias that makes EOS the argmax ends the request at
// its first token; with min_tokens = 5 EOS is banned for five tokens and ends it at the sixth.
TEST(EngineSampling, GreedyMinTokensHoldsOffEos) {
  auto e = make_engine(config_with_blocks(testutil::tiny_model_path(), 64));
  ASSERT_NE(e, nullptr);
  const int32_t n_vocab = e->model().hparams().n_vocab;
  const int32_t eos = e->tokenizer().eos_id();
  GenerationRequest r = testutil::greedy(prompt(300, 12, n_vocab), 16);
  r.ignore_eos = false;
  r.sampling.logit_bias = {{eos, 100.0f}};
  auto c = run_one(*e, r);
  EXPECT_EQ(c.reason, FinishReason::kStop);
  EXPECT_EQ(c.tokens, std::vector<int32_t>{eos});
  r.sampling.min_tokens = 5;
  c = run_one(*e, r);
  EXPECT_EQ(c.reason, FinishReason::kStop);
  ASSERT_EQ(c.tokens.size(), 6u);
  for (size_t i = 0; i < 5; ++i) EXPECT_FALSE(e->tokenizer().is_end_of_generation(c.tokens[i]));
  EXPECT_EQ(c.tokens.back(), eos);
  expect_all_free(*e);
}

// stop_token_ids: the first sampled one ends the request (kStop, it is the last token), EOS
// ignored or not; under min_tokens it cannot be drawn, so greedy goes another way there.
TEST(EngineSampling, StopTokenIdsEndAtTheFirstOneDrawnAndMinTokensBansThem) {
  auto e = make_engine(config_with_blocks(testutil::tiny_model_path(), 64));
  ASSERT_NE(e, nullptr);
  const int32_t n_vocab = e->model().hparams().n_vocab;
  const GenerationRequest plain = testutil::greedy(prompt(301, 16, n_vocab), 20);
  const std::vector<int32_t> free_run = run_one(*e, plain).tokens;
  ASSERT_EQ(free_run.size(), 20u);
  const int32_t stop_id = free_run[4];
  const auto first =
      (size_t)(std::find(free_run.begin(), free_run.end(), stop_id) - free_run.begin());
  GenerationRequest r = plain;
  r.sampling.stop_token_ids = std::make_shared<const std::vector<int32_t>>(1, stop_id);
  auto c = run_one(*e, r);
  EXPECT_EQ(c.reason, FinishReason::kStop);
  EXPECT_EQ(c.tokens, std::vector<int32_t>(free_run.begin(), free_run.begin() + first + 1));
  r.sampling.min_tokens = (int32_t)first + 3;
  c = run_one(*e, r);
  ASSERT_GT(c.tokens.size(), first + 3) << "min_tokens must outlast the stop id";
  for (size_t i = 0; i < first + 3; ++i) EXPECT_NE(c.tokens[i], stop_id) << i;
  EXPECT_EQ(c.reason == FinishReason::kStop, c.tokens.back() == stop_id);
  expect_all_free(*e);
}

// vLLM's repetition_penalty covers the whole prompt and output, not a recent window: a large
// one steers greedy away from every token already held, even the prompt's first one, which a
// logit_bias otherwise makes the argmax every time.
TEST(EngineSampling, GreedyRepetitionPenaltyCoversTheWholePromptAndOutput) {
  auto e = make_engine(config_with_blocks(testutil::tiny_model_path(), 64));
  ASSERT_NE(e, nullptr);
  const int32_t n_vocab = e->model().hparams().n_vocab;
  const std::vector<int32_t> p = prompt(302, 150, n_vocab);
  GenerationRequest r = testutil::greedy(p, 24);
  r.sampling.logit_bias = {{p[0], 30.0f}};
  const std::vector<int32_t> free_run = run_one(*e, r).tokens;
  EXPECT_EQ(free_run, std::vector<int32_t>(24, p[0]));
  r.sampling.repetition_penalty = 1e4f;
  const std::vector<int32_t> penalised = run_one(*e, r).tokens;
  EXPECT_NE(penalised, free_run);
  std::vector<int32_t> held = p;
  for (int32_t t : penalised) {
    EXPECT_EQ(std::count(held.begin(), held.end(), t), 0) << "token " << t << " repeated";
    held.push_back(t);
  }
  expect_all_free(*e);
}

}  // namespace
}  // namespace kvw
