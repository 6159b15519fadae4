// tools/tool_stream_calls.cc: where the first whole call of a streamed output ends, per
// format, so ToolStreamFilter can send each call as soon as it closes (hermes, llama3_json,
// mistral, DeepSeek). Harmony has its own filter (harmony_stream.h).
#include "tools/tool_parser.h"
#include "tools/tool_stream.h"

namespace kvw::tools {
namespace {

using ordered = nlohmann::ordered_json;

size_t skip_space(std::string_view s, size_t at) {
  while (at < s.size() && (s[at] == ' ' || s[at] == '\t' || s[at] == '\r' || s[at] == '\n')) ++at;
  return at;
}

LeadingCalls one_call(size_t bytes, std::optional<ToolCall> call) {
  if (!call) return {.bytes = 0, .calls = {}, .malformed = true};
  return {.bytes = bytes, .calls = {std::move(*call)}, .malformed = false};
}

// <tool_call>{...}</tool_call>
LeadingCalls hermes(std::string_view text) {
  constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  if (!text.starts_with(kOpen)) return {};
  const size_t close = text.find(kClose, kOpen.size());
  if (close == std::string_view::npos) return {};
  const std::string_view body = text.substr(kOpen.size(), close - kOpen.size());
  return one_call(close + kClose.size(),
                  call_from_json(ordered::parse(trim(body), nullptr, /*allow_exceptions=*/false)));
}

// [<|python_tag|>]{"name": ..., "parameters": ...}: whole at the object's last brace.
LeadingCalls llama3_json(std::string_view text) {
  constexpr std::string_view kTag = "<|python_tag|>";
  size_t at = skip_space(text, text.starts_with(kTag) ? kTag.size() : 0);
  if (at == text.size()) return {};
  if (text[at] != '{') return {.bytes = 0, .calls = {}, .malformed = true};
  const size_t end = json_value_end(text, at);
  if (end == std::string_view::npos) return {};
  return one_call(end, call_from_json(ordered::parse(text.substr(at, end - at), nullptr, false)));
}

// [TOOL_CALLS][{...}, ...] (whole at the list's end), [TOOL_CALLS]{...}, or
// [TOOL_CALLS]name[ARGS]{...}.
LeadingCalls mistral(std::string_view text) {
  constexpr std::string_view kCalls = "[TOOL_CALLS]", kArgs = "[ARGS]";
  if (!text.starts_with(kCalls)) return {};
  const size_t at = skip_space(text, kCalls.size());
  if (at == text.size()) return {};
  if (text[at] == '[' || text[at] == '{') {
    const size_t end = json_value_end(text, at);
    if (end == std::string_view::npos) return {};
    ordered j = ordered::parse(text.substr(at, end - at), nullptr, false);
    if (j.is_object()) return one_call(end, call_from_json(j));
    LeadingCalls out{.bytes = end, .calls = {}, .malformed = false};
    for (const ordered& item : j.is_array() ? j : ordered::array()) {
      std::optional<ToolCall> call = call_from_json(item);
      if (!call) return {.bytes = 0, .calls = {}, .malformed = true};
      out.calls.push_back(std::move(*call));
    }
    if (out.calls.empty()) return {.bytes = 0, .calls = {}, .malformed = true};
    return out;
  }
  const size_t args = text.find(kArgs, at);
  if (args == std::string_view::npos) return {};
  const size_t open = skip_space(text, args + kArgs.size());
  if (open == text.size()) return {};
  const size_t end = json_value_end(text, open);
  if (end == std::string_view::npos) return {};
  return one_call(end, call_from_parts(text.substr(at, args - at), text.substr(open, end - open)));
}

// [<｜tool▁calls▁begin｜>]<｜tool▁call▁begin｜>...<｜tool▁call▁end｜>[<｜tool▁calls▁end｜>]: whole
// at the call's end marker, once the next text shows whether the list's end marker follows
// (taken with the last call, so that it is not content).
LeadingCalls deepseek(std::string_view text) {
  constexpr std::string_view kCallsBegin = "<｜tool▁calls▁begin｜>";
  constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
  constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
  constexpr std::string_view kCallsEnd = "<｜tool▁calls▁end｜>";
  const size_t at = skip_space(text, text.starts_with(kCallsBegin) ? kCallsBegin.size() : 0);
  const std::string_view rest = text.substr(at);
  if (!rest.starts_with(kCallBegin)) {
    if (kCallBegin.starts_with(rest)) return {};  // more to come
    return {.bytes = 0, .calls = {}, .malformed = true};
  }
  const size_t body = at + kCallBegin.size();
  const size_t end = text.find(kCallEnd, body);
  if (end == std::string_view::npos) return {};
  LeadingCalls call =
      one_call(end + kCallEnd.size(), parse_deepseek_call(text.substr(body, end - body)));
  if (call.malformed) return call;
  const size_t next = skip_space(text, call.bytes);
  const std::string_view after = text.substr(next);
  if (after.starts_with(kCallsEnd)) {
    call.bytes = next + kCallsEnd.size();
  } else if (kCallsEnd.starts_with(after)) {
    return {};  // the list's end marker may follow: the next text (or finish()) decides
  }
  return call;
}

}  // namespace

LeadingCalls leading_calls(ToolCallFormat format, std::string_view text) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return hermes(text);
    case ToolCallFormat::kLlama3Json:
      return llama3_json(text);
    case ToolCallFormat::kMistral:
      return mistral(text);
    case ToolCallFormat::kDeepSeekV3:
      return deepseek(text);
    case ToolCallFormat::kHarmony:
      break;
  }
  return {};
}

}  // namespace kvw::tools
