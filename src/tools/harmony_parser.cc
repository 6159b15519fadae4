// tools/harmony_parser.cc: GPT-OSS "harmony" output. The reply is a run of messages,
//   <|channel|>analysis<|message|>thinking...<|end|>
//   <|start|>assistant<|channel|>commentary to=functions.get_weather
//   <|constrain|>json<|message|>{"city":"Paris"}<|call|>
//   <|start|>assistant<|channel|>final<|message|>answer<|return|>
// (the recipient may also stand before <|channel|>). A message addressed to functions.NAME is a
// call; the final channel is the content; analysis is reasoning and is not returned as content.
#include "tools/tool_parser.h"

namespace kvw::tools {
namespace {

constexpr std::string_view kChannel = "<|channel|>", kMessage = "<|message|>";
constexpr std::string_view kEnds[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};

size_t message_end(std::string_view text, size_t from) {
  size_t best = text.size();
  for (std::string_view e : kEnds) best = std::min(best, text.find(e, from));
  return best;
}

// "to=functions.NAME" in a message header -> NAME (empty when the message is not a call).
std::string_view recipient(std::string_view header) {
  constexpr std::string_view kTo = "to=functions.";
  const size_t at = header.find(kTo);
  if (at == std::string_view::npos) return {};
  std::string_view name = header.substr(at + kTo.size());
  const size_t stop = name.find_first_of(" \t\n<");
  return name.substr(0, stop);
}

}  // namespace

ParsedToolOutput parse_harmony(std::string_view text) {
  const ParsedToolOutput as_content{.content = std::string(text), .calls = {}};
  if (text.find(kChannel) == std::string_view::npos) return as_content;
  ParsedToolOutput out;
  size_t at = 0;
  while (true) {
    const size_t msg = text.find(kMessage, at);
    if (msg == std::string_view::npos) break;
    const std::string_view header = text.substr(at, msg - at);
    const size_t body = msg + kMessage.size();
    const size_t end = message_end(text, body);
    const std::string_view payload = text.substr(body, end - body);
    const std::string_view name = recipient(header);
    if (!name.empty()) {
      std::optional<ToolCall> call = call_from_parts(name, payload);
      if (!call) return as_content;
      out.calls.push_back(std::move(*call));
    } else if (header.find("final") != std::string_view::npos) {
      out.content += payload;
    }
    at = end;
    for (std::string_view e : kEnds) {
      if (text.substr(at).starts_with(e) && e != "<|start|>") at += e.size();
    }
  }
  if (out.calls.empty() && out.content.empty()) return as_content;
  out.content = std::string(trim(out.content));
  return out;
}

}  // namespace kvw::tools
