// Issue 31: every family's tool-call format parsed from hand-written outputs in the shape the
// models write them; malformed calls come back as plain content.
#include "tools/tool_parser.h"

#include <gtest/gtest.h>

namespace kvw::tools {
namespace {

using nlohmann::json;

void expect_call(const ToolCall& c, const std::string& name, const json& args) {
  EXPECT_EQ(c.name, name);
  EXPECT_EQ(json::parse(c.arguments), args) << c.arguments;
}

TEST(HermesParser, ReadsQwenCallsAndTheTextAroundThem) {
  const std::string out =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
      "\"arguments\": {}}\n</tool_call>";
  ParsedToolOutput p = parse_tool_calls(ToolCallFormat::kHermes, out);
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p.calls[0], "get_weather", {{"city", "Paris"}, {"unit", "c"}});
  expect_call(p.calls[1], "get_time", json::object());
  EXPECT_EQ(p.content, "Let me check.");
  // Argument order is the model's, not sorted.
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Paris","unit":"c"})");
}

TEST(HermesParser, AcceptsAMissingCloseTagAndStringArguments) {
  ParsedToolOutput p =
      parse_hermes("<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}\n");
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "f", {{"x", 1}});
  EXPECT_EQ(p.content, "");
}

TEST(HermesParser, MalformedCallIsContent) {
  for (const std::string bad :
       {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": }\n</tool_call>",
        "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>not json</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", "plain answer"}) {
    ParsedToolOutput p = parse_hermes(bad);
    EXPECT_TRUE(p.calls.empty()) << bad;
    EXPECT_EQ(p.content, bad);
  }
}

TEST(Llama3JsonParser, ReadsBareJsonPythonTagAndSemicolonSeparatedCalls) {
  ParsedToolOutput p =
      parse_llama3_json(" {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}");
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "get_weather", {{"city", "Paris"}});
  EXPECT_EQ(p.content, "");
  p = parse_llama3_json(
      "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"n\": 1}}; {\"name\": \"b\", "
      "\"parameters\": {\"s\": \"}{\"}}");
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p.calls[0], "a", {{"n", 1}});
  expect_call(p.calls[1], "b", {{"s", "}{"}});
}

TEST(Llama3JsonParser, TextOrBrokenJsonIsContent) {
  for (const std::string bad :
       {"The answer is {\"name\": \"x\"}", "{\"name\": \"f\", \"parameters\": {",
        "{\"city\": \"Paris\"}", "{\"name\": \"f\", \"parameters\": {}} and more"}) {
    ParsedToolOutput p = parse_llama3_json(bad);
    EXPECT_TRUE(p.calls.empty()) << bad;
    EXPECT_EQ(p.content, bad);
  }
}

TEST(MistralParser, ReadsTheJsonListForm) {
  ParsedToolOutput p = parse_mistral(
      "Sure.[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
      "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}]");
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p.calls[0], "get_weather", {{"city", "Paris"}});
  expect_call(p.calls[1], "get_time", {{"tz", "CET"}});
  EXPECT_EQ(p.content, "Sure.");
}

TEST(MistralParser, ReadsTheNameArgsFormOfNewerTokenizers) {
  ParsedToolOutput p = parse_mistral(
      "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{}");
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p.calls[0], "get_weather", {{"city", "Paris"}});
  expect_call(p.calls[1], "get_time", json::object());
}

TEST(MistralParser, MalformedIsContent) {
  for (const std::string bad : {"[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}",
                                "[TOOL_CALLS]get_weather{\"city\": 1}", "[TOOL_CALLS][]"}) {
    ParsedToolOutput p = parse_mistral(bad);
    EXPECT_TRUE(p.calls.empty()) << bad;
    EXPECT_EQ(p.content, bad);
  }
}

TEST(DeepSeekParser, ReadsV3FencedCalls) {
  const std::string out =
      "I will look.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
      "```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool"
      "▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  ParsedToolOutput p = parse_deepseek_v3(out);
  ASSERT_EQ(p.calls.size(), 2u);
  expect_call(p.calls[0], "get_weather", {{"city", "Paris"}});
  expect_call(p.calls[1], "get_time", json::object());
  EXPECT_EQ(p.content, "I will look.");
}

TEST(DeepSeekParser, ReadsV31CallsAndRefusesBrokenOnes) {
  ParsedToolOutput p = parse_deepseek_v3(
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": "
      "\"Oslo\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "get_weather", {{"city", "Oslo"}});
  const std::string bad =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\":\n```"
      "<｜tool▁call▁end｜>";
  p = parse_deepseek_v3(bad);
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, bad);
}

TEST(HarmonyParser, ReadsCommentaryCallsAndTheFinalChannel) {
  ParsedToolOutput p = parse_harmony(
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>");
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "get_weather", {{"city", "Paris"}});
  EXPECT_EQ(p.content, "");  // analysis is reasoning, not content
  p = parse_harmony(
      "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>"
      "It is sunny.<|return|>");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "It is sunny.");
  // The recipient may stand before the channel; the call may end at the end of the text.
  p = parse_harmony(
      "<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{\"q\": 2}");
  ASSERT_EQ(p.calls.size(), 1u);
  expect_call(p.calls[0], "lookup", {{"q", 2}});
}

TEST(HarmonyParser, MalformedArgumentsAreContent) {
  const std::string bad =
      "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"q\": <|call|>";
  ParsedToolOutput p = parse_harmony(bad);
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, bad);
}

TEST(ToolFormat, DetectsTheFamilyFromTemplateOrVocabulary) {
  auto none = [](std::string_view) { return false; };
  EXPECT_EQ(detect_format("{% if tools %}<tool_call>{% endif %}", none), ToolCallFormat::kHermes);
  EXPECT_EQ(detect_format("[AVAILABLE_TOOLS] [TOOL_CALLS]", none), ToolCallFormat::kMistral);
  EXPECT_EQ(detect_format("<|start_header_id|>ipython {{ tools }}", none),
            ToolCallFormat::kLlama3Json);
  EXPECT_EQ(detect_format("{{'<｜tool▁calls▁begin｜>'}}", none), ToolCallFormat::kDeepSeekV3);
  EXPECT_EQ(detect_format("<|channel|>commentary<|call|>", none), ToolCallFormat::kHarmony);
  EXPECT_EQ(detect_format("plain chatml", none), ToolCallFormat::kHermes);
  auto mistral_vocab = [](std::string_view t) { return t == "[TOOL_CALLS]"; };
  EXPECT_EQ(detect_format("plain", mistral_vocab), ToolCallFormat::kMistral);
  EXPECT_EQ(format_from_name("llama3_json"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(format_from_name("openai"), ToolCallFormat::kHarmony);
  EXPECT_FALSE(format_from_name("nope").has_value());
}

}  // namespace
}  // namespace kvw::tools
