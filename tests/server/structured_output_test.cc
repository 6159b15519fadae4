// Issue 31: structured outputs through the API. On a random-weight model free text is never
// JSON, so every output that ends with "stop" parsing and following its schema shows the
// grammar at work; refusals are 400s naming the field.
#include <regex>
#include <set>

#include "harness.h"

namespace kvw::server {
namespace {

using harness::expect_error;
using harness::Harness;
using harness::json;
using harness::sse_events;

const json kUser = json::array({{{"role", "user"}, {"content", "Give me JSON."}}});

// Samples `runs` seeded chat completions with `extra` and returns the texts that ended with
// "stop" (a grammar that cannot finish in max_tokens ends with "length" as usual).
std::vector<std::string> finished(Harness& h, const json& extra, int runs) {
  std::vector<std::string> out;
  for (int seed = 1; seed <= runs; ++seed) {
    json body = {{"messages", kUser}, {"max_tokens", 200}, {"temperature", 1.0}, {"seed", seed}};
    body.update(extra);
    json r = h.post_ok("/v1/chat/completions", body);
    if (!r.is_object()) continue;
    const json& c = r["choices"][0];
    EXPECT_TRUE(c["finish_reason"] == "stop" || c["finish_reason"] == "length") << r.dump();
    if (c["finish_reason"] == "stop") out.push_back(c["message"]["content"].get<std::string>());
  }
  return out;
}

TEST(ServerStructuredOutput, JsonObjectAlwaysParsesAsAnObject) {
  Harness h;
  auto texts = finished(h, {{"response_format", {{"type", "json_object"}}}}, 8);
  ASSERT_FALSE(texts.empty()) << "no run finished within 200 tokens";
  for (const std::string& t : texts) {
    json j = json::parse(t, nullptr, false);
    EXPECT_TRUE(j.is_object()) << t;
  }
}

TEST(ServerStructuredOutput, JsonSchemaOutputsFollowTheSchemaInItsPropertyOrder) {
  Harness h;
  // "zeta" before "alpha": a sorted-key parse of the schema would reverse them.
  // The body is sent as text so its key order is the schema's.
  std::string body = R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 200,
    "temperature": 1.0, "seed": SEED, "response_format": {"type": "json_schema",
    "json_schema": {"name": "t", "strict": true, "schema": {"type": "object", "properties": {
      "zeta": {"type": "string", "maxLength": 6}, "alpha": {"type": "integer"},
      "flag": {"enum": ["on", "off"]}}, "required": ["zeta", "alpha", "flag"],
      "additionalProperties": false}}}})";
  int done = 0;
  for (int seed = 1; seed <= 8; ++seed) {
    std::string b = body;
    b.replace(b.find("SEED"), 4, std::to_string(seed));
    auto r = h.client->Post("/v1/chat/completions", b, "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    json c = json::parse(r->body)["choices"][0];
    if (c["finish_reason"] != "stop") continue;
    ++done;
    const std::string t = c["message"]["content"];
    json j = json::parse(t, nullptr, false);
    ASSERT_TRUE(j.is_object()) << t;
    EXPECT_EQ(j.size(), 3u) << t;
    ASSERT_TRUE(j["zeta"].is_string()) << t;
    size_t chars = 0;  // maxLength counts characters, not bytes
    for (unsigned char ch : j["zeta"].get<std::string>()) chars += (ch & 0xC0) != 0x80;
    EXPECT_LE(chars, 6u) << t;
    EXPECT_TRUE(j["alpha"].is_number_integer()) << t;
    EXPECT_TRUE(j["flag"] == "on" || j["flag"] == "off") << t;
    EXPECT_LT(t.find("\"zeta\""), t.find("\"alpha\"")) << "properties out of schema order: " << t;
  }
  EXPECT_GT(done, 0) << "no run finished within 200 tokens";
}

TEST(ServerStructuredOutput, ChoiceRegexAndGbnfOnCompletions) {
  Harness h;
  const std::set<std::string> choices = {"yes", "no", "maybe"};
  for (int seed = 1; seed <= 4; ++seed) {
    json r = h.post_ok("/v1/completions", {{"prompt", "Answer:"},
                                           {"max_tokens", 20},
                                           {"temperature", 1.0},
                                           {"seed", seed},
                                           {"guided_choice", {"yes", "no", "maybe"}}});
    EXPECT_TRUE(choices.count(r["choices"][0]["text"].get<std::string>())) << r.dump();
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
    json g =
        h.post_ok("/v1/completions", {{"prompt", "Code:"},
                                      {"max_tokens", 20},
                                      {"temperature", 1.0},
                                      {"seed", seed},
                                      {"structured_outputs", {{"regex", "[0-9]{3}-[a-z]{2}"}}}});
    const std::string code = g["choices"][0]["text"];
    EXPECT_TRUE(std::regex_match(code, std::regex("[0-9]{3}-[a-z]{2}"))) << code;
    json b = h.post_ok("/v1/completions", {{"prompt", "Say:"},
                                           {"max_tokens", 20},
                                           {"temperature", 1.0},
                                           {"seed", seed},
                                           {"grammar", "root ::= (\"ab\" | \"cd\") [0-9]"}});
    EXPECT_TRUE(
        std::regex_match(b["choices"][0]["text"].get<std::string>(), std::regex("(ab|cd)[0-9]")))
        << b.dump();
  }
}

TEST(ServerStructuredOutput, StreamedJsonObjectEqualsTheNonStreamedAnswer) {
  Harness h;
  const json rf = {{"type", "json_object"}};
  for (int seed = 1; seed <= 12; ++seed) {
    const json body = {{"messages", kUser},
                       {"max_tokens", 200},
                       {"temperature", 1.0},
                       {"seed", seed},
                       {"response_format", rf}};
    json whole = h.post_ok("/v1/chat/completions", body);
    if (whole["choices"][0]["finish_reason"] != "stop") continue;
    json streamed = body;
    streamed["stream"] = true;
    auto r = h.post("/v1/chat/completions", streamed);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    std::string text, finish;
    for (const std::string& e : sse_events(r->body)) {
      if (e == "[DONE]") break;
      json j = json::parse(e);
      const json& c = j["choices"][0];
      if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    }
    EXPECT_EQ(finish, "stop");
    EXPECT_EQ(text, whole["choices"][0]["message"]["content"]) << "seed " << seed;
    EXPECT_TRUE(json::parse(text, nullptr, false).is_object()) << text;
    return;
  }
  ADD_FAILURE() << "no run finished within 200 tokens";
}

TEST(ServerStructuredOutput, BadOrConflictingConstraintsAre400NamingTheField) {
  Harness h;
  auto unsupported =
      h.post("/v1/chat/completions",
             {{"messages", kUser},
              {"response_format",
               {{"type", "json_schema"},
                {"json_schema",
                 {{"name", "t"}, {"schema", {{"type", "string"}, {"pattern", "^a+$"}}}}}}}});
  expect_error(unsupported, 400, "", "response_format");
  EXPECT_NE(unsupported->body.find("pattern"), std::string::npos) << unsupported->body;
  expect_error(h.post("/v1/completions", {{"prompt", "x"}, {"grammar", "root ::= [a-"}}), 400, "",
               "grammar");
  expect_error(h.post("/v1/completions",
                      {{"prompt", "x"}, {"guided_regex", "[a-z]+"}, {"guided_choice", {"a"}}}),
               400, "", "guided_choice");
  expect_error(
      h.post("/v1/completions", {{"prompt", "x"}, {"guided_choice", {"a"}}, {"ignore_eos", true}}),
      400, "", "ignore_eos");
  expect_error(h.post("/v1/chat/completions",
                      {{"messages", kUser}, {"response_format", {{"type", "yaml"}}}}),
               400, "", "response_format");
}

// Issue 31 item 4: the compiled grammar comes out of the request's memory (1/16 of
// --request-memory, at least 64 KiB); a schema past it is a 400 naming the field, and the same
// schema is served where the request memory is larger.
TEST(ServerStructuredOutput, SchemaWhoseCompiledFormIsTooLargeIs400NamingTheField) {
  json props = json::object(), required = json::array();
  for (int i = 0; i < 1500; ++i) {
    const std::string name = std::string(1, 'p').append(std::to_string(1000 + i));
    props[name] = {{"type", "integer"}};
    required.push_back(name);
  }
  const json schema = {{"type", "object"}, {"properties", props}, {"required", required}};
  const json body = {
      {"messages", kUser},
      {"max_tokens", 1},
      {"response_format",
       {{"type", "json_schema"}, {"json_schema", {{"name", "big"}, {"schema", schema}}}}}};
  ServerConfig small;
  small.http.request_memory_bytes = 1u << 20;  // grammar limit: 64 KiB
  small.http.max_body_bytes = 128u << 10;
  Harness h(small);
  auto r = h.post("/v1/chat/completions", body);
  expect_error(r, 400, "", "response_format");
  EXPECT_NE(r->body.find("max_grammar_bytes"), std::string::npos) << r->body;
  Harness roomy;  // 64 MiB of request memory: a 4 MiB grammar limit
  EXPECT_TRUE(roomy.post_ok("/v1/chat/completions", body).is_object());
}

// A 3,000-string enum sharing a prefix was a 500 (the matcher overflowed mid-generation); it is
// served when its compiled form fits the grammar limit, and a 400 naming the field and the
// limit when it does not.
TEST(ServerStructuredOutput, LongEnumWithACommonPrefixIsServedOrRefusedNamingTheLimit) {
  json values = json::array();
  std::set<std::string> allowed;
  for (int i = 0; i < 3000; ++i) {
    values.push_back("customer_account_status_" + std::to_string(i));
    allowed.insert(json(values.back()).dump());
  }
  const json format = {
      {"type", "json_schema"},
      {"json_schema", {{"name", "e"}, {"schema", {{"type", "string"}, {"enum", values}}}}}};
  Harness h;
  auto texts = finished(h, {{"response_format", format}, {"max_tokens", 40}}, 3);
  ASSERT_FALSE(texts.empty()) << "no run finished within 40 tokens";
  for (const std::string& t : texts) EXPECT_EQ(allowed.count(t), 1u) << t;
  ServerConfig small;
  small.http.request_memory_bytes = 1u << 20;  // grammar limit: 64 KiB
  small.http.max_body_bytes = 128u << 10;
  Harness tight(small);
  auto r = tight.post("/v1/chat/completions",
                      {{"messages", kUser}, {"max_tokens", 1}, {"response_format", format}});
  expect_error(r, 400, "", "response_format");
  EXPECT_NE(r->body.find("max_grammar_bytes"), std::string::npos) << r->body;
}

}  // namespace
}  // namespace kvw::server
