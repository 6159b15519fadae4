// Issue 31: the tool-call grammar accepts exactly the family's wrapper around arguments that
// follow the function's schema, and what it accepts the family's parser reads back.
#include "tools/tool_call_grammar.h"

#include <gtest/gtest.h>

#include "grammar/gbnf_parser.h"
#include "grammar/grammar_constraint.h"
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

// Issue 31: in a vocabulary where DeepSeek's markers are control tokens (no bytes in the trie),
// the trigger gets its token id and the grammar's other markers come along as control tokens
// it may write; driven token by token, the lazy grammar starts at the control token, allows
// each marker's token where the marker's text is due, and the output parses back.
TEST(ToolCallGrammar, MarkersThatAreControlTokensDriveTheLazyGrammar) {
  const std::vector<std::string> markers = {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>",
                                            "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
                                            "<｜tool▁calls▁end｜>"};
  // Ids: 0 EOS, 1-5 the markers, 6 an unrelated control token, then one token per character.
  std::vector<std::string> bytes = {"<eos>", "", "", "", "", "", ""};
  std::vector<ControlToken> control;
  for (int32_t i = 0; i < 5; ++i) control.push_back({.id = i + 1, .text = markers[i]});
  control.push_back({.id = 6, .text = "<|im_start|>"});
  for (int c = 0x20; c < 0x7F; ++c) bytes.push_back(std::string(1, (char)c));
  bytes.push_back("\n");
  auto trie = std::make_shared<const grammar::TokenTrie>(bytes, std::vector<int32_t>{0});
  auto text = tool_call_gbnf(ToolCallFormat::kDeepSeekV3, weather_and_time(), true, true);
  ASSERT_TRUE(text.ok()) << text.message();
  const auto triggers =
      with_control_tokens(tool_call_triggers(ToolCallFormat::kDeepSeekV3), *text, control);
  ASSERT_EQ(triggers.size(), 5u) << "the unrelated control token is left out";
  EXPECT_EQ(triggers[0].token_id, 1);
  EXPECT_TRUE(triggers[0].fires);
  for (size_t i = 1; i < 5; ++i) {
    EXPECT_EQ(triggers[i].token_id, (int32_t)i + 1);
    EXPECT_FALSE(triggers[i].fires);
  }

  grammar::GrammarConstraint c(grammar::parse_gbnf(*text).value(), trie);
  c.set_triggers(triggers);
  const std::string answer = "Sure.";
  const std::string call = markers[0] + markers[1] + "function" + markers[2] +
                           "get_time\n```json\n{}\n```" + markers[3] + markers[4];
  std::vector<uint64_t> allowed;
  std::string out;
  const std::string full = answer + call;
  for (size_t at = 0; at < full.size();) {
    const std::string_view rest = std::string_view(full).substr(at);
    int32_t tok = -1;
    for (int32_t i = 0; i < 5 && tok < 0; ++i) {
      if (rest.starts_with(markers[i])) tok = i + 1;  // the marker as its control token
    }
    if (tok < 0) tok = rest[0] == '\n' ? (int32_t)bytes.size() - 1 : 7 + (rest[0] - 0x20);
    c.fill_allowed(&allowed);
    ASSERT_TRUE((allowed[tok >> 6] >> (tok & 63)) & 1) << "at byte " << at;
    ASSERT_TRUE(c.accept(tok).ok()) << "at byte " << at;
    if (tok == 1) {
      // Right after the trigger: a call must begin; neither the list's end nor a call's end.
      c.fill_allowed(&allowed);
      EXPECT_EQ(allowed[0] & 0b111110, 0b000100u);
    }
    const std::string piece = tok <= 5 ? markers[tok - 1] : bytes[tok];
    out += piece;
    at += piece.size();
  }
  EXPECT_FALSE(c.waiting_for_trigger());
  c.fill_allowed(&allowed);
  EXPECT_EQ(allowed[0] & 1, 1u) << "EOS once the list has ended";
  const ParsedToolOutput p = parse_tool_calls(ToolCallFormat::kDeepSeekV3, out);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_time");
  EXPECT_EQ(p.content, "Sure.");
}

}  // namespace
}  // namespace kvw::tools
