// tools/tool_parser.h: a model's output -> content + tool calls, per format, and which format
// a model writes. A malformed call never fails: the output is then plain content (as vLLM's
// parsers do), so a bad generation cannot become a 500.
// Pure functions; thread-safe.
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "tools/tool_call.h"

namespace kvw::tools {

ParsedToolOutput parse_tool_calls(ToolCallFormat format, std::string_view text);

// Texts whose appearance starts a call in this format; a stream holds back any output that may
// be the beginning of one. Llama 3 JSON also starts a call with '{' at the start of the output
// (see ToolStreamFilter).
std::vector<std::string_view> call_start_markers(ToolCallFormat format);

// The format a model writes, from its chat template and its vocabulary (`has_token` says
// whether a token with that text exists). Hermes when nothing identifies a family: the generic
// tool prompt (tool_prompt.h) asks for that format.
ToolCallFormat detect_format(std::string_view chat_template,
                             const std::function<bool(std::string_view)>& has_token);

// Per-format parsers (one file each); `text` is the whole output.
ParsedToolOutput parse_hermes(std::string_view text);
ParsedToolOutput parse_llama3_json(std::string_view text);
ParsedToolOutput parse_mistral(std::string_view text);
ParsedToolOutput parse_deepseek_v3(std::string_view text);
ParsedToolOutput parse_harmony(std::string_view text);
// One DeepSeek call: the text between <｜tool▁call▁begin｜> and <｜tool▁call▁end｜>.
std::optional<ToolCall> parse_deepseek_call(std::string_view body);

// Shared helpers (tool_parser.cc).
// Where the JSON value that starts at `at` ends (one past it), or npos when it does not end
// (brackets and strings are balanced; the text is not validated, nlohmann does that).
size_t json_value_end(std::string_view text, size_t at);
// A call from a JSON object with "name" and `args_key` (also "arguments"/"parameters"); the
// arguments may be an object or a string holding one. nullopt when the shape is wrong.
std::optional<ToolCall> call_from_json(const nlohmann::ordered_json& j);
// A call from a name and the JSON text of its arguments; nullopt unless they are an object.
std::optional<ToolCall> call_from_parts(std::string_view name, std::string_view arguments);
std::string_view trim(std::string_view s);

}  // namespace kvw::tools
