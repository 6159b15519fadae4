// One prompt copy for n choices (issue 30): the choices of one prompt are submitted with copies
// of one TokenList, and the engine keeps that list from the queue to the scheduler's Request
// instead of copying the ids per choice; outputs are unchanged, including when a recompute after
// preemption runs across the end of the shared prompt into a choice's own outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "engine/engine.h"
#include "engine_test_util.h"

namespace kvw {
namespace {

using testutil::config_with_blocks;
using testutil::expect_all_free;
using testutil::greedy;
using testutil::make_engine;

TEST(EngineSharedPrompt, SixtyFourChoicesHoldOnePromptCopyAndDecodeAsOne) {
  constexpr int kChoices = 64;
  const std::string model = testutil::tiny_model_path();
  EngineConfig cfg = config_with_blocks(model, 256);
  // Holders of the prompt's one copy seen after a step: the test's own plus one per Request the
  // scheduler keeps. A per-choice copy of the ids would leave the test's alone. The first step
  // waits (uncounted: the queue's requests hold the list too) until every choice is submitted,
  // so the next admits all 64 at once, and a 300-token prefill keeps any from ending in it.
  auto gate = std::make_shared<std::atomic<bool>>(true);
  auto most_holders = std::make_shared<std::atomic<long>>(0);
  auto most_turn_holders = std::make_shared<std::atomic<long>>(0);
  auto prompt = std::make_shared<TokenList>();
  // A chat's turn offsets ride along the same way (sliding-window needs them; shared too).
  auto turns = std::make_shared<TurnStarts>(TurnStarts{0, 100, 200});
  cfg.step_observer = [gate, most_holders, most_turn_holders, prompt,
                       turns](const StepObservation&) {  // engine thread
    if (gate->load()) {
      while (gate->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    most_holders->store(std::max(most_holders->load(), prompt->use_count()));
    most_turn_holders->store(std::max(most_turn_holders->load(), turns->use_count()));
  };
  auto e = make_engine(cfg);
  ASSERT_NE(e, nullptr);
  *prompt = TokenList(testutil::prompt(5, 300, e->model().hparams().n_vocab));
  auto alone = e->submit(greedy(prompt->to_vector(), 6));  // its own copy; holds the first step
  ASSERT_TRUE(alone.ok()) << alone.message();
  std::vector<std::shared_ptr<TokenChannel>> chs;
  for (int i = 0; i < kChoices; ++i) {
    GenerationRequest r = greedy({}, 6);
    r.prompt = *prompt;  // shares, as the server's make_request does
    r.turn_starts = *turns;
    auto ch = e->submit(std::move(r));
    if (!ch.ok()) {
      ADD_FAILURE() << ch.message();
      break;
    }
    chs.push_back(*ch);
  }
  gate->store(false);  // before any ASSERT: the engine thread waits for it
  ASSERT_EQ(chs.size(), (size_t)kChoices);
  const auto want = (*alone)->collect().tokens;
  for (int i = 0; i < kChoices; ++i) {
    const TokenChannel::Collected c = chs[(size_t)i]->collect();
    EXPECT_EQ(c.reason, FinishReason::kLength) << i << ": " << c.error;
    EXPECT_EQ(c.tokens, want) << "choice " << i;
  }
  EXPECT_EQ(most_holders->load(), 1 + kChoices) << "each choice's Request held the one copy";
  EXPECT_EQ(most_turn_holders->load(), 1 + kChoices) << "and the one copy of the turn offsets";
  expect_all_free(*e);
  EXPECT_EQ(prompt->use_count(), 1) << "every choice let go of the prompt";
  EXPECT_EQ(turns->use_count(), 1) << "and of the turn offsets";
}

// 12 blocks for 4 sequences that each need 5: running ones are preempted and recomputed, and a
// recompute's chunk runs from the shared prompt into the choice's own outputs (the engine copies
// that chunk). Sampled choices differ, so their outputs after the prompt differ too.
TEST(EngineSharedPrompt, RecomputeAcrossTheSharedPromptsEndMatchesTheSameWithoutSharing) {
  const std::string model = testutil::tiny_model_path();
  auto run = [&](bool share) {
    EngineConfig cfg = config_with_blocks(model, 12);
    cfg.enable_prefix_caching = false;  // real recomputation
    auto e = make_engine(cfg);
    EXPECT_NE(e, nullptr);
    const TokenList p(testutil::prompt(9, 40, e->model().hparams().n_vocab));
    std::vector<std::shared_ptr<TokenChannel>> chs;
    for (uint64_t i = 0; i < 4; ++i) {
      GenerationRequest r = greedy({}, 36, GenSampling{.temperature = 0.8f, .seed = 100 + i});
      r.prompt = share ? p : TokenList(p.to_vector());
      auto ch = e->submit(std::move(r));
      EXPECT_TRUE(ch.ok()) << ch.message();
      chs.push_back(*ch);
    }
    std::vector<std::vector<int32_t>> out;
    for (auto& ch : chs) out.push_back(ch->collect().tokens);
    EXPECT_GT(e->stats().num_preemptions, 0u) << "nothing was recomputed";
    expect_all_free(*e);
    return out;
  };
  const auto shared = run(true);
  EXPECT_EQ(shared, run(false));
  EXPECT_NE(shared[0], shared[1]) << "sampled choices should differ";
}

}  // namespace
}  // namespace kvw
