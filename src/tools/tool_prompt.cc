#include "tools/tool_prompt.h"

namespace kvw::tools {
namespace {

using ordered = nlohmann::ordered_json;

std::string dump(const ordered& j) {
  return j.dump(-1, ' ', false, ordered::error_handler_t::replace);
}

std::string tools_system_text(const ordered& tools) {
  std::string s =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const ordered& t : tools) s += "\n" + dump(t);
  s += "\n</tools>\n\nFor each function call, return a json object with function name and "
       "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
       "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
  return s;
}

// An assistant turn's calls as the Hermes blocks the model would have written.
std::string calls_text(const ordered& calls) {
  std::string s;
  for (const ordered& c : calls) {
    const ordered& f = c.contains("function") ? c["function"] : c;
    ordered call = {{"name", f.value("name", "")}, {"arguments", f.value("arguments", ordered())}};
    s += "\n<tool_call>\n" + dump(call) + "\n</tool_call>";
  }
  return s;
}

}  // namespace

std::vector<ChatMessage> generic_tool_messages(std::span<const ChatMessage> messages,
                                               const ordered& tools) {
  std::vector<ChatMessage> out;
  out.reserve(messages.size() + 1);
  if (tools.is_array() && !tools.empty()) {
    const std::string text = tools_system_text(tools);
    if (!messages.empty() && messages[0].role == "system") {
      out.push_back(ChatMessage{.role = "system", .content = messages[0].content + "\n\n" + text});
      messages = messages.subspan(1);
    } else {
      out.push_back(ChatMessage{.role = "system", .content = text});
    }
  }
  for (const ChatMessage& m : messages) {
    if (m.role == "tool") {
      const std::string block = "<tool_response>\n" + m.content + "\n</tool_response>";
      if (!out.empty() && out.back().role == "user" &&
          out.back().content.starts_with("<tool_response>")) {
        out.back().content += "\n" + block;
      } else {
        out.push_back(ChatMessage{.role = "user", .content = block});
      }
      continue;
    }
    ChatMessage copy{.role = m.role, .content = m.content};
    if (m.tool_calls.is_array())
      copy.content = std::string(copy.content) + calls_text(m.tool_calls);
    if (copy.content.starts_with("\n")) copy.content.erase(0, 1);
    out.push_back(std::move(copy));
  }
  return out;
}

}  // namespace kvw::tools
