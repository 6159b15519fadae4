// What a generation request is charged for holding (request_holdings.h): the request's own
// copies once, per-choice state n times, the answer only when not streamed; the field bounds
// refuse with 400 naming the field; the per-record and per-choice constants cover the types
// they stand for.
#include "server/request_holdings.h"

#include <gtest/gtest.h>

#include "core/turn_starts.h"
#include "server/choice_runner.h"

namespace kvw::server {
namespace {

GenParams params(int n, bool stream, int logprobs) {
  GenParams p;
  p.n = n;
  p.stream = stream;
  p.logprobs = logprobs;
  for (int i = 0; i < 16; ++i) p.stop.push_back(std::string(256, 'a' + i));
  std::vector<LogitBias::Entry> bias;
  for (int i = 0; i < 100; ++i) bias.emplace_back(i, 1.0f);
  p.logit_bias = LogitBias(std::move(bias));
  return p;
}

const PromptShape kPrompt{.num_tokens = 1000, .max_tokens = 200};

TEST(RequestHoldings, SharedCopiesAreChargedOncePerChoiceStateNTimes) {
  const HoldingLimits lim{.max_token_bytes = 16};
  const Holdings one = request_holdings(params(1, true, -1), std::span(&kPrompt, 1), lim);
  const Holdings sixteen = request_holdings(params(16, true, -1), std::span(&kPrompt, 1), lim);
  EXPECT_EQ(one.shared, sixteen.shared) << "stop strings, logit_bias, prompt ids: one copy";
  EXPECT_GE(one.shared, 16u * 256 + 100 * 8 + 4 * 1000);
  EXPECT_EQ(sixteen.choices, 16 * one.choices);
  // A choice: the engine's output ids, token times, the stop hold-back; the logit_bias list
  // (model/logit_bias.h) and the prompt ids (core/token_list.h) are shared, not a choice's.
  EXPECT_GE(one.choices, 4u * 200 + 8 * 200 + 256);
  EXPECT_EQ(one.answer, 0u) << "a streamed answer's chunks are the stream buffer's";
}

// logit_bias is one list shared by the request and every choice's sampler (model/logit_bias.h):
// 1,024 entries cost 8 KiB once for n = 64 as for n = 1, and copies (GenParams -> GenSampling
// -> SamplingParams) share it rather than copy it.
TEST(RequestHoldings, LogitBiasIsChargedOnceWhateverTheNumberOfChoices) {
  const HoldingLimits lim{.max_token_bytes = 16};
  std::vector<LogitBias::Entry> entries;
  for (int i = 0; i < 1024; ++i) entries.emplace_back(i, 1.0f);
  auto cost_of_bias = [&](int n) {
    GenParams with = params(n, true, -1);
    with.logit_bias = LogitBias(entries);
    GenParams without = params(n, true, -1);
    without.logit_bias = LogitBias();
    return request_holdings(with, std::span(&kPrompt, 1), lim).total() -
           request_holdings(without, std::span(&kPrompt, 1), lim).total();
  };
  EXPECT_EQ(cost_of_bias(64), cost_of_bias(1));
  EXPECT_GE(cost_of_bias(1), 1024u * 8);
  EXPECT_LT(cost_of_bias(1), 1024u * 8 + 1024);
  const LogitBias list(entries);
  const LogitBias per_choice = list;  // what each choice's sampler keeps
  EXPECT_TRUE(per_choice.shares_with(list));
  EXPECT_EQ(per_choice.size(), 1024u);
}

// The prompt's ids are one TokenList shared by its choices down to the scheduler's Requests
// (engine_shared_prompt_test checks the engine keeps that one copy): n = 64 with a 32k-token
// prompt is charged one prompt copy (with its block hashes), not 64.
TEST(RequestHoldings, PromptIsChargedOncePerPromptNotPerChoice) {
  const HoldingLimits lim{.max_token_bytes = 16};
  const PromptShape long_prompt{.num_tokens = 32000, .max_tokens = 16};
  const uint64_t prompt_bytes = 4 * 32000;
  GenParams p1 = params(1, true, -1), p64 = params(64, true, -1);
  const Holdings one = request_holdings(p1, std::span(&long_prompt, 1), lim);
  const Holdings many = request_holdings(p64, std::span(&long_prompt, 1), lim);
  EXPECT_GE(one.total(), prompt_bytes) << "the prompt is charged";
  // 63 more choices cost their own state (~2.5 KiB each), not 63 more prompt copies (8 MB).
  EXPECT_LT(many.total() - one.total(), 63 * (kChoiceFixedBytes + 1024));
  EXPECT_LT(many.total(), 3 * prompt_bytes + 64 * (kChoiceFixedBytes + 1024));
  const TokenList ids(std::vector<int32_t>(32000, 7));
  const TokenList per_choice = ids;  // what GenerationRequest::prompt keeps per choice
  EXPECT_TRUE(per_choice.shares_with(ids));
}

// A chat prompt's turn offsets are one list shared by its choices (core/turn_starts.h): 10,000
// offsets cost 80 KB once for n = 64 as for n = 1.
TEST(RequestHoldings, TurnOffsetsAreChargedOncePerPromptNotPerChoice) {
  const HoldingLimits lim{.max_token_bytes = 16};
  auto cost_of_turns = [&](int n) {
    const PromptShape with{.num_tokens = 20000, .num_turn_starts = 10000, .max_tokens = 16};
    const PromptShape without{.num_tokens = 20000, .num_turn_starts = 0, .max_tokens = 16};
    const GenParams p = params(n, true, -1);
    return request_holdings(p, std::span(&with, 1), lim).total() -
           request_holdings(p, std::span(&without, 1), lim).total();
  };
  EXPECT_EQ(cost_of_turns(64), cost_of_turns(1));
  EXPECT_GE(cost_of_turns(1), 8u * 10000);
  const TurnStarts turns(std::vector<int64_t>(10000, 0));
  const TurnStarts per_choice = turns;  // what GenerationRequest::turn_starts keeps per choice
  EXPECT_TRUE(per_choice.shares_with(turns));
}

TEST(RequestHoldings, NonStreamedAnswersChargeTextRecordsAndTheirLargestPart) {
  const HoldingLimits lim{.max_token_bytes = 16};
  const Holdings plain = request_holdings(params(4, false, -1), std::span(&kPrompt, 1), lim);
  const Holdings lp = request_holdings(params(4, false, 20), std::span(&kPrompt, 1), lim);
  EXPECT_GE(plain.answer, 4u * 200 * 16) << "the text of every choice";
  EXPECT_GE(lp.answer - plain.answer,
            4u * 200 * (kTokenRecordBytes + 20 * kTopLogprobBytes) - 2 * 6 * 200 * 16)
      << "the records of every choice";
  EXPECT_EQ(plain.choices, lp.choices);
}

// The part being written holds at most 256 tokens' logprobs JSON, and never more tokens than
// one choice can have: a one-token answer reserves one token's worth (~5 KiB at top 20 with
// 16-byte tokens, written and copied), not 256 tokens' (~2.7 MiB).
TEST(RequestHoldings, LogprobPartIsSizedByTheTokensAChoiceCanHave) {
  const HoldingLimits lim{.max_token_bytes = 16};
  auto answer = [&](int64_t max_tokens, int logprobs, bool echo = false) {
    GenParams p = params(1, false, logprobs);
    p.echo = echo;
    const PromptShape shape{.num_tokens = 1000, .max_tokens = max_tokens};
    return request_holdings(p, std::span(&shape, 1), lim).answer;
  };
  // The answer is the text (16 B a token), the records, and twice the part being written.
  const uint64_t per_record = kTokenRecordBytes + 20 * kTopLogprobBytes;
  auto part = [&](int64_t max_tokens, bool echo = false) {
    return answer(max_tokens, 20, echo) - (uint64_t)max_tokens * (16 + per_record);
  };
  EXPECT_LT(part(1), 16u << 10);
  EXPECT_GT(part(1), 2u * 21 * 16) << "one token and its 20 alternatives, twice";
  // The part stops growing at 256 tokens (the records still grow).
  EXPECT_GT(part(256), 128 * part(1));
  EXPECT_EQ(part(1000), part(256));
  // Echo puts the 1000 prompt tokens in the columns too: a full part even for one token.
  EXPECT_EQ(part(1, true), part(256));
}

// repetition_penalty keeps each choice's distinct tokens, at most min(n_vocab, prompt +
// max_tokens) ids (model/seen_tokens.h); stop_token_ids are one list, copied per choice into its
// ban list only with min_tokens.
TEST(RequestHoldings, SeenTokensAndStopTokenIdsAreCharged) {
  const HoldingLimits lim{.max_token_bytes = 16, .n_vocab = 32000};
  GenParams p = params(4, true, -1);
  const uint64_t base = request_holdings(p, std::span(&kPrompt, 1), lim).total();
  p.repetition_penalty = 1.1f;
  EXPECT_EQ(request_holdings(p, std::span(&kPrompt, 1), lim).total() - base, 4u * 4 * 1200);
  const HoldingLimits small_vocab{.max_token_bytes = 16, .n_vocab = 500};
  EXPECT_EQ(request_holdings(p, std::span(&kPrompt, 1), small_vocab).total() -
                request_holdings(params(4, true, -1), std::span(&kPrompt, 1), small_vocab).total(),
            4u * 4 * 500);
  p = params(4, true, -1);
  p.stop_token_ids = std::make_shared<const std::vector<int32_t>>(100, 0);
  const uint64_t with_ids = request_holdings(p, std::span(&kPrompt, 1), lim).total();
  EXPECT_GE(with_ids - base, 400u);
  p.min_tokens = 5;
  EXPECT_GE(request_holdings(p, std::span(&kPrompt, 1), lim).total() - with_ids, 4u * 400);
}

TEST(RequestHoldings, ConstantsCoverTheTypesTheyStandFor) {
  // A record is a TokenInfo in a vector plus its top vector's heap chunk header.
  EXPECT_LE(sizeof(TokenInfo) + 16, kTokenRecordBytes);
  EXPECT_LE(sizeof(TokenLogprob), kTopLogprobBytes);
  EXPECT_LE(sizeof(ChoiceRunner) + sizeof(TokenChannel) + sizeof(ChoiceDelta), kChoiceFixedBytes);
}

TEST(RequestHoldings, FieldBoundsRefuseNamingTheField) {
  GenParams p;
  p.stop = {std::string(kMaxStopBytes, 's')};
  EXPECT_FALSE(check_field_bounds(p, 1));
  p.stop.push_back("s");
  auto e = check_field_bounds(p, 1);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "stop");

  p = GenParams{};
  std::vector<LogitBias::Entry> bias;
  for (size_t i = 0; i < kMaxLogitBiasEntries; ++i) bias.emplace_back((int32_t)i, 1.0f);
  p.logit_bias = LogitBias(bias);
  EXPECT_FALSE(check_field_bounds(p, 1));
  bias.emplace_back((int32_t)kMaxLogitBiasEntries, 1.0f);
  p.logit_bias = LogitBias(bias);
  e = check_field_bounds(p, 1);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "logit_bias");

  p = GenParams{};
  std::vector<int32_t> ids(kMaxStopTokenIds);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = (int32_t)i;
  p.stop_token_ids = std::make_shared<const std::vector<int32_t>>(ids);
  EXPECT_FALSE(check_field_bounds(p, 1));
  ids.push_back((int32_t)kMaxStopTokenIds);
  p.stop_token_ids = std::make_shared<const std::vector<int32_t>>(ids);
  e = check_field_bounds(p, 1);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "stop_token_ids");

  // n x max_tokens x (1 + top) over the prompts.
  p = GenParams{};
  p.n = 16;
  p.logprobs = 20;
  p.max_tokens = (int32_t)(kMaxLogprobRecords / (16 * 21 * 4));
  EXPECT_FALSE(check_field_bounds(p, 4));
  *p.max_tokens += 1;
  e = check_field_bounds(p, 4);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "n");
  const std::vector<PromptShape> shapes(4, PromptShape{.max_tokens = *p.max_tokens});
  EXPECT_TRUE(check_logprob_records(p, shapes));
  p.logprobs = -1;  // no logprobs: no records
  EXPECT_FALSE(check_logprob_records(p, shapes));
}

}  // namespace
}  // namespace kvw::server
