// tools/deepseek_parser.cc: DeepSeek-V3 / R1 tool calls, and V3.1's shorter form:
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
//   ```json
//   {"city": "Paris"}
//   ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//   V3.1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city":
//   "Paris"}<｜tool▁call▁end｜>...
#include "tools/tool_parser.h"

namespace kvw::tools {
namespace {

constexpr std::string_view kCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kCallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kSep = "<｜tool▁sep｜>";

}  // namespace

std::optional<ToolCall> parse_deepseek_call(std::string_view s) {
  const size_t sep = s.find(kSep);
  if (sep == std::string_view::npos) return std::nullopt;
  std::string_view head = trim(s.substr(0, sep));
  std::string_view rest = s.substr(sep + kSep.size());
  if (head == "function") {  // V3: the name is the rest of the line, then a fenced JSON block
    const size_t nl = rest.find('\n');
    if (nl == std::string_view::npos) return std::nullopt;
    head = rest.substr(0, nl);
    rest = trim(rest.substr(nl + 1));
    if (rest.starts_with("```")) {
      const size_t body = rest.find('\n');
      const size_t fence = rest.rfind("```");
      if (body == std::string_view::npos || fence <= body) return std::nullopt;
      rest = rest.substr(body + 1, fence - body - 1);
    }
  }
  return call_from_parts(head, rest);
}

ParsedToolOutput parse_deepseek_v3(std::string_view text) {
  const ParsedToolOutput as_content{.content = std::string(text), .calls = {}};
  size_t start = text.find(kCallsBegin);
  if (start == std::string_view::npos) start = text.find(kCallBegin);
  if (start == std::string_view::npos) return as_content;
  ParsedToolOutput out{.content = std::string(trim(text.substr(0, start))), .calls = {}};
  size_t at = start;
  while ((at = text.find(kCallBegin, at)) != std::string_view::npos) {
    const size_t body = at + kCallBegin.size();
    size_t end = text.find(kCallEnd, body);
    if (end == std::string_view::npos) end = text.find(kCallsEnd, body);  // cut short
    const size_t body_end = end == std::string_view::npos ? text.size() : end;
    std::optional<ToolCall> call = parse_deepseek_call(text.substr(body, body_end - body));
    if (!call) return as_content;
    out.calls.push_back(std::move(*call));
    at = body_end;
  }
  if (out.calls.empty()) return as_content;
  return out;
}

}  // namespace kvw::tools
