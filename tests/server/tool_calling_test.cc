// Issue 31: OpenAI tool calling through the API on a random-weight model. Free text from such a
// model is never a call, so every call that comes back shows the grammar of tool_choice
// "required" / a named function at work, and the parser reading it back; bad shapes are 400s
// naming the parameter. The long model: the tool prompt alone is ~800 tokens of its small
// vocabulary, more than the small model's context.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "harness.h"

namespace kvw::server {
namespace {

using harness::expect_error;
using harness::Harness;
using harness::json;
using harness::sse_events;

const json kUser = json::array({{{"role", "user"}, {"content", "Weather in Oslo?"}}});

json weather_tools() {
  return json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
      "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 8}, "days": {"type": "integer"}},
        "required": ["city", "days"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "get_time",
      "parameters": {"type": "object", "properties": {"tz": {"enum": ["UTC", "CET"]}},
        "required": ["tz"]}}}])");
}

// The arguments follow the schema of the function they name.
void expect_valid_call(const json& call) {
  ASSERT_TRUE(call["id"].is_string());
  EXPECT_TRUE(call["id"].get<std::string>().starts_with("call_")) << call.dump();
  EXPECT_EQ(call["type"], "function");
  const std::string name = call["function"]["name"];
  json args = json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(args.is_object()) << call.dump();
  if (name == "get_weather") {
    ASSERT_TRUE(args["city"].is_string()) << call.dump();
    EXPECT_TRUE(args["days"].is_number_integer()) << call.dump();
  } else {
    ASSERT_EQ(name, "get_time") << call.dump();
    EXPECT_TRUE(args["tz"] == "UTC" || args["tz"] == "CET") << call.dump();
  }
}

// Non-streamed seeded requests; returns the choices that ended with tool calls.
std::vector<json> called(Harness& h, const json& extra, int runs) {
  std::vector<json> out;
  for (int seed = 1; seed <= runs; ++seed) {
    json body = {{"messages", kUser},
                 {"max_tokens", 300},
                 {"temperature", 1.0},
                 {"seed", seed},
                 {"tools", weather_tools()}};
    body.update(extra);
    json r = h.post_ok("/v1/chat/completions", body);
    if (!r.is_object()) continue;
    const json& c = r["choices"][0];
    if (c["finish_reason"] == "length") continue;  // the grammar could not finish in time
    EXPECT_EQ(c["finish_reason"], "tool_calls") << r.dump();
    EXPECT_TRUE(c["message"]["content"].is_null()) << r.dump();
    EXPECT_EQ(c["message"]["role"], "assistant");
    out.push_back(c);
  }
  return out;
}

TEST(ServerToolCalling, RequiredChoiceAlwaysGivesCallsThatFollowTheSchema) {
  Harness h(ServerConfig{}, harness::long_model());
  auto choices = called(h, {{"tool_choice", "required"}}, 6);
  ASSERT_FALSE(choices.empty()) << "no run finished within 300 tokens";
  for (const json& c : choices) {
    ASSERT_GE(c["message"]["tool_calls"].size(), 1u) << c.dump();
    for (const json& call : c["message"]["tool_calls"]) expect_valid_call(call);
  }
}

TEST(ServerToolCalling, NamedChoiceCallsThatFunctionOnceWithoutParallelCalls) {
  Harness h(ServerConfig{}, harness::long_model());
  auto choices =
      called(h,
             {{"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}},
              {"parallel_tool_calls", false}},
             4);
  ASSERT_FALSE(choices.empty());
  for (const json& c : choices) {
    ASSERT_EQ(c["message"]["tool_calls"].size(), 1u) << c.dump();
    EXPECT_EQ(c["message"]["tool_calls"][0]["function"]["name"], "get_time");
    expect_valid_call(c["message"]["tool_calls"][0]);
  }
}

TEST(ServerToolCalling, LegacyFunctionsAndFunctionCallMapToTools) {
  Harness h(ServerConfig{}, harness::long_model());
  json functions = json::array();
  for (const json& t : weather_tools()) functions.push_back(t["function"]);
  json body = {{"messages", kUser},      {"max_tokens", 300},
               {"temperature", 1.0},     {"seed", 3},
               {"functions", functions}, {"function_call", {{"name", "get_weather"}}}};
  json r = h.post_ok("/v1/chat/completions", body);
  const json& c = r["choices"][0];
  if (c["finish_reason"] == "length") GTEST_SKIP() << "did not finish in 300 tokens";
  ASSERT_EQ(c["finish_reason"], "tool_calls") << r.dump();
  EXPECT_EQ(c["message"]["tool_calls"][0]["function"]["name"], "get_weather");
}

TEST(ServerToolCalling, StreamedCallsReassembleFromDeltas) {
  Harness h(ServerConfig{}, harness::long_model());
  int done = 0;
  for (int seed = 1; seed <= 6 && done < 2; ++seed) {
    const json body = {{"messages", kUser}, {"max_tokens", 300},        {"temperature", 1.0},
                       {"seed", seed},      {"tools", weather_tools()}, {"tool_choice", "required"},
                       {"stream", true}};
    auto r = h.post("/v1/chat/completions", body);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    std::map<int, json> calls;  // index -> {id, name, arguments}
    std::string content, finish;
    for (const std::string& e : sse_events(r->body)) {
      if (e == "[DONE]") break;
      const json c = json::parse(e)["choices"][0];
      const json& d = c["delta"];
      if (d.contains("content") && d["content"].is_string()) content += d["content"];
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
      if (!d.contains("tool_calls")) continue;
      for (const json& item : d["tool_calls"]) {
        json& call = calls[item["index"].get<int>()];
        if (item.contains("id")) {
          EXPECT_FALSE(call.contains("id")) << "id sent twice: " << e;
          call["id"] = item["id"];
          call["type"] = item["type"];
          call["function"]["name"] = item["function"]["name"];
          call["function"]["arguments"] = "";
        }
        ASSERT_TRUE(call.contains("id")) << "arguments before the call's first delta: " << e;
        call["function"]["arguments"] = call["function"]["arguments"].get<std::string>() +
                                        item["function"]["arguments"].get<std::string>();
      }
    }
    if (finish == "length") continue;
    ++done;
    EXPECT_EQ(finish, "tool_calls") << r->body;
    EXPECT_EQ(content, "") << "call text leaked into content";
    ASSERT_FALSE(calls.empty()) << r->body;
    for (const auto& [index, call] : calls) expect_valid_call(call);
  }
  EXPECT_GT(done, 0) << "no run finished within 300 tokens";
}

TEST(ServerToolCalling, ToolsAndHistoryReachThePromptAndNoneAnswersInText) {
  Harness h(ServerConfig{}, harness::long_model());
  auto prompt_tokens = [&](const json& extra) {
    json body = {{"messages", kUser}, {"max_tokens", 4}, {"seed", 1}};
    body.update(extra);
    json r = h.post_ok("/v1/chat/completions", body);
    EXPECT_TRUE(r["choices"][0]["message"]["content"].is_string()) << r.dump();
    EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls")) << r.dump();
    return r["usage"]["prompt_tokens"].get<int64_t>();
  };
  const int64_t plain = prompt_tokens(json::object());
  const int64_t offered = prompt_tokens({{"tools", weather_tools()}, {"tool_choice", "auto"}});
  const int64_t none = prompt_tokens({{"tools", weather_tools()}, {"tool_choice", "none"}});
  EXPECT_GT(offered, plain + 50) << "the tools are not in the prompt";
  EXPECT_EQ(none, plain) << "tool_choice none offers no tools";
  // A finished round trip: the assistant's call and the tool's answer are rendered.
  json history = kUser;
  history.push_back(
      {{"role", "assistant"},
       {"content", nullptr},
       {"tool_calls",
        {{{"id", "call_1"},
          {"type", "function"},
          {"function",
           {{"name", "get_weather"}, {"arguments", "{\"city\": \"Oslo\", \"days\": 1}"}}}}}}});
  history.push_back({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "{\"temp\": 3}"}});
  const int64_t round_trip = prompt_tokens({{"messages", history}, {"tools", weather_tools()}});
  EXPECT_GT(round_trip, offered + 10);
}

TEST(ServerToolCalling, BadShapesAreRefusedNamingTheParameter) {
  Harness h(ServerConfig{}, harness::long_model());
  auto refuse = [&](const json& extra, const std::string& param) {
    json body = {{"messages", kUser}, {"max_tokens", 4}};
    body.update(extra);
    expect_error(h.post("/v1/chat/completions", body), 400, "", param);
  };
  const json tools = weather_tools();
  refuse({{"tools", "get_weather"}}, "tools");
  refuse({{"tools", {{{"type", "retrieval"}}}}}, "tools[0].type");
  refuse({{"tools", {{{"type", "function"}, {"function", {{"name", "bad name!"}}}}}}},
         "tools[0].function.name");
  refuse({{"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", 3}}}}}}},
         "tools[0].function.parameters");
  refuse({{"tools", tools}, {"tool_choice", "sometimes"}}, "tool_choice");
  refuse(
      {{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}},
      "tool_choice");
  refuse({{"tool_choice", "required"}}, "tool_choice");
  refuse({{"tools", tools}, {"parallel_tool_calls", "yes"}}, "parallel_tool_calls");
  refuse({{"tools", tools}, {"functions", json::array()}}, "functions");
  refuse({{"tools", tools},
          {"tool_choice", "required"},
          {"response_format", {{"type", "json_object"}}}},
         "tool_choice");
  const json pattern_tool = json::parse(R"([{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"a": {"type": "string", "pattern": "x+"}}}}}])");
  refuse({{"tools", pattern_tool}, {"tool_choice", "required"}}, "tools");
  json no_id = kUser;
  no_id.push_back({{"role", "tool"}, {"content", "3"}});
  refuse({{"messages", no_id}}, "messages[1].tool_call_id");
  json calls_on_user =
      json::array({{{"role", "user"}, {"content", "x"}, {"tool_calls", json::array()}}});
  refuse({{"messages", calls_on_user}}, "messages[0].tool_calls");
}

// Qwen2.5's published template: the tools go through the model's own template (not the
// generic prompt) and the format is detected from it.
TEST(ServerToolCalling, ToolAwareTemplateRendersToolsAndItsFormatIsDetected) {
  // ctest sets KVW_TEST_MODELS to tests/models; the templates are beside it.
  const char* models = std::getenv("KVW_TEST_MODELS");
  ASSERT_NE(models, nullptr) << "run under ctest, or set KVW_TEST_MODELS=<repo>/tests/models";
  std::ifstream in(std::string(models) + "/../chat/templates/qwen2.5-instruct.jinja");
  std::stringstream ss;
  ss << in.rdbuf();
  ServerConfig cfg;
  cfg.chat_template = ss.str();
  ASSERT_FALSE(cfg.chat_template.empty());
  Harness h(cfg, harness::long_model());
  json plain = h.post_ok("/v1/chat/completions", {{"messages", kUser}, {"max_tokens", 2}});
  json offered = h.post_ok("/v1/chat/completions",
                           {{"messages", kUser}, {"max_tokens", 2}, {"tools", weather_tools()}});
  EXPECT_GT(offered["usage"]["prompt_tokens"].get<int64_t>(),
            plain["usage"]["prompt_tokens"].get<int64_t>() + 50);
  auto choices = called(h, {{"tool_choice", "required"}}, 4);
  ASSERT_FALSE(choices.empty());
  for (const json& c : choices) {
    for (const json& call : c["message"]["tool_calls"]) expect_valid_call(call);
  }
}

TEST(ServerToolCalling, ParserFlagPicksTheFamilyFormat) {
  ServerConfig cfg;
  cfg.tool_call_parser = "mistral";
  Harness h(cfg, harness::long_model());
  auto choices = called(h, {{"tool_choice", "required"}}, 4);
  ASSERT_FALSE(choices.empty());
  for (const json& c : choices) {
    for (const json& call : c["message"]["tool_calls"]) expect_valid_call(call);
  }
}

// Each streamed call goes out as soon as it is whole, not at the end: with the end of
// generation banned the grammar of "required" makes the model write call after call, and the
// first call's deltas come before the tokens of the second (logprobs chunks), for the hermes
// and llama3_json wrappers.
TEST(ServerToolCalling, EachStreamedCallGoesOutAsSoonAsItIsWhole) {
  for (const char* parser : {"hermes", "llama3_json"}) {
    SCOPED_TRACE(parser);
    ServerConfig cfg;
    cfg.tool_call_parser = parser;
    Harness h(cfg, harness::long_model());
    const int32_t eos = h.engine->tokenizer().eos_id();
    const json body = {{"messages", kUser},
                       {"max_tokens", 300},
                       {"temperature", 1.0},
                       {"seed", 1},
                       {"tools", weather_tools()},
                       {"tool_choice", "required"},
                       {"logprobs", true},
                       {"logit_bias", {{std::to_string(eos), -100}}},
                       {"stream", true}};
    auto r = h.post("/v1/chat/completions", body);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    std::map<int, json> calls;      // index -> reassembled call
    size_t tokens_after_first = 0;  // token chunks after call 0's last delta
    std::vector<std::string> events = sse_events(r->body);
    for (size_t k = 0; k < events.size() && events[k] != "[DONE]"; ++k) {
      const json c = json::parse(events[k])["choices"][0];
      if (c["logprobs"].is_object() && calls.count(0) && !calls.count(1)) ++tokens_after_first;
      if (!c["delta"].contains("tool_calls")) continue;
      for (const json& item : c["delta"]["tool_calls"]) {
        const int index = item["index"];
        EXPECT_LE(index, (int)calls.size()) << "indices go up one call at a time";
        json& call = calls[index];
        if (item.contains("id")) {
          call = {{"id", item["id"]}, {"type", item["type"]}, {"function", item["function"]}};
          continue;
        }
        call["function"]["arguments"] = call["function"]["arguments"].get<std::string>() +
                                        item["function"]["arguments"].get<std::string>();
      }
    }
    ASSERT_GE(calls.size(), 2u) << r->body;
    for (const auto& [index, call] : calls) expect_valid_call(call);
    EXPECT_GT(tokens_after_first, 0u) << "the first call went out only with the second";
  }
}

}  // namespace
}  // namespace kvw::server
