// Issue 31: a tool-aware chat template (written the way Qwen2.5's is) sees the request's tools,
// the assistant's tool_calls with their arguments as objects, and the tool turns.
#include <gtest/gtest.h>

#include "chat/chat_template.h"

namespace kvw {
namespace {

using ordered = nlohmann::ordered_json;

constexpr const char* kQwenLike = R"TPL({%- if tools %}<|im_start|>system
# Tools
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools><|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == "assistant" and message.tool_calls is defined %}<|im_start|>assistant
{%- for tool_call in message.tool_calls %}
<tool_call>
{"name": "{{ tool_call.function.name }}", "arguments": {{ tool_call.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% elif message.role == "tool" %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %})TPL";

TEST(ToolTemplate, RendersToolsCallsAndResults) {
  auto tmpl = ChatTemplate::parse(kQwenLike);
  ASSERT_TRUE(tmpl.ok()) << tmpl.message();
  const ordered tools = ordered::parse(
      R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  std::vector<ChatMessage> msgs = {
      {.role = "user", .content = "Oslo?"},
      {.role = "assistant",
       .content = "",
       .tool_calls = ordered::parse(R"([{"id": "call_1", "type": "function", "function":
                                        {"name": "get_weather", "arguments": {"city": "Oslo"}}}])")},
      {.role = "tool", .content = "{\"temp\": 3}", .tool_call_id = "call_1"}};
  ChatRenderOptions opt;
  opt.tools = &tools;
  auto text = tmpl->render(msgs, opt);
  ASSERT_TRUE(text.ok()) << text.message();
  EXPECT_NE(text->find(R"({"type": "function", "function": {"name": "get_weather")"),
            std::string::npos)
      << *text;
  EXPECT_NE(text->find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                       "\"Oslo\"}}\n</tool_call>"),
            std::string::npos)
      << *text;
  EXPECT_NE(text->find("<tool_response>\n{\"temp\": 3}\n</tool_response>"), std::string::npos)
      << *text;
  // Without tools the variable is undefined and the system block disappears.
  auto plain = tmpl->render(std::span(msgs).first(1), ChatRenderOptions{});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->find("# Tools"), std::string::npos);
}

}  // namespace
}  // namespace kvw
