// tools/tool_prompt.h: the generic tool prompt for chat templates that know nothing of tools
// (no `tools` variable, e.g. plain ChatML): the conversation is rewritten so any template can
// render it, in Hermes format, which the hermes parser then reads back:
//   - a system turn (prepended to the first system message, or a new one) lists the functions
//     as JSON inside <tools></tools> and asks for <tool_call>{"name", "arguments"}</tool_call>;
//   - an assistant turn's tool_calls become <tool_call> blocks after its text;
//   - consecutive "tool" turns become one user turn of <tool_response> blocks.
// This is the prompt Qwen2.5's own template writes. Pure function; thread-safe.
#pragma once

#include <span>
#include <vector>

#include "chat/chat_template.h"

namespace kvw::tools {

// `tools`: the request's OpenAI tools list, or null when tools are not offered (tool_choice
// "none"), in which case only the history is rewritten.
std::vector<ChatMessage> generic_tool_messages(std::span<const ChatMessage> messages,
                                               const nlohmann::ordered_json& tools);

}  // namespace kvw::tools
