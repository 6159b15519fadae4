// Issue 31: a template without tool support still sees the tools and the tool history, in the
// Hermes format the hermes parser reads.
#include "tools/tool_prompt.h"

#include <gtest/gtest.h>

namespace kvw::tools {
namespace {

using ordered = nlohmann::ordered_json;

TEST(GenericToolPrompt, ListsToolsAndRewritesCallsAndResults) {
  const ordered tools = ordered::parse(
      R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])");
  std::vector<ChatMessage> msgs = {
      {.role = "system", .content = "Be brief."},
      {.role = "user", .content = "Weather in Oslo?"},
      {.role = "assistant",
       .content = "",
       .tool_calls = ordered::parse(R"([{"id": "call_1", "type": "function", "function":
                                        {"name": "get_weather", "arguments": {"city": "Oslo"}}}])")},
      {.role = "tool", .content = "{\"temp\": 3}", .tool_call_id = "call_1"},
      {.role = "tool", .content = "{\"wind\": 5}", .tool_call_id = "call_2"},
  };
  std::vector<ChatMessage> out = generic_tool_messages(msgs, tools);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].role, "system");
  EXPECT_TRUE(out[0].content.starts_with("Be brief.\n\n# Tools"));
  EXPECT_NE(out[0].content.find(R"("name":"get_weather")"), std::string::npos) << out[0].content;
  EXPECT_EQ(out[2].role, "assistant");
  EXPECT_EQ(
      out[2].content,
      "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}\n</tool_call>");
  EXPECT_EQ(out[3].role, "user");
  EXPECT_EQ(out[3].content,
            "<tool_response>\n{\"temp\": 3}\n</tool_response>\n<tool_response>\n{\"wind\": "
            "5}\n</tool_response>");
  // Without tools offered, only the history is rewritten.
  out = generic_tool_messages(msgs, ordered());
  EXPECT_EQ(out[0].content, "Be brief.");
}

}  // namespace
}  // namespace kvw::tools
