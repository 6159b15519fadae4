// Issue 31: tool calls whose markers are control tokens of the vocabulary, end to end through
// /v1/chat/completions. The token trie leaves control tokens out, so a constrained call must
// be able to write a marker as its control token, the marker must start the parser (and a
// lazy grammar), and no marker may leak into content:
// - Hermes with <tool_call> / </tool_call> as control tokens (make-model --control-tokens, as
//   a GGUF whose converter marked them special), the markers forced by logit_bias;
// - gpt-oss harmony (make-model's gpt-oss-tiny: <|channel|>, <|constrain|>, <|message|>,
//   <|call|> are control tokens), where a streamed call goes out as its tokens arrive, and
//   <|end|> (end of a message) does not end the answer.
#include <algorithm>
#include <cstdlib>

#include "harness.h"

namespace kvw::server {
namespace {

using harness::Harness;
using harness::json;
using harness::sse_events;

const json kUser = json::array({{{"role", "user"}, {"content", "Weather in Oslo?"}}});

const json& weather_tool() {
  static const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 8}, "days": {"type": "integer"}},
        "required": ["city", "days"], "additionalProperties": false}}}])");
  return tools;
}

const std::string& harmony_model() {
  static const std::string path = [] {
    auto spec = make_model_preset("gpt-oss-tiny");
    EXPECT_TRUE(spec.ok());
    spec->seed = 11;
    const std::string p = ::testing::TempDir() + "/server_gptoss_tools.gguf";
    EXPECT_TRUE(make_model(*spec, p).ok());
    return p;
  }();
  return path;
}

// Under the sanitizers (KVW_SANITIZED) fewer seeds: the suite's ASan run is at its time limit.
int num_seeds() {
  return std::getenv("KVW_SANITIZED") != nullptr ? 2 : 4;
}

std::unique_ptr<Harness> harmony_server() {
  ServerConfig cfg;
  cfg.tool_call_parser = "openai";  // the tiny template has no tools section to detect it from
  return std::make_unique<Harness>(cfg, harmony_model(), 4, OverflowPolicy::kError, nullptr,
                                   [](EngineConfig& e) { e.sched.max_model_len = 2048; });
}

const std::string& hermes_model() {
  static const std::string path = [] {
    MakeModelSpec spec;
    spec.n_embd = 128;
    spec.n_layer = 2;
    spec.n_ff = 256;
    spec.n_ctx = 4096;
    spec.vocab_type = "bpe";  // ChatML template: the generic tool prompt asks for Hermes calls
    spec.seed = 5;
    spec.extra_control_tokens = {"<tool_call>", "</tool_call>"};
    const std::string p = ::testing::TempDir() + "/server_hermes_control.gguf";
    EXPECT_TRUE(make_model(spec, p).ok());
    return p;
  }();
  return path;
}

int32_t token_id(const Harness& h, const std::string& text) {
  const auto& tokens = h.engine->tokenizer().vocab().tokens;
  const auto it = std::find(tokens.begin(), tokens.end(), text);
  EXPECT_NE(it, tokens.end()) << text;
  return (int32_t)(it - tokens.begin());
}

void expect_weather_call(const std::string& name, const std::string& arguments) {
  EXPECT_EQ(name, "get_weather");
  const json args = json::parse(arguments, nullptr, false);
  ASSERT_TRUE(args.is_object()) << arguments;
  EXPECT_TRUE(args["city"].is_string()) << arguments;
  EXPECT_TRUE(args["days"].is_number_integer()) << arguments;
  EXPECT_EQ(arguments.find("<|"), std::string::npos) << "a marker in the arguments";
}

// tool_choice "auto": the model writes <tool_call> as its control token (biased to), which
// fires the lazy grammar, so the call follows the schema; "required": the grammar offers both
// markers as their control tokens (biased to: the grammar decides where), and the call parses.
// Streamed and not, no marker in content.
TEST(ServerToolCallingControlTokens, HermesControlMarkersStartTheCallAndNeverLeak) {
  Harness h(ServerConfig{}, hermes_model());
  const int32_t open = token_id(h, "<tool_call>"), close = token_id(h, "</tool_call>");
  ASSERT_EQ(h.engine->tokenizer().token_type(open), TokenType::kControl);
  int finished = 0;
  for (const char* choice : {"auto", "required"}) {
    for (bool stream : {false, true}) {
      SCOPED_TRACE(std::string(choice) + (stream ? " streamed" : ""));
      // The closing marker is biased only where the grammar gates it ("required"): in free
      // text before a call it would be the model's content.
      json bias = {{std::to_string(open), 100}};
      if (std::string(choice) == "required") bias[std::to_string(close)] = 100;
      const json body = {{"messages", kUser},
                         {"max_tokens", 200},
                         {"temperature", 1.0},
                         {"seed", 3},
                         {"tools", weather_tool()},
                         {"tool_choice", choice},
                         {"parallel_tool_calls", false},
                         {"logit_bias", bias},
                         {"stream", stream}};
      auto r = h.post("/v1/chat/completions", body);
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      std::string content, finish, name, arguments;
      if (!stream) {
        const json c = json::parse(r->body)["choices"][0];
        finish = c["finish_reason"];
        if (c["message"]["content"].is_string()) content = c["message"]["content"];
        if (c["message"].contains("tool_calls")) {
          EXPECT_EQ(c["message"]["tool_calls"].size(), 1u) << r->body;
          name = c["message"]["tool_calls"][0]["function"]["name"];
          arguments = c["message"]["tool_calls"][0]["function"]["arguments"];
        }
      } else {
        for (const std::string& e : sse_events(r->body)) {
          if (e == "[DONE]") break;
          const json c = json::parse(e)["choices"][0];
          if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
          const json& d = c["delta"];
          if (d.contains("content") && d["content"].is_string()) content += d["content"];
          if (!d.contains("tool_calls")) continue;
          for (const json& item : d["tool_calls"]) {
            if (item["function"].contains("name")) name = item["function"]["name"];
            arguments += item["function"]["arguments"].get<std::string>();
          }
        }
      }
      if (finish == "length") continue;  // the arguments did not end in time
      ++finished;
      EXPECT_EQ(finish, "tool_calls") << r->body;
      EXPECT_EQ(content.find("tool_call"), std::string::npos) << "a marker leaked: " << r->body;
      EXPECT_EQ(content, "") << r->body;
      expect_weather_call(name, arguments);
    }
  }
  EXPECT_GT(finished, 0) << "no run finished within 200 tokens";
}

TEST(ServerToolCallingControlTokens, RequiredHarmonyCallAlwaysParsesAndNoMarkerLeaks) {
  auto h = harmony_server();
  int finished = 0;
  for (int seed = 1; seed <= num_seeds(); ++seed) {
    json r = h->post_ok("/v1/chat/completions", {{"messages", kUser},
                                                 {"max_tokens", 120},
                                                 {"temperature", 1.0},
                                                 {"seed", seed},
                                                 {"tools", weather_tool()},
                                                 {"tool_choice", "required"}});
    ASSERT_TRUE(r.is_object());
    const json& c = r["choices"][0];
    if (c["finish_reason"] == "length") continue;  // the arguments did not end in time
    ++finished;
    EXPECT_EQ(c["finish_reason"], "tool_calls") << r.dump();
    EXPECT_TRUE(c["message"]["content"].is_null()) << r.dump();
    EXPECT_FALSE(c["message"].contains("reasoning_content")) << r.dump();
    ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << r.dump();
    const json& call = c["message"]["tool_calls"][0];
    expect_weather_call(call["function"]["name"], call["function"]["arguments"]);
  }
  EXPECT_GT(finished, 0) << "no run finished within 120 tokens";
}

TEST(ServerToolCallingControlTokens, StreamedHarmonyCallGoesOutAsItsTokensArrive) {
  auto h = harmony_server();
  int finished = 0;
  for (int seed = 1; seed <= num_seeds() && finished < 2; ++seed) {
    auto r = h->post("/v1/chat/completions", {{"messages", kUser},
                                              {"max_tokens", 120},
                                              {"temperature", 1.0},
                                              {"seed", seed},
                                              {"tools", weather_tool()},
                                              {"tool_choice", "required"},
                                              {"logprobs", true},
                                              {"stream", true}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    // How the engine's tokens were batched into chunks depends on timing; what must hold is
    // that the call opens in the chunk right after the tokens that opened its body ('{'), so
    // when more tokens follow in later chunks the call is out before them.
    std::string name, arguments, content, finish;
    int opened_at = -1, brace_at = -1, last_token_at = -1, k = 0;
    for (const std::string& e : sse_events(r->body)) {
      if (e == "[DONE]") break;
      const json c = json::parse(e)["choices"][0];
      ++k;
      if (c["logprobs"].is_object()) {
        last_token_at = k;
        for (const json& t : c["logprobs"]["content"]) {
          const std::string text = t["token"];
          if (brace_at < 0 && text.find('{') != std::string::npos) brace_at = k;
        }
      }
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
      const json& d = c["delta"];
      if (d.contains("content") && d["content"].is_string()) content += d["content"];
      EXPECT_FALSE(d.contains("reasoning_content")) << e;
      if (!d.contains("tool_calls")) continue;
      const json& item = d["tool_calls"][0];
      EXPECT_EQ(item["index"], 0) << e;
      if (item.contains("id")) {
        EXPECT_EQ(opened_at, -1) << "opened twice: " << e;
        opened_at = k;
        name = item["function"]["name"];
        continue;
      }
      ASSERT_GE(opened_at, 0) << "arguments before the name: " << e;
      arguments += item["function"]["arguments"].get<std::string>();
    }
    if (finish == "length") continue;
    ++finished;
    EXPECT_EQ(finish, "tool_calls") << r->body;
    EXPECT_EQ(content, "") << "call text leaked into content";
    expect_weather_call(name, arguments);
    ASSERT_GT(brace_at, 0) << r->body;
    EXPECT_EQ(opened_at, brace_at + 1) << "the call did not open with its body: " << r->body;
    if (brace_at < last_token_at) {
      EXPECT_LT(opened_at, last_token_at) << "the call went out only at the end: " << r->body;
    }
  }
  EXPECT_GT(finished, 0) << "no run finished within 120 tokens";
}

// gpt-oss closes its analysis message with <|end|> and goes on to the final answer
// (<|start|>assistant<|channel|>final<|message|>...), so <|end|> must not end the generation;
// only <|return|> and <|call|> do. Biased to, <|end|> comes every step and the answer runs to
// max_tokens (a 200, never a 500, whatever the channels then hold); <|return|> ends it at once.
TEST(ServerToolCallingControlTokens, HarmonyEndOfMessageDoesNotEndTheAnswer) {
  auto h = harmony_server();
  auto biased_to = [&](const char* token) {
    return h->post_ok("/v1/chat/completions",
                      {{"messages", kUser},
                       {"max_tokens", 6},
                       {"temperature", 0.0},
                       {"logit_bias", {{std::to_string(token_id(*h, token)), 100}}}});
  };
  const json r = biased_to("<|end|>");
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length") << r.dump();
  EXPECT_EQ(r["usage"]["completion_tokens"], 6) << r.dump();
  const json s = biased_to("<|return|>");
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["choices"][0]["finish_reason"], "stop") << s.dump();
  EXPECT_LE(s["usage"]["completion_tokens"].get<int>(), 1) << s.dump();
}

}  // namespace
}  // namespace kvw::server
