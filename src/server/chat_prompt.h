// server/chat_prompt.h: chat messages -> prompt token ids, through the model's chat template
// (GGUF tokenizer.chat_template, or --chat-template), or the built-in ChatML fallback when the
// model has none:
//   <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
// Also computes turn_starts (the token offset where each message starts) for the
// sliding-window overflow policy, by rendering message prefixes.
// Thread safety: immutable after construction; render/tokenize run on many threads at once.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace kvw::server {

struct ChatPrompt {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<int64_t> turn_starts;  // empty unless requested (and consistent)
};

class ChatPrompter {
  struct PassKey {  // lets create() use make_unique while keeping construction private
    explicit PassKey() = default;
  };

 public:
  ChatPrompter(PassKey, const Tokenizer& tok, std::optional<ChatTemplate> tmpl,
               std::string source);  // use create()
  // `template_source`: the Jinja text (empty: use the ChatML fallback). Errors: the template
  // does not parse.
  static Result<std::unique_ptr<ChatPrompter>> create(const Tokenizer& tok,
                                                      const std::string& template_source);
  // Renders and tokenises; with_turn_starts renders each message prefix as well (O(turns^2)
  // text work, only worth it under --overflow sliding-window). Errors come from the template
  // (e.g. "roles must alternate"). `tools`: the OpenAI tools list handed to the template as
  // `tools` (null: not offered).
  Result<ChatPrompt> build(std::span<const ChatMessage> messages, bool with_turn_starts,
                           const nlohmann::ordered_json* tools = nullptr) const;
  bool uses_fallback() const { return !tmpl_.has_value(); }
  // The template reads a `tools` variable (else tools go in a generic prompt, tool_prompt.h).
  bool supports_tools() const;
  const std::string& template_source() const { return source_; }

 private:
  Result<std::string> render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                             const nlohmann::ordered_json* tools) const;
  std::vector<int32_t> tokenize(const std::string& text) const;

  const Tokenizer& tok_;
  std::optional<ChatTemplate> tmpl_;
  std::string source_;  // the template's Jinja text (empty: ChatML fallback)
  std::string bos_text_, eos_text_;
};

}  // namespace kvw::server
