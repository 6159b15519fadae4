// Issue 31: the tool-call grammar accepts exactly the family's wrapper around arguments that
// follow the function's schema, and what it accepts the family's parser reads back.
#include "tools/tool_call_grammar.h"

#include <gtest/gtest.h>

#include "grammar/gbnf_parser.h"
#include "grammar/matcher.h"
#include "tools/tool_parser.h"

namespace kvw::tools {
namespace {

using ordered = nlohmann::ordered_json;

std::vector<FunctionSpec> weather_and_time() {
  return {FunctionSpec{.name = "get_weather",
                       .description = "",
                       .parameters = ordered::parse(R"({"type": "object", "properties": {
                         "city": {"type": "string"}, "days": {"type": "integer"}},
                         "required": ["city", "days"], "additionalProperties": false})")},
          FunctionSpec{.name = "get_time", .description = "", .parameters = nullptr}};
}

bool accepts(const std::shared_ptr<const grammar::Grammar>& g, std::string_view text) {
  grammar::Matcher m(g);
  return m.accept_bytes(text) && m.can_end();
}

TEST(ToolCallGrammar, EachFamilyAcceptsItsWrapperAndTheParserReadsItBack) {
  struct Case {
    ToolCallFormat format;
    std::string text;
  };
  const std::vector<Case> cases = {
      {ToolCallFormat::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": "
       "2}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"},
      {ToolCallFormat::kLlama3Json,
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"days\": 2}}; {\"name\": "
       "\"get_time\", \"parameters\": {}}"},
      {ToolCallFormat::kMistral,
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": "
       "2}}, {\"name\": \"get_time\", \"arguments\": {}}]"},
      {ToolCallFormat::kDeepSeekV3,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"
       "\"city\": \"Oslo\", \"days\": "
       "2}\n```<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool"
       "▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
  };
  const auto fns = weather_and_time();
  for (const Case& c : cases) {
    auto text = tool_call_gbnf(c.format, fns, /*parallel=*/true);
    ASSERT_TRUE(text.ok()) << text.message();
    auto g = grammar::parse_gbnf(*text);
    ASSERT_TRUE(g.ok()) << g.message() << "\n" << *text;
    EXPECT_TRUE(accepts(*g, c.text)) << format_name(c.format) << "\n" << *text;
    ParsedToolOutput p = parse_tool_calls(c.format, c.text);
    ASSERT_EQ(p.calls.size(), 2u) << format_name(c.format);
    EXPECT_EQ(p.calls[0].name, "get_weather");
    EXPECT_EQ(p.calls[0].arguments, R"({"city":"Oslo","days":2})");
    // One call only without parallel calls.
    auto single = grammar::parse_gbnf(*tool_call_gbnf(c.format, fns, /*parallel=*/false));
    ASSERT_TRUE(single.ok());
    EXPECT_FALSE(accepts(*single, c.text)) << format_name(c.format);
  }
}

TEST(ToolCallGrammar, HarmonyWritesOneCommentaryMessage) {
  auto g = grammar::parse_gbnf(*tool_call_gbnf(ToolCallFormat::kHarmony, weather_and_time(), true));
  ASSERT_TRUE(g.ok()) << g.message();
  const std::string text =
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": "
      "\"Oslo\", \"days\": 2}";
  EXPECT_TRUE(accepts(*g, text));
  EXPECT_EQ(parse_harmony(text).calls.size(), 1u);
}

TEST(ToolCallGrammar, RefusesArgumentsThatBreakTheSchema) {
  auto g = grammar::parse_gbnf(*tool_call_gbnf(ToolCallFormat::kHermes, weather_and_time(), true));
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(accepts(*g,
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                       "{\"city\": 3, \"days\": 2}}\n</tool_call>"));
  EXPECT_FALSE(accepts(*g,
                       "<tool_call>\n{\"name\": \"get_wether\", \"arguments\": {}}\n"
                       "</tool_call>"));
  EXPECT_FALSE(accepts(*g, "Sure! <tool_call>"));
}

TEST(ToolCallGrammar, UnsupportedSchemaNamesTheFunction) {
  std::vector<FunctionSpec> fns = {
      FunctionSpec{.name = "f",
                   .description = "",
                   .parameters = ordered::parse(R"({"type": "string", "pattern": "a+"})")}};
  auto text = tool_call_gbnf(ToolCallFormat::kHermes, fns, true);
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.message().find("'f'"), std::string::npos) << text.message();
  EXPECT_NE(text.message().find("pattern"), std::string::npos) << text.message();
}

// tool_choice "auto": the lazy grammar begins with each of its format's triggers (it is fed
// the output from the trigger's first byte), and Llama 3's may open with <|python_tag|>.
TEST(ToolCallGrammar, LazyGrammarBeginsWithEveryTriggerOfItsFormat) {
  for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json,
                           ToolCallFormat::kMistral, ToolCallFormat::kDeepSeekV3}) {
    SCOPED_TRACE(format_name(f));
    auto text = tool_call_gbnf(f, weather_and_time(), /*parallel=*/true, /*lazy=*/true);
    ASSERT_TRUE(text.ok()) << text.message();
    auto g = grammar::parse_gbnf(*text);
    ASSERT_TRUE(g.ok()) << g.message();
    const auto triggers = tool_call_triggers(f);
    ASSERT_FALSE(triggers.empty());
    for (const grammar::GrammarTrigger& t : triggers) {
      grammar::Matcher m(g.value());
      EXPECT_TRUE(m.accept_bytes(t.text)) << t.text;
    }
  }
  EXPECT_TRUE(tool_call_triggers(ToolCallFormat::kHarmony).empty());
  auto lazy = grammar::parse_gbnf(
      *tool_call_gbnf(ToolCallFormat::kLlama3Json, weather_and_time(), true, true));
  EXPECT_TRUE(accepts(lazy.value(), "<|python_tag|>{\"name\": \"get_time\", \"parameters\": {}}"));
  auto forced = grammar::parse_gbnf(
      *tool_call_gbnf(ToolCallFormat::kLlama3Json, weather_and_time(), true, false));
  EXPECT_FALSE(
      accepts(forced.value(), "<|python_tag|>{\"name\": \"get_time\", \"parameters\": {}}"));
}

}  // namespace
}  // namespace kvw::tools
