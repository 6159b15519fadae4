// vLLM's sampling extensions over HTTP: min_tokens, stop_token_ids, repetition_penalty on both
// endpoints, streamed and not, n > 1, and their 400s naming the field.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness.h"

namespace kvw::server {
namespace {

using harness::expect_error;
using harness::Harness;
using harness::sse_events;
using nlohmann::json;

const json kUser = {{{"role", "user"}, {"content", "Once upon a time"}}};

std::vector<int32_t> prompt_ids(int len, int32_t n_vocab) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back(3 + (i * 53 + 7) % (n_vocab - 3));
  return p;
}

// A member of a const object, null when absent (const operator[] asserts on a missing key, and
// stream chunks leave out what they do not carry).
json member(const json& j, const char* key) {
  return j.is_object() && j.contains(key) ? j[key] : json();
}

// A streamed answer's text per choice, its finish reasons and its usage.
struct Streamed {
  std::vector<std::string> text;
  std::vector<std::string> finish;
  json usage;
};
Streamed stream(Harness& h, const std::string& path, json req) {
  const bool chat = path.find("chat") != std::string::npos;
  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  Streamed s;
  auto r = h.post(path, req);
  EXPECT_TRUE(r && r->status == 200);
  if (!r) return s;
  for (const std::string& e : sse_events(r->body)) {
    if (e == "[DONE]") continue;
    const json c = json::parse(e);
    if (!member(c, "usage").is_null()) s.usage = c["usage"];
    for (const json& ch : c["choices"]) {
      const auto i = ch["index"].get<size_t>();
      if (s.text.size() <= i) s.text.resize(i + 1), s.finish.resize(i + 1);
      const json t = chat ? member(member(ch, "delta"), "content") : member(ch, "text");
      if (t.is_string()) s.text[i] += t.get<std::string>();
      if (member(ch, "finish_reason").is_string()) s.finish[i] = ch["finish_reason"];
    }
  }
  return s;
}

std::string text_of(const json& choice) {
  return choice.contains("message") ? choice["message"]["content"].get<std::string>()
                                    : choice["text"].get<std::string>();
}

// A logit_bias makes EOS greedy's argmax: the answer ends at once ("stop", one token, no
// text); min_tokens 5 holds EOS off for five tokens of text, on both endpoints, streamed or
// not, for every choice of n = 2.
TEST(VllmParams, MinTokensHoldsOffEosOnBothEndpointsStreamedAndNot) {
  Harness h;
  const int32_t eos = h.engine->tokenizer().eos_id();
  for (const std::string path : {"/v1/completions", "/v1/chat/completions"}) {
    json req = {{"max_tokens", 16},
                {"temperature", 0},
                {"n", 2},
                {"logit_bias", {{std::to_string(eos), 100}}}};
    if (path == "/v1/completions") {
      req["prompt"] = "Once upon a time";
    } else {
      req["messages"] = kUser;
    }
    json r = h.post_ok(path, req);
    EXPECT_EQ(r["usage"]["completion_tokens"], 2) << path;
    for (const json& c : r["choices"]) {
      EXPECT_EQ(c["finish_reason"], "stop");
      EXPECT_EQ(text_of(c), "");
    }
    req["min_tokens"] = 5;
    r = h.post_ok(path, req);
    EXPECT_EQ(r["usage"]["completion_tokens"], 2 * 6) << path;  // 5 + EOS each
    ASSERT_EQ(r["choices"].size(), 2u);
    const std::string text = text_of(r["choices"][0]);
    EXPECT_FALSE(text.empty());
    for (const json& c : r["choices"]) {
      EXPECT_EQ(c["finish_reason"], "stop");
      EXPECT_EQ(text_of(c), text);  // greedy: the choices agree
    }
    const Streamed s = stream(h, path, req);
    EXPECT_EQ(s.text, std::vector<std::string>(2, text)) << path;
    EXPECT_EQ(s.finish, std::vector<std::string>(2, "stop"));
    EXPECT_EQ(s.usage["completion_tokens"], 12);
  }
}

// stop_token_ids: the choice ends at the first one sampled, finish_reason "stop", its text left
// out (the text is exactly that of the tokens before it); under min_tokens it cannot be sampled.
TEST(VllmParams, StopTokenIdsEndAtTheTokenWithoutItsText) {
  Harness h;
  const std::vector<int32_t> prompt = prompt_ids(12, h.engine->limits().n_vocab);
  GenerationRequest g;
  g.prompt = prompt;
  g.max_tokens = 20;
  g.ignore_eos = true;
  auto ch = h.engine->submit(g);
  ASSERT_TRUE(ch.ok());
  const std::vector<int32_t> free_run = (*ch)->collect().tokens;  // greedy, as the server's
  ASSERT_EQ(free_run.size(), 20u);
  const int32_t stop_id = free_run[4];
  const auto first = (int)(std::find(free_run.begin(), free_run.end(), stop_id) - free_run.begin());
  json req = {{"prompt", prompt}, {"max_tokens", first}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string before = h.post_ok("/v1/completions", req)["choices"][0]["text"];
  req["max_tokens"] = 20;
  req["stop_token_ids"] = {stop_id, h.engine->limits().n_vocab - 1};
  json r = h.post_ok("/v1/completions", req);
  EXPECT_EQ(r["choices"][0]["text"], before);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["usage"]["completion_tokens"], first + 1);
  const Streamed s = stream(h, "/v1/completions", req);
  EXPECT_EQ(s.text, std::vector<std::string>{before});
  EXPECT_EQ(s.finish, std::vector<std::string>{"stop"});
  // min_tokens past its first position: the stop id is banned there, so the answer runs on.
  req["min_tokens"] = first + 3;
  r = h.post_ok("/v1/completions", req);
  EXPECT_GT(r["usage"]["completion_tokens"].get<int>(), first + 3);
  EXPECT_EQ(r["choices"][0]["text"].get<std::string>().rfind(before, 0), 0u);
}

// Stop strings match only text that tokens after the first min_tokens add (vLLM): a stop string
// that is the whole text of the first two tokens ends the answer at once without min_tokens,
// and is passed over with it.
TEST(VllmParams, MinTokensDefersStopStrings) {
  Harness h;
  json req = {{"prompt", prompt_ids(10, h.engine->limits().n_vocab)},
              {"max_tokens", 2},
              {"temperature", 0},
              {"ignore_eos", true}};
  const std::string head = h.post_ok("/v1/completions", req)["choices"][0]["text"];
  ASSERT_FALSE(head.empty());
  req["max_tokens"] = 16;
  req["stop"] = head;
  json r = h.post_ok("/v1/completions", req);
  EXPECT_EQ(r["choices"][0]["text"], "");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  req["min_tokens"] = 6;
  r = h.post_ok("/v1/completions", req);
  const std::string text = r["choices"][0]["text"];
  EXPECT_EQ(text.rfind(head, 0), 0u) << text;
  EXPECT_GT(r["usage"]["completion_tokens"].get<int>(), 6);
}

// repetition_penalty is accepted on both endpoints and changes greedy output: a logit_bias
// makes one token the argmax every time; a large penalty allows it once.
TEST(VllmParams, RepetitionPenaltyChangesGreedyOutputOnBothEndpoints) {
  Harness h;
  const int32_t favourite = prompt_ids(1, h.engine->limits().n_vocab)[0] + 100;
  for (const std::string path : {"/v1/completions", "/v1/chat/completions"}) {
    json req = {{"max_tokens", 8},
                {"temperature", 0},
                {"ignore_eos", true},
                {"logit_bias", {{std::to_string(favourite), 40}}}};
    if (path == "/v1/completions") {
      req["prompt"] = "Once upon a time";
    } else {
      req["messages"] = kUser;
    }
    const std::string same = text_of(h.post_ok(path, req)["choices"][0]);
    req["repetition_penalty"] = 1e4;
    const json r = h.post_ok(path, req);
    EXPECT_NE(text_of(r["choices"][0]), same) << path;
    EXPECT_EQ(r["usage"]["completion_tokens"], 8);
    EXPECT_EQ(stream(h, path, req).text, std::vector<std::string>{text_of(r["choices"][0])});
  }
}

TEST(VllmParams, BadValuesAre400NamingTheField) {
  Harness h;
  const int32_t n_vocab = h.engine->limits().n_vocab;
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"repetition_penalty", 0}}, "repetition_penalty"},
      {{{"repetition_penalty", -1.5}}, "repetition_penalty"},
      {{{"repetition_penalty", "high"}}, "repetition_penalty"},
      {{{"min_tokens", -1}}, "min_tokens"},
      {{{"min_tokens", 9}, {"max_tokens", 8}}, "min_tokens"},
      {{{"min_tokens", "3"}}, "min_tokens"},
      {{{"stop_token_ids", {n_vocab}}}, "stop_token_ids"},
      {{{"stop_token_ids", {1, -2}}}, "stop_token_ids"},
      {{{"stop_token_ids", "2"}}, "stop_token_ids"},
  };
  for (const auto& [extra, param] : cases) {
    json completion = {{"prompt", "Once"}};
    completion.update(extra);
    expect_error(h.post("/v1/completions", completion), 400, "", param);
    json chat = {{"messages", kUser}};
    chat.update(extra);
    expect_error(h.post("/v1/chat/completions", chat), 400, "", param);
  }
  // Completions default to 16 tokens: min_tokens above that is refused as vLLM does.
  expect_error(h.post("/v1/completions", {{"prompt", "Once"}, {"min_tokens", 17}}), 400, "",
               "min_tokens");
}

}  // namespace
}  // namespace kvw::server
