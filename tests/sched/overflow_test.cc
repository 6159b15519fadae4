// Context overflow (issue 4, section 4): error, truncate-left and sliding-window, as pure
// functions and through Scheduler::add_request.
#include <gtest/gtest.h>

#include <algorithm>

#include "sched/context_overflow.h"
#include "sched_test_util.h"

namespace kvw {
namespace {

using test::Harness;
using test::tokens;

TEST(ContextOverflow, FittingPromptIsUnchangedUnderEveryPolicy) {
  const std::vector<int32_t> p = tokens(10, 0);
  for (OverflowPolicy pol :
       {OverflowPolicy::kError, OverflowPolicy::kTruncateLeft, OverflowPolicy::kSlidingWindow}) {
    Result<FittedPrompt> f = fit_prompt(p, {}, 10, 11, pol);
    ASSERT_TRUE(f.ok()) << f.message();
    EXPECT_EQ(f->tokens, p);
    EXPECT_EQ(f->num_dropped_tokens, 0);
  }
}

TEST(ContextOverflow, ErrorPolicyRejectsWithTheNumbers) {
  Result<FittedPrompt> f = fit_prompt(tokens(20, 0), {}, 15, 16, OverflowPolicy::kError);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("prompt has 20 tokens, limit 15"), std::string::npos) << f.message();
  EXPECT_NE(f.message().find("max_model_len 16"), std::string::npos);
}

TEST(ContextOverflow, TruncateLeftKeepsTheNewestTokens) {
  const std::vector<int64_t> turns = {0, 5, 12};
  Result<FittedPrompt> f = fit_prompt(tokens(20, 0), turns, 15, 16, OverflowPolicy::kTruncateLeft);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->tokens, tokens(15, 5));
  EXPECT_EQ(f->num_dropped_tokens, 5);
  EXPECT_EQ(f->turn_starts, (std::vector<int64_t>{0, 7}));
}

TEST(ContextOverflow, SlidingWindowKeepsSystemPromptAndNewestWholeTurns) {
  // Turns: system [0,4), t1 [4,14), t2 [14,20), t3 [20,26). Limit 17: system 4 + t3 6 + t2 6 =
  // 16 fits, adding t1 (10) does not; never a partial t1.
  const std::vector<int32_t> p = tokens(26, 0);
  const std::vector<int64_t> turns = {0, 4, 14, 20};
  Result<FittedPrompt> f = fit_prompt(p, turns, 17, 18, OverflowPolicy::kSlidingWindow);
  ASSERT_TRUE(f.ok()) << f.message();
  std::vector<int32_t> want = tokens(4, 0);
  const std::vector<int32_t> tail = tokens(12, 14);
  want.insert(want.end(), tail.begin(), tail.end());
  EXPECT_EQ(f->tokens, want);
  EXPECT_EQ(f->turn_starts, (std::vector<int64_t>{0, 4, 10}));
  EXPECT_EQ(f->num_dropped_tokens, 10);
}

TEST(ContextOverflow, SlidingWindowFailsWithoutTurnsOrWhenTheLastTurnCannotFit) {
  const std::vector<int32_t> p = tokens(26, 0);
  Result<FittedPrompt> no_turns = fit_prompt(p, {}, 17, 18, OverflowPolicy::kSlidingWindow);
  ASSERT_FALSE(no_turns.ok());
  EXPECT_NE(no_turns.message().find("turn boundaries"), std::string::npos);
  const std::vector<int64_t> turns = {0, 4, 6};  // last turn has 20 tokens
  Result<FittedPrompt> too_big = fit_prompt(p, turns, 17, 18, OverflowPolicy::kSlidingWindow);
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.message().find("last turn"), std::string::npos);
  const std::vector<int64_t> bad = {0, 9, 9};
  EXPECT_FALSE(fit_prompt(p, bad, 17, 18, OverflowPolicy::kSlidingWindow).ok());
}

TEST(ContextOverflow, ParsesFlagValues) {
  EXPECT_EQ(parse_overflow_policy("truncate-left").value(), OverflowPolicy::kTruncateLeft);
  EXPECT_EQ(parse_overflow_policy("sliding-window").value(), OverflowPolicy::kSlidingWindow);
  EXPECT_EQ(parse_overflow_policy("error").value(), OverflowPolicy::kError);
  EXPECT_FALSE(parse_overflow_policy("drop").ok());
  EXPECT_EQ(parse_kv_reserve_policy("p95").value(), KvReservePolicy::kP95);
  EXPECT_FALSE(parse_kv_reserve_policy("p99").ok());
  EXPECT_EQ(parse_preemption_mode("recompute").value(), PreemptionMode::kRecompute);
  EXPECT_EQ(parse_preemption_mode("swap").value(), PreemptionMode::kSwap);
  EXPECT_FALSE(parse_preemption_mode("drop").ok());
}

KvManagerConfig small_kv() {
  return KvManagerConfig{.num_blocks = 32, .block_size = 16};
}

TEST(ContextOverflow, AddRequestAppliesThePolicy) {
  {
    Harness h(small_kv(), SchedConfig{.max_num_batched_tokens = 64, .max_model_len = 32});
    const Status st = h.sched.add_request(RequestInput{.id = SeqId{1}, .prompt = tokens(40, 0)});
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("request 1: prompt has 40 tokens, limit 31"), std::string::npos)
        << st.message();
    EXPECT_EQ(h.sched.counters().num_rejected, 1u);
    EXPECT_FALSE(h.sched.has_unfinished());
  }
  {
    Harness h(small_kv(), SchedConfig{.max_num_batched_tokens = 64,
                                      .max_model_len = 32,
                                      .overflow = OverflowPolicy::kTruncateLeft});
    h.add(1, tokens(40, 0), 4);
    const Request* r = h.sched.find(SeqId{1});
    EXPECT_EQ(std::vector<int32_t>(r->prompt().begin(), r->prompt().end()), tokens(31, 9));
    EXPECT_EQ(r->num_dropped_prompt_tokens, 9);
    EXPECT_EQ(h.sched.counters().num_truncated, 1u);
    h.run_to_completion();
    EXPECT_EQ(h.reason_of(1), FinishReason::kLength);  // 31 + 1 reaches max_model_len 32
  }
  {
    Harness h(small_kv(), SchedConfig{.max_num_batched_tokens = 64,
                                      .max_model_len = 32,
                                      .overflow = OverflowPolicy::kSlidingWindow});
    const Status st = h.sched.add_request(RequestInput{
        .id = SeqId{1}, .prompt = tokens(40, 0), .max_tokens = 4, .turn_starts = {0, 8, 20, 30}});
    ASSERT_TRUE(st.ok()) << st.message();
    const Request* r = h.sched.find(SeqId{1});
    // system [0,8) + turns [20,30) and [30,40): 28 <= 31; turn [8,20) dropped whole.
    EXPECT_EQ(r->num_prompt_tokens, 28);
    EXPECT_EQ(r->turn_starts, (std::vector<int64_t>{0, 8, 18}));
    EXPECT_EQ(r->tokens()[8], 20);
  }
}

// Issue 30: the n choices of one prompt are n Requests holding one copy of its ids and of its
// block hashes, and under truncate-left one shortened copy; equal ids in another list are not
// taken for the same prompt.
TEST(ContextOverflow, ChoicesOfOnePromptShareItsIdsHashesAndShortenedCopy) {
  {
    Harness h(small_kv(), SchedConfig{.max_num_batched_tokens = 64, .max_model_len = 64});
    const TokenList p(tokens(40, 0));
    for (uint64_t id : {1, 2}) {
      ASSERT_TRUE(
          h.sched.add_request(RequestInput{.id = SeqId{id}, .prompt = p, .max_tokens = 4}).ok());
    }
    ASSERT_TRUE(h.sched
                    .add_request(RequestInput{
                        .id = SeqId{3}, .prompt = TokenList(tokens(40, 0)), .max_tokens = 4})
                    .ok());
    const Request* a = h.sched.find(SeqId{1});
    const Request* b = h.sched.find(SeqId{2});
    const Request* c = h.sched.find(SeqId{3});
    EXPECT_EQ(a->prompt().data(), p.data());
    EXPECT_EQ(b->prompt().data(), p.data());
    EXPECT_NE(c->prompt().data(), p.data());
    ASSERT_EQ(a->prompt_hashes().size(), 2u);  // 40 tokens: two full blocks of 16
    EXPECT_EQ(a->prompt_hashes().data(), b->prompt_hashes().data());
    EXPECT_NE(a->prompt_hashes().data(), c->prompt_hashes().data());
    EXPECT_TRUE(std::ranges::equal(a->prompt_hashes(), c->prompt_hashes()));
    h.run_to_completion();
    for (uint64_t id : {1, 2, 3}) EXPECT_EQ(h.reason_of(id), FinishReason::kLength) << id;
  }
  {
    Harness h(small_kv(), SchedConfig{.max_num_batched_tokens = 64,
                                      .max_model_len = 32,
                                      .overflow = OverflowPolicy::kTruncateLeft});
    const TokenList p(tokens(40, 0));
    for (uint64_t id : {1, 2}) {
      ASSERT_TRUE(
          h.sched.add_request(RequestInput{.id = SeqId{id}, .prompt = p, .max_tokens = 4}).ok());
    }
    const Request* a = h.sched.find(SeqId{1});
    const Request* b = h.sched.find(SeqId{2});
    EXPECT_EQ(std::vector<int32_t>(a->prompt().begin(), a->prompt().end()), tokens(31, 9));
    EXPECT_EQ(a->prompt().data(), b->prompt().data()) << "one shortened copy for both";
    EXPECT_EQ(b->num_dropped_prompt_tokens, 9);
    EXPECT_EQ(h.sched.counters().num_truncated, 2u);
  }
}

// Issue 30: a chat prompt's turn offsets are one list for its n = 64 choices too, whether the
// prompt fits (the input's list is kept) or sliding-window shortens it (one shortened list).
TEST(ContextOverflow, SixtyFourChoicesShareOneCopyOfTheTurnOffsets) {
  for (const int64_t max_model_len : {64, 32}) {
    Harness h(small_kv(), SchedConfig{.max_num_batched_tokens = 64,
                                      .max_num_seqs = 64,
                                      .max_model_len = max_model_len,
                                      .overflow = OverflowPolicy::kSlidingWindow});
    const TokenList p(tokens(40, 0));
    const TurnStarts turns{0, 8, 20, 30};
    for (uint64_t id = 1; id <= 64; ++id) {
      const Status st = h.sched.add_request(
          RequestInput{.id = SeqId{id}, .prompt = p, .max_tokens = 4, .turn_starts = turns});
      ASSERT_TRUE(st.ok()) << st.message();
    }
    const Request* first = h.sched.find(SeqId{1});
    const std::vector<int64_t> want =
        max_model_len == 64 ? std::vector<int64_t>{0, 8, 20, 30} : std::vector<int64_t>{0, 8, 18};
    EXPECT_TRUE(first->turn_starts == want);
    for (uint64_t id = 2; id <= 64; ++id) {
      EXPECT_TRUE(h.sched.find(SeqId{id})->turn_starts.shares_with(first->turn_starts))
          << "choice " << id << " at max_model_len " << max_model_len;
    }
    EXPECT_EQ(first->turn_starts.use_count(), max_model_len == 64 ? 65 : 64);
  }
}

}  // namespace
}  // namespace kvw
