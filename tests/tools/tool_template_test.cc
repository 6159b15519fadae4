// Issue 31: a tool-aware chat template (written the way Qwen2.5's is) sees the request's tools,
// the assistant's tool_calls with their arguments as objects, and the tool turns.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "tools/tool_parser.h"

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

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(KVW_CHAT_TEMPLATE_DIR) + "/" + name, std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing template file " << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The published templates of tool-capable families (tests/chat/templates) render the tools,
// the assistant's call and the tool's result, and name the format their models write.
TEST(ToolTemplate, RealTemplatesRenderToolRoundTripsAndNameTheirFormat) {
  struct Case {
    const char* file;
    tools::ToolCallFormat format;
  };
  const Case cases[] = {{"qwen2.5-instruct.jinja", tools::ToolCallFormat::kHermes},
                        {"qwen3.jinja", tools::ToolCallFormat::kHermes},
                        {"llama3.2-instruct.jinja", tools::ToolCallFormat::kLlama3Json},
                        {"mistral-nemo.jinja", tools::ToolCallFormat::kMistral}};
  // DeepSeek's template renders calls but never lists tools (the server then uses the generic
  // prompt); its calls still name the format.
  EXPECT_EQ(tools::detect_format(read_template("deepseek-r1-distill.jinja"), nullptr),
            tools::ToolCallFormat::kDeepSeekV3);
  const ordered tools = ordered::parse(
      R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
          "required": ["city"]}}}])");
  // Mistral's template wants 9-character alphanumeric call ids.
  const std::vector<ChatMessage> msgs = {
      {.role = "user", .content = "Weather in Oslo?"},
      {.role = "assistant",
       .content = "",
       .tool_calls = ordered::parse(R"([{"id": "abc123XYZ", "type": "function", "function":
                                        {"name": "get_weather", "arguments": {"city": "Oslo"}}}])")},
      {.role = "tool", .content = "{\"temp_c\": 3}", .tool_call_id = "abc123XYZ"}};
  for (const Case& c : cases) {
    const std::string source = read_template(c.file);
    EXPECT_EQ(tools::detect_format(source, nullptr), c.format) << c.file;
    auto tmpl = ChatTemplate::parse(source);
    ASSERT_TRUE(tmpl.ok()) << c.file << ": " << tmpl.message();
    ChatRenderOptions opt;
    opt.bos_token = "<s>";
    opt.eos_token = "</s>";
    opt.tools = &tools;
    auto text = tmpl->render(msgs, opt);
    ASSERT_TRUE(text.ok()) << c.file << ": " << text.message();
    EXPECT_NE(text->find("Weather now"), std::string::npos) << c.file << "\n" << *text;
    EXPECT_NE(text->find("Oslo\"}"), std::string::npos) << c.file << " (the call)\n" << *text;
    EXPECT_NE(text->find("temp_c"), std::string::npos) << c.file << " (the result)\n" << *text;
  }
}

}  // namespace
}  // namespace kvw
