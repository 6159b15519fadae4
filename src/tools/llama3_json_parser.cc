// tools/llama3_json_parser.cc: Llama 3.1 / 3.2 / 3.3 JSON tool calls. With custom tools the
// template asks for a bare JSON object as the whole answer,
//   {"name": "get_weather", "parameters": {"city": "Paris"}}
// optionally after <|python_tag|>, and several calls separated by ';' (as vLLM's llama3_json
// parser accepts). Anything else is content: a reply that merely contains JSON is not a call.
#include "tools/tool_parser.h"

namespace kvw::tools {

ParsedToolOutput parse_llama3_json(std::string_view text) {
  constexpr std::string_view kTag = "<|python_tag|>";
  const ParsedToolOutput as_content{.content = std::string(text), .calls = {}};
  std::string_view rest = trim(text);
  std::string content;
  if (const size_t tag = rest.find(kTag); tag != std::string_view::npos) {
    content = std::string(trim(rest.substr(0, tag)));
    rest = trim(rest.substr(tag + kTag.size()));
  }
  if (rest.empty() || rest[0] != '{') return as_content;
  ParsedToolOutput out{.content = std::move(content), .calls = {}};
  while (!rest.empty()) {
    const size_t end = json_value_end(rest, 0);
    if (end == std::string_view::npos) return as_content;
    auto j = nlohmann::ordered_json::parse(rest.substr(0, end), nullptr, false);
    std::optional<ToolCall> call = call_from_json(j);
    if (!call) return as_content;
    out.calls.push_back(std::move(*call));
    rest = trim(rest.substr(end));
    if (!rest.empty() && rest[0] == ';') rest = trim(rest.substr(1));
    if (!rest.empty() && rest[0] != '{') return as_content;
  }
  return out;
}

}  // namespace kvw::tools
