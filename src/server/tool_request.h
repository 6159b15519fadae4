// server/tool_request.h: OpenAI tool-calling fields of a chat request, validated: `tools`,
// `tool_choice`, `parallel_tool_calls`, and the legacy `functions` / `function_call` (mapped
// onto tools, as OpenAI still accepts them), plus the tool fields of conversation messages
// (assistant `tool_calls`, tool `tool_call_id`). Every refusal is a 400 naming the parameter.
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>
#include <variant>
#include <vector>

#include "chat/chat_template.h"
#include "server/api_error.h"
#include "tools/tool_call.h"

namespace kvw::server {

inline constexpr size_t kMaxTools = 128;  // OpenAI's limit on tools per request

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ToolRequest {
  nlohmann::ordered_json tools =
      nullptr;  // OpenAI tools list (legacy functions wrapped); null: none
  std::vector<tools::FunctionSpec> functions;  // [tools], parameters in the client's key order
  ToolChoice choice = ToolChoice::kAuto;
  std::string named;     // the function a named choice forces
  bool parallel = true;  // parallel_tool_calls

  // The model is offered tools and its output is parsed for calls.
  bool active() const { return !functions.empty() && choice != ToolChoice::kNone; }
  // Generation is constrained to calls (required or a named function).
  bool forced() const { return active() && choice != ToolChoice::kAuto; }
  // The functions a forced choice may call.
  std::vector<tools::FunctionSpec> callable() const;
};

// `raw`: the body's text, read again in document order (schemas keep their property order).
std::variant<ToolRequest, ApiError> parse_tool_request(const nlohmann::json& body,
                                                       std::string_view raw);

// A message's tool fields into `out` (role already read): assistant tool_calls and the tool
// turn's tool_call_id. `param` is "messages[i]".
std::optional<ApiError> read_message_tool_fields(const nlohmann::json& m, const std::string& param,
                                                 ChatMessage& out);

}  // namespace kvw::server
