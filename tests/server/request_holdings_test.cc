// What a generation request is charged for holding (request_holdings.h): the request's own
// copies once, per-choice state n times, the answer only when not streamed; the field bounds
// refuse with 400 naming the field; the per-record and per-choice constants cover the types
// they stand for.
#include "server/request_holdings.h"

#include <gtest/gtest.h>

#include "server/choice_runner.h"

namespace kvw::server {
namespace {

GenParams params(int n, bool stream, int logprobs) {
  GenParams p;
  p.n = n;
  p.stream = stream;
  p.logprobs = logprobs;
  for (int i = 0; i < 16; ++i) p.stop.push_back(std::string(256, 'a' + i));
  for (int i = 0; i < 100; ++i) p.logit_bias.emplace_back(i, 1.0f);
  return p;
}

const PromptShape kPrompt{.num_tokens = 1000, .max_tokens = 200};

TEST(RequestHoldings, SharedCopiesAreChargedOncePerChoiceStateNTimes) {
  const HoldingLimits lim{.max_token_bytes = 16};
  const Holdings one = request_holdings(params(1, true, -1), std::span(&kPrompt, 1), lim);
  const Holdings sixteen = request_holdings(params(16, true, -1), std::span(&kPrompt, 1), lim);
  EXPECT_EQ(one.shared, sixteen.shared) << "stop strings and logit_bias: one copy";
  EXPECT_GE(one.shared, 16u * 256 + 100 * 8);
  EXPECT_EQ(sixteen.choices, 16 * one.choices);
  // A choice: the engine's prompt, bias and output copies, token times, the stop hold-back.
  EXPECT_GE(one.choices, 4u * 1000 + 8 * 100 + 4 * 200 + 8 * 200 + 256);
  EXPECT_EQ(one.answer, 0u) << "a streamed answer's chunks are the stream buffer's";
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
  for (size_t i = 0; i < kMaxLogitBiasEntries; ++i) p.logit_bias.emplace_back((int32_t)i, 1.0f);
  EXPECT_FALSE(check_field_bounds(p, 1));
  p.logit_bias.emplace_back((int32_t)kMaxLogitBiasEntries, 1.0f);
  e = check_field_bounds(p, 1);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "logit_bias");

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
