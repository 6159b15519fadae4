// tools/tool_call.h: OpenAI tool calling, independent of HTTP: the call formats the model
// families write, what a parse of a model's output yields, and the functions a request offers.
// Plain data; thread-safe to share once built.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvw::tools {

// How a model family wraps its tool calls (names as vLLM's --tool-call-parser spells them).
enum class ToolCallFormat {
  kHermes,  // "hermes": Hermes / Qwen2.5 / Qwen3: <tool_call>{"name":..,"arguments":..}</tool_call>
  kLlama3Json,  // "llama3_json": {"name":..,"parameters":..} or <|python_tag|>{...}
  kMistral,     // "mistral": [TOOL_CALLS][{"name":..,"arguments":..}] or [TOOL_CALLS]name[ARGS]{..}
  kDeepSeekV3,  // "deepseek_v3":
                // <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>...
  kHarmony,  // "openai": GPT-OSS harmony, <|channel|>commentary to=functions.NAME ...<|message|>
};

const char* format_name(ToolCallFormat f);
// Accepts the names above; nullopt for anything else.
std::optional<ToolCallFormat> format_from_name(std::string_view name);
// Every accepted name, comma-separated (for --help and error messages).
std::string format_names();

// One function a request offers (OpenAI tools[i].function). `parameters` keeps the client's
// key order (the grammar lists properties in it).
struct FunctionSpec {
  std::string name;
  std::string description;
  nlohmann::ordered_json parameters;  // a JSON Schema object; null when the client gave none
};

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text of an object, as OpenAI's function.arguments
};

// One streamed piece of a tool call (an OpenAI delta.tool_calls item): a call's first piece
// opens it (name set, arguments empty); the following ones carry fragments of its arguments'
// JSON text, in order, which concatenate to the arguments as the model wrote them.
struct ToolCallDelta {
  size_t index = 0;       // the call's index among the output's calls
  std::string name;       // non-empty on the opening piece only
  std::string arguments;  // a fragment (empty on the opening piece)
};

// A model's output split into the text outside the calls and the calls, in order; `reasoning`:
// what a reasoning model wrote before its answer (harmony's analysis channel), if it has one.
struct ParsedToolOutput {
  std::string content;
  std::vector<ToolCall> calls;
  std::string reasoning = {};
};

}  // namespace kvw::tools
