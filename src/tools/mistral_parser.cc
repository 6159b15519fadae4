// tools/mistral_parser.cc: Mistral tool calls, in the two shapes its tokenizers use:
//   v3 / v7 (Mistral 7B v0.3, Nemo, Small 3):  text[TOOL_CALLS][{"name": "f", "arguments": {...}}]
//   v11+ (Magistral, Small 3.2, Devstral):    text[TOOL_CALLS]f[ARGS]{...}[TOOL_CALLS]g[ARGS]{...}
#include "tools/tool_parser.h"

namespace kvw::tools {
namespace {

constexpr std::string_view kCalls = "[TOOL_CALLS]", kArgs = "[ARGS]";

// One "[TOOL_CALLS]..." section (marker removed) appended to `calls`; false when malformed.
bool parse_section(std::string_view s, std::vector<ToolCall>& calls) {
  s = trim(s);
  if (!s.empty() && s[0] == '[') {  // a JSON list of calls
    const size_t end = json_value_end(s, 0);
    if (end == std::string_view::npos || !trim(s.substr(end)).empty()) return false;
    auto list = nlohmann::ordered_json::parse(s.substr(0, end), nullptr, false);
    if (!list.is_array() || list.empty()) return false;
    for (const auto& item : list) {
      std::optional<ToolCall> call = call_from_json(item);
      if (!call) return false;
      calls.push_back(std::move(*call));
    }
    return true;
  }
  if (!s.empty() && s[0] == '{') {  // a single object without the list
    std::optional<ToolCall> call = call_from_json(nlohmann::ordered_json::parse(s, nullptr, false));
    if (!call) return false;
    calls.push_back(std::move(*call));
    return true;
  }
  const size_t args = s.find(kArgs);
  if (args == std::string_view::npos) return false;
  std::optional<ToolCall> call = call_from_parts(s.substr(0, args), s.substr(args + kArgs.size()));
  if (!call) return false;
  calls.push_back(std::move(*call));
  return true;
}

}  // namespace

ParsedToolOutput parse_mistral(std::string_view text) {
  const size_t first = text.find(kCalls);
  if (first == std::string_view::npos) return {.content = std::string(text), .calls = {}};
  ParsedToolOutput out{.content = std::string(trim(text.substr(0, first))), .calls = {}};
  size_t at = first;
  while (at != std::string_view::npos) {
    const size_t begin = at + kCalls.size();
    const size_t next = text.find(kCalls, begin);
    const std::string_view section =
        text.substr(begin, next == std::string_view::npos ? std::string_view::npos : next - begin);
    if (!parse_section(section, out.calls)) return {.content = std::string(text), .calls = {}};
    at = next;
  }
  return out;
}

}  // namespace kvw::tools
