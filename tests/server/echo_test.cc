// /v1/completions completeness (issue 31, item 3): echo with prompt logprobs (vLLM's shapes,
// checked against an independent teacher-forced forward), echo with max_tokens 0, echo
// streamed, vLLM's prompt_logprobs, best_of (the highest cumulative logprob wins) and the
// refusals, and the request memory prompt logprobs are charged.
#include <chrono>
#include <cmath>
#include <map>

#include "../model/teacher_forced.h"
#include "harness.h"
#include "tokenizer/utf8.h"

namespace kvw::server {
namespace {

using harness::expect_error;
using harness::Harness;
using harness::small_model;
using harness::sse_events;
using nlohmann::json;

std::vector<int32_t> prompt_ids(int len, int32_t n_vocab) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back(3 + (i * 37 + 11) % (n_vocab - 3));
  return p;
}

TEST(Echo, PromptLogprobsEqualATeacherForcedForward) {
  Harness h;
  const int32_t V = h.engine->limits().n_vocab;
  const std::vector<int32_t> ids = prompt_ids(40, V);
  const auto oracle =
      kvw::testing::teacher_forced_logprobs(small_model(), ids, 16, EngineConfig{}.kv_dtype);
  const json base = {{"prompt", ids},
                     {"max_tokens", 3},
                     {"logprobs", 2},
                     {"temperature", 0},
                     {"ignore_eos", true}};
  json plain = h.post_ok("/v1/completions", base);
  json req = base;
  req["echo"] = true;
  json r = h.post_ok("/v1/completions", req);
  const json& c = r["choices"][0];
  const std::string prompt_text = to_valid_utf8(h.engine->tokenizer().decode(ids));
  EXPECT_EQ(c["text"].get<std::string>(),
            prompt_text + plain["choices"][0]["text"].get<std::string>());
  const json& lp = c["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), ids.size() + 3) << "prompt then completion";
  ASSERT_EQ(lp["token_logprobs"].size(), ids.size() + 3);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null()) << "nothing comes before the first token";
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  for (size_t p = 1; p < ids.size(); ++p) {
    const double want = oracle[p - 1][(size_t)ids[p]];
    EXPECT_NEAR(lp["token_logprobs"][p].get<double>(), want, 1e-4) << "prompt token " << p;
    // Keyed by token text: two alternatives that print alike share a key.
    EXPECT_GE(lp["top_logprobs"][p].size(), 1u);
    EXPECT_LE(lp["top_logprobs"][p].size(), 2u);
  }
  EXPECT_EQ(lp["text_offset"][0], 0);
  for (size_t i = 1; i < lp["text_offset"].size(); ++i) {
    EXPECT_EQ(
        lp["text_offset"][i].get<size_t>(),
        lp["text_offset"][i - 1].get<size_t>() + lp["tokens"][i - 1].get<std::string>().size());
  }
  // The completion's part is what the same request without echo reports.
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(lp["tokens"][ids.size() + i], plain["choices"][0]["logprobs"]["tokens"][i]);
    EXPECT_NEAR(lp["token_logprobs"][ids.size() + i].get<double>(),
                plain["choices"][0]["logprobs"]["token_logprobs"][i].get<double>(), 1e-5);
  }
  EXPECT_EQ(r["usage"]["prompt_tokens"], ids.size());
  EXPECT_EQ(r["usage"]["completion_tokens"], 3);

  // vLLM's prompt_logprobs: [null, {"<id>": {logprob, rank, decoded_token}}, ...].
  json pl_req = base;
  pl_req["prompt_logprobs"] = 1;
  json pl = h.post_ok("/v1/completions", pl_req);
  const json& plp = pl["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(plp.size(), ids.size());
  EXPECT_TRUE(plp[0].is_null());
  for (size_t p = 1; p < ids.size(); ++p) {
    const json& e = plp[p][std::to_string(ids[p])];
    EXPECT_NEAR(e["logprob"].get<double>(), oracle[p - 1][(size_t)ids[p]], 1e-4);
    int rank = 1;
    for (double v : oracle[p - 1]) rank += v > oracle[p - 1][(size_t)ids[p]] ? 1 : 0;
    EXPECT_EQ(e["rank"], rank);
    EXPECT_LE(plp[p].size(), 2u);  // the prompt token and the top 1
  }
  EXPECT_EQ(pl["choices"][0]["text"], plain["choices"][0]["text"]) << "no echo asked";
}

TEST(Echo, MaxTokensZeroReturnsThePromptOnly) {
  Harness h;
  json r = h.post_ok(
      "/v1/completions",
      {{"prompt", "Once upon a time"}, {"echo", true}, {"max_tokens", 0}, {"logprobs", 1}});
  const json& c = r["choices"][0];
  EXPECT_EQ(c["text"], "Once upon a time");
  EXPECT_EQ(c["finish_reason"], "length");
  const auto n_prompt = r["usage"]["prompt_tokens"].get<size_t>();
  EXPECT_EQ(c["logprobs"]["tokens"].size(), n_prompt);
  EXPECT_EQ(r["usage"]["completion_tokens"], 0);
  // Without echo, 0 tokens is no request at all.
  expect_error(h.post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 0}}), 400,
               "invalid_value", "max_tokens");
}

TEST(Echo, StreamedEchoComesInTheFirstChunk) {
  Harness h;
  const json base = {{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0},
                     {"ignore_eos", true},           {"echo", true},    {"logprobs", 1}};
  json whole = h.post_ok("/v1/completions", base);
  json req = base;
  req["stream"] = true;
  auto r = h.post("/v1/completions", req);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const auto events = sse_events(r->body);
  ASSERT_GE(events.size(), 2u);
  const json first = json::parse(events[0]);
  const std::string first_text = first["choices"][0]["text"];
  EXPECT_EQ(first_text.rfind("Once upon a time", 0), 0u) << first_text;
  const auto n_prompt = whole["usage"]["prompt_tokens"].get<size_t>();
  EXPECT_GE(first["choices"][0]["logprobs"]["tokens"].size(), n_prompt);
  EXPECT_TRUE(first["choices"][0]["logprobs"]["token_logprobs"][0].is_null());
  std::string text;
  size_t num_tokens = 0;
  for (const std::string& e : events) {
    if (e == "[DONE]") break;
    const json j = json::parse(e);
    text += j["choices"][0]["text"].get<std::string>();
    if (j["choices"][0]["logprobs"].is_object()) {
      num_tokens += j["choices"][0]["logprobs"]["tokens"].size();
    }
  }
  EXPECT_EQ(text, whole["choices"][0]["text"]);
  EXPECT_EQ(num_tokens, whole["choices"][0]["logprobs"]["tokens"].size());
}

double cumulative(const json& choice) {
  double sum = 0;
  for (const json& v : choice["logprobs"]["token_logprobs"]) sum += v.get<double>();
  return sum;
}

TEST(BestOf, ReturnsTheCandidatesWithTheHighestCumulativeLogprob) {
  Harness h;
  const json base = {{"prompt", "Once upon"}, {"max_tokens", 6}, {"temperature", 1.0}, {"seed", 5},
                     {"ignore_eos", true},    {"logprobs", 0}};
  json all_req = base;
  all_req["n"] = 4;
  json all = h.post_ok("/v1/completions", all_req);  // the same 4 candidates, all shown
  ASSERT_EQ(all["choices"].size(), 4u);
  std::vector<std::pair<double, size_t>> ranked;
  for (size_t i = 0; i < 4; ++i) ranked.emplace_back(-cumulative(all["choices"][i]), i);
  std::stable_sort(ranked.begin(), ranked.end());
  ASSERT_NE(all["choices"][ranked[0].second]["text"], all["choices"][ranked[3].second]["text"])
      << "the seeds must give different candidates for this test to mean anything";

  json best_req = base;
  best_req["best_of"] = 4;
  best_req["n"] = 2;
  json best = h.post_ok("/v1/completions", best_req);
  ASSERT_EQ(best["choices"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(best["choices"][i]["index"], i);
    EXPECT_EQ(best["choices"][i]["text"], all["choices"][ranked[i].second]["text"]) << i;
  }
  EXPECT_EQ(best["usage"]["completion_tokens"], 24) << "every candidate's tokens count";

  // Without logprobs asked for, candidates are still ranked; none are reported.
  json quiet_req = best_req;
  quiet_req.erase("logprobs");
  quiet_req["n"] = 1;
  json quiet = h.post_ok("/v1/completions", quiet_req);
  EXPECT_EQ(quiet["choices"][0]["text"], all["choices"][ranked[0].second]["text"]);
  EXPECT_TRUE(quiet["choices"][0]["logprobs"].is_null());
}

TEST(BestOf, RefusalsNameTheParameter) {
  Harness h;
  expect_error(h.post("/v1/completions", {{"prompt", "x"}, {"n", 2}, {"best_of", 1}}), 400,
               "invalid_value", "best_of");
  expect_error(h.post("/v1/completions", {{"prompt", "x"}, {"best_of", 3}, {"stream", true}}), 400,
               "invalid_value", "best_of");
  expect_error(h.post("/v1/completions", {{"prompt", "x"}, {"best_of", 99}}), 400, "invalid_value",
               "best_of");
  expect_error(h.post("/v1/completions", {{"prompt", "x"}, {"suffix", "y"}}), 400, "invalid_value",
               "suffix");
  expect_error(h.post("/v1/completions", {{"prompt", "x"}, {"echo", "yes"}}), 400, "invalid_value",
               "echo");
  const json user = json::array({{{"role", "user"}, {"content", "hi"}}});
  expect_error(h.post("/v1/chat/completions", {{"messages", user}, {"echo", true}}), 400,
               "invalid_value", "echo");
  // best_of == n is plain sampling, streamed or not.
  auto r = h.post("/v1/completions",
                  {{"prompt", "x"}, {"n", 2}, {"best_of", 2}, {"stream", true}, {"max_tokens", 2}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

TEST(Echo, PromptLogprobsAreChargedToRequestMemory) {
  ServerConfig scfg;
  // The request's holdings without echo are ~185 KB here (a non-streamed answer with logprobs
  // sets aside two parts of kTokensPerPart records: request_holdings.h).
  scfg.http.request_memory_bytes = 256u << 10;
  scfg.http.reserve_fixed_bytes = 16u << 10;
  scfg.http.max_body_bytes = 16u << 10;  // reservation(max body) must fit the budget
  Harness h(scfg);
  const int32_t V = h.engine->limits().n_vocab;
  const std::vector<int32_t> ids = prompt_ids(400, V);
  // 400 tokens x 20 alternatives, kept twice: ~160 KB, with the holdings more than the budget.
  expect_error(h.post("/v1/completions",
                      {{"prompt", ids}, {"echo", true}, {"logprobs", 20}, {"max_tokens", 1}}),
               400, "invalid_value", "echo");
  expect_error(
      h.post("/v1/completions",
             {{"prompt", ids}, {"prompt_logprobs", 20}, {"logprobs", 5}, {"max_tokens", 1}}),
      400, "invalid_value", "prompt_logprobs");
  // One alternative each fits: the lease grows past its body's reservation.
  json r = h.post_ok("/v1/completions",
                     {{"prompt", ids}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 1}});
  EXPECT_EQ(r["choices"][0]["logprobs"]["tokens"].size(), ids.size() + 1);
  // Given back once the answer is written (the stream may go a moment after the client read).
  EXPECT_TRUE(harness::wait_for([&] { return h.server->transport().request_memory.used == 0; }));
}

// echo with n > 1: the prompt's logprobs are the same for every candidate, so only the first
// asks the engine for them and the choices share its list. A request that owes prompt logprobs
// never takes its prompt from the prefix cache, so with one sequence at a time the second and
// third candidates now reuse the first one's cached prompt (each recomputed it before), and
// every choice echoes the same logprobs, streamed or not.
TEST(Echo, PromptLogprobsAreComputedOnceForNChoices) {
  Harness h(ServerConfig{}, small_model(), /*max_num_seqs=*/1);
  const std::vector<int32_t> ids = prompt_ids(200, h.engine->limits().n_vocab);
  const uint64_t hits_before = h.engine->stats().prefix.num_hit_tokens;
  const json body = {{"prompt", ids}, {"echo", true},       {"logprobs", 1}, {"max_tokens", 1},
                     {"n", 3},        {"temperature", 1.0}, {"seed", 5}};
  json r = h.post_ok("/v1/completions", body);
  ASSERT_EQ(r["choices"].size(), 3u) << r.dump();
  EXPECT_GE(h.engine->stats().prefix.num_hit_tokens - hits_before, 2u * 176)
      << "the second and third candidates computed the prompt again";
  auto prompt_part = [&](const json& lp) {
    json out = json::array();
    for (size_t t = 0; t < ids.size(); ++t) {  // the prompt's tokens
      out.push_back({lp["tokens"][t], lp["token_logprobs"][t], lp["top_logprobs"][t]});
    }
    return out;
  };
  const json first = prompt_part(r["choices"][0]["logprobs"]);
  EXPECT_TRUE(first[0][1].is_null());
  EXPECT_TRUE(first[1][1].is_number());
  for (const json& c : r["choices"]) EXPECT_EQ(prompt_part(c["logprobs"]), first);
  json streamed = body;
  streamed["stream"] = true;
  auto s = h.post("/v1/completions", streamed);
  ASSERT_TRUE(s);
  std::map<int, json> echoed;  // choice -> its first chunk's logprobs
  for (const std::string& e : sse_events(s->body)) {
    if (e == "[DONE]") break;
    const json c = json::parse(e)["choices"][0];
    if (!echoed.count(c["index"].get<int>()) && c["logprobs"].is_object())
      echoed[c["index"].get<int>()] = c["logprobs"];
  }
  ASSERT_EQ(echoed.size(), 3u) << s->body;
  for (const auto& [index, lp] : echoed) EXPECT_EQ(prompt_part(lp), first) << index;
}

}  // namespace
}  // namespace kvw::server
