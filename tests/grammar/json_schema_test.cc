#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include "grammar/matcher.h"

namespace kvw::grammar {
namespace {

bool matches(const Result<std::shared_ptr<const Grammar>>& g, std::string_view text) {
  EXPECT_TRUE(g.ok()) << g.message();
  if (!g.ok()) return false;
  Matcher m(g.value());
  return m.accept_bytes(text) && m.can_end();
}

std::string error_of(const char* schema) {
  auto g = compile_json_schema(std::string_view(schema));
  return g.ok() ? "OK" : g.message();
}

TEST(JsonSchema, ObjectPropertiesInSchemaOrderOptionalOnesSkippable) {
  auto g = compile_json_schema(std::string_view(R"({"type":"object","properties":{
      "b":{"type":"integer"},"a":{"type":"string"},"c":{"type":"boolean"}},
      "required":["a"]})"));
  EXPECT_TRUE(matches(g, R"({"b":1,"a":"x","c":true})"));
  EXPECT_TRUE(matches(g, R"({"a":"x"})"));
  EXPECT_TRUE(matches(g, R"({"b": -20, "a": "x"})"));
  EXPECT_TRUE(matches(g, "{\n  \"a\": \"\\u00e9\\n\",\n  \"c\": false\n}"));
  EXPECT_FALSE(matches(g, R"({"a":"x","b":1})"));  // order
  EXPECT_FALSE(matches(g, R"({"b":1})"));          // required a missing
  EXPECT_FALSE(matches(g, R"({"a":"x","d":1})"));  // never an extra property
  EXPECT_FALSE(matches(g, R"({"a":"x",})"));
  EXPECT_FALSE(matches(g, R"({"a":"x"}   )"));  // nothing after the value
}

TEST(JsonSchema, WhitespaceIsBounded) {
  auto g = compile_json_object();
  EXPECT_TRUE(matches(g, "{ \"k\" : [1, 2.5e-3, null] }"));
  EXPECT_TRUE(matches(g, "{\n        \"k\": {}}"));
  EXPECT_FALSE(matches(g, "{  \"k\": 1}"));            // two spaces
  EXPECT_FALSE(matches(g, "{\n          \"k\": 1}"));  // newline + 10 spaces
  EXPECT_FALSE(matches(g, "[1]"));                     // json_object: an object only
}

TEST(JsonSchema, EnumConstArraysAndBounds) {
  EXPECT_TRUE(
      matches(compile_json_schema(std::string_view(R"({"enum":["red",1,null,{"a":[true]}]})")),
              R"({"a":[true]})"));
  EXPECT_FALSE(
      matches(compile_json_schema(std::string_view(R"({"enum":["red","green"]})")), R"("blue")"));
  EXPECT_TRUE(matches(compile_json_schema(std::string_view(R"({"const":"x\"y"})")), R"("x\"y")"));
  auto arr = compile_json_schema(
      std::string_view(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})"));
  EXPECT_FALSE(matches(arr, "[1]"));
  EXPECT_TRUE(matches(arr, "[1,2]"));
  EXPECT_TRUE(matches(arr, "[1, 2, 3]"));
  EXPECT_FALSE(matches(arr, "[1,2,3,4]"));
  EXPECT_FALSE(matches(arr, "[1,2.5]"));
  auto str =
      compile_json_schema(std::string_view(R"({"type":"string","minLength":2,"maxLength":3})"));
  EXPECT_FALSE(matches(str, R"("a")"));
  EXPECT_TRUE(matches(str, R"("\u00e9\n")"));
  EXPECT_FALSE(matches(str, R"("abcd")"));
}

TEST(JsonSchema, AnyOfTypeListsNullableAndRefs) {
  auto g = compile_json_schema(std::string_view(R"({
    "$defs": {"node": {"type":"object","properties":{
        "v":{"type":"integer"},
        "next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},
      "required":["v","next"]}},
    "$ref": "#/$defs/node"})"));
  EXPECT_TRUE(matches(g, R"({"v":1,"next":{"v":2,"next":null}})"));
  EXPECT_FALSE(matches(g, R"({"v":1,"next":{"v":2}})"));
  auto t = compile_json_schema(std::string_view(R"({"type":["string","null"]})"));
  EXPECT_TRUE(matches(t, "null"));
  EXPECT_TRUE(matches(t, R"("s")"));
  EXPECT_FALSE(matches(t, "1"));
  auto defs = compile_json_schema(std::string_view(
      R"({"definitions":{"n":{"type":"number","nullable":true}},"$ref":"#/definitions/n"})"));
  EXPECT_TRUE(matches(defs, "null"));
  EXPECT_TRUE(matches(defs, "-0.5E+3"));
}

TEST(JsonSchema, RefusesUnsupportedKeywordsNamingThemAndWhere) {
  EXPECT_EQ(
      error_of(R"({"type":"object","properties":{"zip":{"type":"string","pattern":"^[0-9]+$"}}})"),
      "unsupported JSON Schema keyword 'pattern' at #/properties/zip");
  EXPECT_EQ(error_of(R"({"type":"string","format":"email"})"),
            "unsupported JSON Schema keyword 'format' at #");
  EXPECT_EQ(error_of(R"({"type":"integer","minimum":3})"),
            "unsupported JSON Schema keyword 'minimum' at #");
  EXPECT_EQ(error_of(R"({"allOf":[{}]})"), "unsupported JSON Schema keyword 'allOf' at #");
  EXPECT_NE(error_of(R"({"$ref":"https://x/y"})").find("unsupported or unresolved '$ref'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"$ref":"#/$defs/missing"})").find("unresolved"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"object","additionalProperties":{"type":"string"}})")
                .find("'additionalProperties' (a schema)"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type":"object","properties":{"a":{}},"required":["b"]})")
                .find("not in 'properties'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"anyOf":[{"type":"string"}],"properties":{}})").find("beside 'anyOf'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type":"date"})").find("type 'date'"), std::string::npos);
  EXPECT_NE(error_of("false").find("allows no value"), std::string::npos);
  EXPECT_EQ(error_of("{not json"), "JSON schema is not valid JSON");
}

TEST(JsonSchema, RefusesDeepNestingIncludingChainsOfRefs) {
  std::string defs;
  for (int i = 0; i < 100; ++i) {
    defs += (i ? "," : "") + ("\"d" + std::to_string(i) + "\":{\"$ref\":\"#/$defs/d" +
                              std::to_string(i + 1) + "\"}");
  }
  const std::string chain =
      R"({"$defs":{)" + defs + R"(,"d100":{"type":"integer"}},"$ref":"#/$defs/d0"})";
  EXPECT_NE(error_of(chain.c_str()).find("nesting deeper than 64"), std::string::npos);
  std::string nested = "{}";
  for (int i = 0; i < 100; ++i) nested = R"({"type":"array","items":)" + nested + "}";
  EXPECT_NE(error_of(nested.c_str()).find("nesting deeper than 64"), std::string::npos);
}

TEST(JsonSchema, RefusesSchemasOverTheCompiledSizeLimit) {
  std::string props;
  for (int i = 0; i < 200; ++i)
    props += (i ? "," : "") + ("\"p" + std::to_string(i) + "\":{\"type\":\"string\"}");
  const std::string schema = R"({"type":"object","properties":{)" + props + "}}";
  auto g = compile_json_schema(std::string_view(schema), 8 * 1024);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("over the limit of 8192 bytes"), std::string::npos) << g.message();
  auto ok = compile_json_schema(std::string_view(schema), 1 << 20);
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_GT(ok.value()->size_bytes(), 8u * 1024);
}

// A long enum (3,000 strings sharing a prefix) compiled as a plain alternation started 3,000
// stacks, past Matcher::kMaxStacks: the request failed mid-generation (a 500). The strings are
// now factored by common prefixes, so the matcher follows a handful of stacks.
TEST(JsonSchema, LongEnumWithACommonPrefixIsFollowedWithFewStacks) {
  nlohmann::ordered_json values = nlohmann::ordered_json::array();
  for (int i = 0; i < 3000; ++i) values.push_back("customer_account_status_" + std::to_string(i));
  auto g = compile_json_schema(nlohmann::ordered_json{{"enum", values}}, 4u << 20);
  ASSERT_TRUE(g.ok()) << g.message();
  Matcher m(g.value());
  EXPECT_LE(m.num_stacks(), 2u);
  ASSERT_TRUE(m.accept_bytes("\"customer_account_status_"));
  EXPECT_LE(m.num_stacks(), 10u);
  ASSERT_TRUE(m.accept_bytes("29"));
  EXPECT_TRUE(m.accept_bytes("99\"")) << "the last value";
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.overflowed());
  EXPECT_TRUE(matches(g, R"("customer_account_status_0")"));
  EXPECT_TRUE(matches(g, R"("customer_account_status_30")"));
  EXPECT_FALSE(matches(g, R"("customer_account_status_3000")"));
  EXPECT_FALSE(matches(g, R"("customer_account_status_")"));
  EXPECT_FALSE(matches(g, R"("customer_account_status_01")"));
  // Values that are prefixes of others, mixed types and duplicates.
  auto mixed = compile_json_schema(std::string_view(R"({"enum":["a","ab","abc","ab",1,10,null]})"));
  for (const char* ok : {R"("a")", R"("ab")", R"("abc")", "1", "10", "null"})
    EXPECT_TRUE(matches(mixed, ok)) << ok;
  for (const char* bad : {R"("abcd")", R"("")", "100", R"("b")"})
    EXPECT_FALSE(matches(mixed, bad)) << bad;
}

}  // namespace
}  // namespace kvw::grammar
