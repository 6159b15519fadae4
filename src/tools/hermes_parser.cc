// tools/hermes_parser.cc: Hermes 2 Pro / Qwen2.5 / Qwen3 tool calls, as their chat templates
// ask for them:
//   text <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>
// Several calls are several blocks. A last block whose </tool_call> never came (the model
// stopped right after the JSON) still counts when its JSON is whole.
#include "tools/tool_parser.h"

namespace kvw::tools {

ParsedToolOutput parse_hermes(std::string_view text) {
  constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  ParsedToolOutput out;
  std::string content;
  size_t at = 0;
  while (true) {
    const size_t open = text.find(kOpen, at);
    if (open == std::string_view::npos) break;
    content += text.substr(at, open - at);
    const size_t body = open + kOpen.size();
    size_t close = text.find(kClose, body);
    const size_t body_end = close == std::string_view::npos ? text.size() : close;
    auto j = nlohmann::ordered_json::parse(trim(text.substr(body, body_end - body)), nullptr,
                                           /*allow_exceptions=*/false);
    std::optional<ToolCall> call = call_from_json(j);
    if (!call) return ParsedToolOutput{.content = std::string(text), .calls = {}};
    out.calls.push_back(std::move(*call));
    at = close == std::string_view::npos ? text.size() : close + kClose.size();
  }
  if (at < text.size()) content += text.substr(at);
  out.content = std::string(trim(content));
  if (out.calls.empty()) out.content = std::string(text);
  return out;
}

}  // namespace kvw::tools
