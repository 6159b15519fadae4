// chat/chat_template.h: renders chat messages into a prompt string with the model's own
// tokenizer.chat_template (a Jinja2 template), through a small Jinja-subset interpreter.
// Supported: what the chat templates of Llama-2, Llama-3.x, Mistral, Qwen2.5/ChatML, DeepSeek,
// Gemma and Phi-3 use (see chat_template.cc's header for the exact subset).
// Thread safety: a parsed ChatTemplate is immutable; render() may run on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvw {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool" (templates may reject some)
  std::string content;
  // Assistant turns that called tools: OpenAI's tool_calls list, each function.arguments an
  // object when it parses (as vLLM and llama-server hand them to templates); null otherwise.
  nlohmann::ordered_json tool_calls = nullptr;
  std::string tool_call_id;  // "tool" turns: the call answered
  std::string name;          // optional speaker / function name
};

struct ChatRenderOptions {
  bool add_generation_prompt = true;  // end with the assistant turn's opening
  std::string bos_token;              // the vocab's BOS/EOS text, as the templates expect
  std::string eos_token;
  // The time strftime_now(format) formats, in UTC (seconds since the epoch); -1: the time of the
  // render. gpt-oss's template writes "Current date: " from it on every prompt.
  int64_t now_unix = -1;
  // OpenAI `tools` list passed to the template as `tools`; null: the variable is undefined.
  const nlohmann::ordered_json* tools = nullptr;
};

class ChatTemplate {
 public:
  // Errors name the line and column of the template text and what was not understood.
  static Result<ChatTemplate> parse(std::string_view source);
  // Errors: the template's raise_exception("...") message (e.g. roles must alternate), or a
  // runtime type error naming the line.
  // message_starts (optional): set to [messages] byte offsets into the result where the
  // template's loop began each message at the top level (-1: it never did); see
  // jinja::ItemStarts. ChatPrompter derives turn offsets from one render with it.
  Result<std::string> render(std::span<const ChatMessage> messages,
                             const ChatRenderOptions& options,
                             std::vector<int64_t>* message_starts = nullptr) const;

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

 private:
  struct Program;  // parsed node tree (chat_template.cc)
  explicit ChatTemplate(std::unique_ptr<const Program> p);
  std::unique_ptr<const Program> program_;
};

}  // namespace kvw
