// Tests for the workload patterns and the JSONL trace reader.
#include "kvsim/workload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace kvw::kvsim {
namespace {

TEST(Trace, ParsesRequestsAndNumbersRoundsPerConversation) {
  auto r = parse_trace(
      "{\"arrival\": 1.5, \"conversation\": 7, \"prompt_tokens\": 900, \"output_tokens\": 30}\n"
      "\n"
      "{\"arrival\": 0, \"conversation\": 7, \"prompt_tokens\": 100, \"output_tokens\": 20}\r\n"
      "{\"arrival\": 0.5, \"conversation\": 3, \"prompt_tokens\": 50, \"output_tokens\": 5}",
      "t.jsonl");
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].conversation_id, 7u);  // sorted by arrival
  EXPECT_EQ((*r)[0].prompt_tokens, 100u);
  EXPECT_EQ((*r)[0].round, 0u);
  EXPECT_EQ((*r)[1].conversation_id, 3u);
  EXPECT_EQ((*r)[2].round, 1u);
  EXPECT_DOUBLE_EQ((*r)[2].arrival_s, 1.5);
  EXPECT_EQ((*r)[2].output_tokens, 30u);
  // Rounds of one conversation share their history tokens.
  for (uint32_t p = 0; p < 100; ++p) EXPECT_EQ(token_at((*r)[0], p), token_at((*r)[2], p));
  EXPECT_NE(token_at((*r)[0], 0), token_at((*r)[1], 0));
}

TEST(Trace, ErrorsNameFileAndLine) {
  const std::string ok =
      "{\"arrival\": 0, \"conversation\": 1, \"prompt_tokens\": 5, "
      "\"output_tokens\": 5}\n";
  auto missing =
      parse_trace(ok + "\n{\"arrival\": 0, \"conversation\": 1, \"output_tokens\": 5}", "t.jsonl");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.message(), "t.jsonl:3: missing \"prompt_tokens\"");
  auto bad_json = parse_trace(ok + "{\"arrival\": 0,", "x.jsonl");
  ASSERT_FALSE(bad_json.ok());
  EXPECT_EQ(bad_json.message(), "x.jsonl:2: not valid JSON");
  auto neg = parse_trace(
      "{\"arrival\": -1, \"conversation\": 1, \"prompt_tokens\": 5, "
      "\"output_tokens\": 5}",
      "n.jsonl");
  EXPECT_EQ(neg.message(), "n.jsonl:1: \"arrival\" must be >= 0");
  auto zero = parse_trace(
      "{\"arrival\": 1, \"conversation\": 1, \"prompt_tokens\": 5, "
      "\"output_tokens\": 0}",
      "z.jsonl");
  EXPECT_EQ(zero.message(), "z.jsonl:1: \"output_tokens\" must be in [1, 16M]");
  auto str = parse_trace(
      "{\"arrival\": 1, \"conversation\": \"a\", \"prompt_tokens\": 5, "
      "\"output_tokens\": 1}",
      "s.jsonl");
  EXPECT_EQ(str.message(), "s.jsonl:1: \"conversation\" is not a number");
  EXPECT_EQ(parse_trace("[1, 2]", "a.jsonl").message(), "a.jsonl:1: expected a JSON object");
  auto file = read_trace_file("/nonexistent/dir/trace.jsonl");
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.message().find("/nonexistent/dir/trace.jsonl"), std::string::npos);
}

TEST(Workload, MultiturnHas15To20RoundsGrowingPast8k) {
  WorkloadSpec spec{.pattern = Pattern::kMultiturn, .seed = 5, .num_requests = 6};
  const auto reqs = generate_workload(spec);
  std::map<uint64_t, std::vector<SimRequest>> convs;
  for (const auto& r : reqs) convs[r.conversation_id].push_back(r);
  ASSERT_EQ(convs.size(), 6u);
  for (auto& [id, rounds] : convs) {
    std::sort(rounds.begin(), rounds.end(),
              [](const auto& a, const auto& b) { return a.round < b.round; });
    EXPECT_GE(rounds.size(), 15u);
    EXPECT_LE(rounds.size(), 20u);
    EXPECT_FALSE(rounds[0].follow_previous);
    for (size_t k = 1; k < rounds.size(); ++k) {
      EXPECT_TRUE(rounds[k].follow_previous);
      // Each round re-sends the previous prompt and reply, plus a new turn.
      EXPECT_GT(rounds[k].prompt_tokens, rounds[k - 1].prompt_tokens + rounds[k - 1].output_tokens);
    }
    EXPECT_GT(rounds.back().prompt_tokens, 8192u);
    EXPECT_LE(rounds.back().prompt_tokens + rounds.back().output_tokens, spec.max_model_len);
  }
}

TEST(Workload, BurstArrivesTogetherAndIsDeterministic) {
  WorkloadSpec spec{.pattern = Pattern::kBurst, .seed = 9, .num_requests = 40, .burst_size = 20};
  const auto a = generate_workload(spec);
  const auto b = generate_workload(spec);
  ASSERT_EQ(a.size(), 40u);
  EXPECT_EQ(std::count_if(a.begin(), a.end(), [](const auto& r) { return r.arrival_s == 0; }), 20);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt_tokens, b[i].prompt_tokens);
    EXPECT_EQ(a[i].output_tokens, b[i].output_tokens);
    EXPECT_EQ(a[i].arrival_s, b[i].arrival_s);
  }
  spec.seed = 10;
  const auto c = generate_workload(spec);
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) differs |= a[i].prompt_tokens != c[i].prompt_tokens;
  EXPECT_TRUE(differs);
}

TEST(Workload, SharedPrefixGroupsShareLeadingTokensOnly) {
  WorkloadSpec spec{.pattern = Pattern::kSharedPrefix,
                    .num_requests = 8,
                    .num_groups = 2,
                    .group_prefix_tokens = 64};
  const auto reqs = generate_workload(spec);
  ASSERT_EQ(reqs.size(), 8u);
  const SimRequest* first[3] = {nullptr, nullptr, nullptr};
  for (const auto& r : reqs) {
    ASSERT_EQ(r.shared_prefix_tokens, 64u);
    ASSERT_GE(r.prompt_tokens, 64u);
    if (!first[r.prefix_group]) {
      first[r.prefix_group] = &r;
      continue;
    }
    const SimRequest& f = *first[r.prefix_group];
    for (uint32_t p = 0; p < 64; ++p) ASSERT_EQ(token_at(r, p), token_at(f, p));
    EXPECT_NE(token_at(r, 64), token_at(f, 64));
  }
  EXPECT_NE(token_at(*first[1], 0), token_at(*first[2], 0));
}

TEST(Workload, PoissonArrivalsIncreaseAtAboutTheRate) {
  WorkloadSpec spec{.pattern = Pattern::kPoisson, .num_requests = 400, .rate_per_s = 8};
  const auto reqs = generate_workload(spec);
  ASSERT_EQ(reqs.size(), 400u);
  for (size_t i = 1; i < reqs.size(); ++i) EXPECT_GE(reqs[i].arrival_s, reqs[i - 1].arrival_s);
  EXPECT_NEAR(reqs.back().arrival_s, 400.0 / 8, 10.0);  // mean 50 s, sd 2.5 s
}

TEST(Workload, ParsePatternRejectsUnknownNames) {
  EXPECT_EQ(parse_pattern("shared-prefix").value(), Pattern::kSharedPrefix);
  auto bad = parse_pattern("bursty");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("bursty"), std::string::npos);
}

}  // namespace
}  // namespace kvw::kvsim
