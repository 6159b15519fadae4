// server/tool_calling.h: tool calling in /v1/chat/completions, between the request fields
// (tool_request.h) and the model-independent parts (src/tools): which format the served model
// writes, the prompt with its tools, the grammar that forces calls, and the OpenAI objects of
// the answer (message.tool_calls, streamed delta.tool_calls).
// Thread safety: pure functions over immutable server state.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "server/chat_prompt.h"
#include "server/openai_request.h"
#include "server/tool_request.h"
#include "tools/tool_call.h"

namespace kvw::grammar {
struct Grammar;
}

namespace kvw::server {

struct ServerState;

// --tool-call-parser `flag` (empty: detect from the chat template and the vocabulary).
// Errors: an unknown name, listing the known ones.
Result<tools::ToolCallFormat> choose_tool_format(const std::string& flag,
                                                 const ChatPrompter& prompter,
                                                 const Tokenizer& tok);
// Whether the model answers in harmony channels (gpt-oss: its template or its vocabulary has
// harmony's markers, or the tool format is harmony): chat answers then split analysis
// (reasoning_content) from final (content), with or without tools.
bool writes_harmony(tools::ToolCallFormat tool_format, const ChatPrompter& prompter,
                    const Tokenizer& tok);

// Sets what the request's tools change in `p` (the format its output is parsed in) and, for
// tool_choice "required" or a named function, `grammar` (the calls' grammar, compiled within
// `max_bytes`); for "auto" the same grammar made lazy (p.constraint.triggers: it starts where
// the model starts a call), unless another structured output or ignore_eos is set. Errors: a forced
// choice with another output constraint (response_format ...), or a schema the grammar cannot
// express (400 naming "tools").
std::optional<ApiError> apply_tools(const ServerState& st, const ToolRequest& tr,
                                    std::shared_ptr<const grammar::Grammar>& grammar, GenParams& p,
                                    size_t max_bytes);

// The prompt with the tools: through the model's template when it reads `tools`, else through
// the generic tool prompt (tools/tool_prompt.h).
Result<ChatPrompt> build_tool_prompt(const ServerState& st, std::span<const ChatMessage> messages,
                                     const ToolRequest& tr, bool with_turn_starts);

// Without parallel_tool_calls only the first call is kept (as vLLM does).
void limit_calls(std::vector<tools::ToolCall>& calls, bool parallel);
// message.tool_calls: [{"id": "call_...", "type": "function", "function": {name, arguments}}].
nlohmann::json tool_calls_json(const std::vector<tools::ToolCall>& calls);
// The delta.tool_calls items of a stream, one per chunk: for each call, first {index, id, type,
// function: {name, arguments: ""}}, then {index, function: {arguments: fragment}} pieces that
// concatenate to the arguments (the official SDKs reassemble them by index).
// first_index: the index of calls[0] (calls sent earlier in the stream come before).
std::vector<nlohmann::json> tool_call_deltas(const std::vector<tools::ToolCall>& calls,
                                             size_t first_index = 0);
// One streamed piece as a delta.tool_calls item: an opening piece as the first item above
// (with a new id), a fragment as {index, function: {arguments}}.
nlohmann::json tool_call_delta_json(const tools::ToolCallDelta& d);

}  // namespace kvw::server
