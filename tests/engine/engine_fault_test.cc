// Faults are per request (issue 30): an exception in one sequence's forward pass or in the
// emission of its tokens ends that request with a typed error; the other requests of the batch
// produce exactly what they produce alone, every block comes back, and a failed pass's KV never
// reaches the prefix cache. Injected through the test-only EngineConfig fault hooks.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <new>
#include <stdexcept>

#include "engine/engine.h"
#include "engine_test_util.h"

namespace kvw {
namespace {

using testutil::config_with_blocks;
using testutil::expect_all_free;
using testutil::greedy;
using testutil::make_engine;
using testutil::prompt;
using testutil::run_batch;
using testutil::run_one;

constexpr int32_t kFaulty = 13;  // max_tokens of the request the hooks pick

// Four prompts (50 tokens: three full blocks each) of which the third is the faulty one.
std::vector<GenerationRequest> batch(int32_t n_vocab) {
  std::vector<GenerationRequest> rs;
  for (int i = 0; i < 4; ++i)
    rs.push_back(greedy(prompt(40 + i, 50, n_vocab), i == 2 ? kFaulty : 9));
  return rs;
}

// What each request produces alone on a clean engine (no hooks).
std::vector<std::vector<int32_t>> alone_outputs(const std::string& model,
                                                const std::vector<GenerationRequest>& rs) {
  auto e = make_engine(config_with_blocks(model, 128));
  std::vector<std::vector<int32_t>> out;
  for (const auto& r : rs) out.push_back(run_one(*e, r).tokens);
  return out;
}

TEST(EngineFaults, ForwardThrowForOneSequenceEndsItAloneAndCachesNoneOfItsKv) {
  const std::string model = testutil::tiny_model_path();
  EngineConfig cfg = config_with_blocks(model, 128);
  cfg.forward_fault_hook = [](uint64_t, int32_t max_tokens) {
    if (max_tokens == kFaulty) throw std::bad_alloc();
  };
  auto e = make_engine(cfg);
  ASSERT_NE(e, nullptr);
  const std::vector<GenerationRequest> rs = batch(e->model().hparams().n_vocab);
  const auto alone = alone_outputs(model, rs);
  const auto out = run_batch(*e, rs);
  for (int i : {0, 1, 3}) {
    EXPECT_EQ(out[(size_t)i].reason, FinishReason::kLength) << i;
    EXPECT_EQ(out[(size_t)i].tokens, alone[(size_t)i]) << "request " << i;
  }
  EXPECT_EQ(out[2].reason, FinishReason::kError);
  EXPECT_EQ(out[2].error_kind, ErrorKind::kOutOfMemory);
  EXPECT_NE(out[2].error.find("forward pass"), std::string::npos) << out[2].error;
  EXPECT_TRUE(out[2].tokens.empty());
  EXPECT_EQ(e->stats().num_request_faults, 1u);
  // Its prompt's blocks were never computed: the same prompt again (another max_tokens, so
  // no fault) must not hit a cached block of the failed pass, and matches the clean engine.
  GenerationRequest again = rs[2];
  again.max_tokens = 9;
  const auto clean = alone_outputs(model, {again});
  EXPECT_EQ(run_one(*e, again).tokens, clean[0]);
  expect_all_free(*e);
}

// A fault that strikes the batched pass but not the sequences alone (as a scratch allocation
// sized by the batch might): the step is rerun one sequence at a time and nobody fails.
TEST(EngineFaults, BatchedForwardThrowThatNoSequenceRepeatsAloneFailsNobody) {
  const std::string model = testutil::tiny_model_path();
  EngineConfig cfg = config_with_blocks(model, 128);
  auto calls_in_pass = std::make_shared<std::atomic<int>>(0);
  auto thrown = std::make_shared<std::atomic<bool>>(false);
  cfg.forward_fault_hook = [calls_in_pass, thrown](uint64_t, int32_t max_tokens) {
    // Throw once, in a pass where other sequences were called before the faulty one (batched);
    // the rerun of that step calls them one at a time and does not throw again.
    if (max_tokens != kFaulty) {
      calls_in_pass->fetch_add(1);
      return;
    }
    const bool batched = calls_in_pass->exchange(0) > 0;
    if (batched && !thrown->exchange(true)) throw std::runtime_error("batch scratch");
  };
  auto e = make_engine(cfg);
  ASSERT_NE(e, nullptr);
  const std::vector<GenerationRequest> rs = batch(e->model().hparams().n_vocab);
  const auto alone = alone_outputs(model, rs);
  const auto out = run_batch(*e, rs);
  EXPECT_TRUE(thrown->load()) << "the fault never struck a batched pass";
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(out[i].reason, FinishReason::kLength) << i << ": " << out[i].error;
    EXPECT_EQ(out[i].tokens, alone[i]) << "request " << i;
  }
  EXPECT_EQ(e->stats().num_request_faults, 0u);
  expect_all_free(*e);
}

// A fault inside a kernel task on a worker thread (kvw-fwd-N), not on the engine thread: the
// pool carries it to the engine thread, which fails that sequence's pass alone.
TEST(EngineFaults, KernelWorkerThrowEndsItsRequestAloneAndTheProcessLives) {
  const std::string model = testutil::tiny_model_path();
  EngineConfig cfg = config_with_blocks(model, 128);
  cfg.n_threads = 2;  // a worker thread besides the engine thread
  auto thrown = std::make_shared<std::atomic<int>>(0);
  cfg.kernel_fault_hook = [thrown](uint64_t, int32_t max_tokens) {
    if (max_tokens != kFaulty) return;
    thrown->fetch_add(1);
    throw std::bad_alloc();
  };
  auto e = make_engine(cfg);
  ASSERT_NE(e, nullptr);
  const std::vector<GenerationRequest> rs = batch(e->model().hparams().n_vocab);
  const auto alone = alone_outputs(model, rs);  // one thread: kernels reduce in a fixed order
  const auto out = run_batch(*e, rs);
  EXPECT_GT(thrown->load(), 0) << "the fault never struck a worker";
  for (int i : {0, 1, 3}) {
    EXPECT_EQ(out[(size_t)i].reason, FinishReason::kLength) << i << ": " << out[(size_t)i].error;
    EXPECT_EQ(out[(size_t)i].tokens, alone[(size_t)i]) << "request " << i;
  }
  EXPECT_EQ(out[2].reason, FinishReason::kError);
  EXPECT_EQ(out[2].error_kind, ErrorKind::kOutOfMemory);
  EXPECT_NE(out[2].error.find("forward pass"), std::string::npos) << out[2].error;
  EXPECT_EQ(e->stats().num_request_faults, 1u);
  expect_all_free(*e);
}

TEST(EngineFaults, EmissionThrowEndsThatRequestAloneWithItsBlocksFreed) {
  const std::string model = testutil::tiny_model_path();
  EngineConfig cfg = config_with_blocks(model, 128);
  auto emitted = std::make_shared<std::atomic<int>>(0);
  cfg.emit_fault_hook = [emitted](uint64_t, int32_t max_tokens) {
    if (max_tokens == kFaulty && emitted->fetch_add(1) == 3) throw std::bad_alloc();
  };
  auto e = make_engine(cfg);
  ASSERT_NE(e, nullptr);
  const std::vector<GenerationRequest> rs = batch(e->model().hparams().n_vocab);
  const auto alone = alone_outputs(model, rs);
  const auto out = run_batch(*e, rs);
  for (int i : {0, 1, 3}) EXPECT_EQ(out[(size_t)i].tokens, alone[(size_t)i]) << "request " << i;
  EXPECT_EQ(out[2].reason, FinishReason::kError);
  EXPECT_EQ(out[2].error_kind, ErrorKind::kOutOfMemory);
  EXPECT_NE(out[2].error.find("emission"), std::string::npos) << out[2].error;
  EXPECT_EQ(out[2].tokens.size(), 3u) << "the tokens before the fault, none after";
  EXPECT_EQ(e->stats().num_request_faults, 1u);
  expect_all_free(*e);
}

// An allocation failure while admitting one request (after the scheduler took it, before the
// engine's own state for it exists): that request ends with a typed out-of-memory error, the
// scheduler lets go of it, the others run exactly as alone and every block comes back.
TEST(EngineFaults, AdmissionThrowRefusesThatRequestAloneAndLeaksNoBlock) {
  const std::string model = testutil::tiny_model_path();
  EngineConfig cfg = config_with_blocks(model, 128);
  auto thrown = std::make_shared<std::atomic<int>>(0);
  cfg.admit_fault_hook = [thrown](uint64_t, int32_t max_tokens) {
    if (max_tokens != kFaulty) return;
    thrown->fetch_add(1);
    throw std::bad_alloc();
  };
  auto e = make_engine(cfg);
  ASSERT_NE(e, nullptr);
  const std::vector<GenerationRequest> rs = batch(e->model().hparams().n_vocab);
  const auto alone = alone_outputs(model, rs);
  const auto out = run_batch(*e, rs);
  EXPECT_EQ(thrown->load(), 1);
  for (int i : {0, 1, 3}) {
    EXPECT_EQ(out[(size_t)i].reason, FinishReason::kLength) << i << ": " << out[(size_t)i].error;
    EXPECT_EQ(out[(size_t)i].tokens, alone[(size_t)i]) << "request " << i;
  }
  EXPECT_EQ(out[2].reason, FinishReason::kError);
  EXPECT_EQ(out[2].error_kind, ErrorKind::kOutOfMemory);
  EXPECT_TRUE(out[2].tokens.empty());
  EXPECT_EQ(e->stats().num_request_faults, 1u);
  // The engine goes on admitting: the same request without the fault runs as on a clean engine.
  GenerationRequest again = rs[2];
  again.max_tokens = 9;
  EXPECT_EQ(run_one(*e, again).tokens, alone_outputs(model, {again})[0]);
  expect_all_free(*e);
}

}  // namespace
}  // namespace kvw
