// server/chat_prompt.h: chat messages -> prompt token ids, through the model's chat template
// (GGUF tokenizer.chat_template, or --chat-template), or the built-in ChatML fallback when the
// model has none:
//   <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
// Also computes turn_starts (the token offset where each message starts) for the
// sliding-window overflow policy: the number of tokens of the template's rendering of each
// message prefix, found from one render that notes where each message begins (chat_turns.cc),
// so a long conversation costs a few renders, not one per message.
// Thread safety: immutable after construction; render/tokenize run on many threads at once.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "core/status.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

namespace kvw::server {

struct ChatPrompt {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<int64_t> turn_starts;  // empty unless requested (and consistent)
  // Work done for this prompt (tests hold the turn offsets to a few renders): template (or
  // fallback) renders, and bytes handed to the tokenizer.
  int64_t num_renders = 0;
  uint64_t num_tokenized_bytes = 0;
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
  // Renders and tokenises; with_turn_starts also gives each message's token offset: what the
  // template renders for the messages before it (without the generation prompt) is tokenised
  // to that many tokens, and must be a prefix of the whole prompt, else no offsets are given
  // (under --overflow sliding-window only). O(prompt) work: one traced render, four prefix
  // renders that check the trace, and the tokenizer's fragments counted once; templates the
  // trace does not fit render each prefix, within kTurnWorkFactor x the prompt's bytes (no
  // offsets past it). Errors come from the template
  // (e.g. "roles must alternate"). `tools`: the OpenAI tools list handed to the template as
  // `tools` (null: not offered).
  Result<ChatPrompt> build(std::span<const ChatMessage> messages, bool with_turn_starts,
                           const nlohmann::ordered_json* tools = nullptr) const;
  bool uses_fallback() const { return !tmpl_.has_value(); }
  // The template reads a `tools` variable (else tools go in a generic prompt, tool_prompt.h).
  bool supports_tools() const;
  const std::string& template_source() const { return source_; }

 private:
  // message_starts: see ChatTemplate::render (the fallback's own offsets).
  Result<std::string> render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                             const nlohmann::ordered_json* tools,
                             std::vector<int64_t>* message_starts = nullptr) const;
  std::vector<int32_t> tokenize(std::string_view text) const;
  // chat_turns.cc: p.turn_starts for `messages` (p holds the whole prompt); leaves it empty
  // when the template's prefixes do not fit the rules above.
  void find_turn_starts(std::span<const ChatMessage> messages, const nlohmann::ordered_json* tools,
                        const std::vector<int64_t>& message_starts, ChatPrompt& p) const;
  // Offsets from the traced message starts; false: the trace does not fit (the caller falls
  // back to rendering each prefix).
  bool turn_starts_from_trace(std::span<const ChatMessage> messages,
                              const nlohmann::ordered_json* tools,
                              const std::vector<int64_t>& message_starts, ChatPrompt& p) const;
  // Tokens of text[0, cuts[i]) for each cut (ascending), counted from the tokenizer's
  // special-token fragments of `text` (each raw fragment is tokenised on its own, so a cut at a
  // fragment boundary costs nothing more); a cut inside a fragment tokenises that fragment's
  // part before it. False when the bytes tokenised would pass `budget`.
  bool count_prefix_tokens(std::string_view text, std::span<const int64_t> cuts, uint64_t budget,
                           std::vector<int64_t>& counts, ChatPrompt& p) const;
  void prefix_renders(std::span<const ChatMessage> messages, const nlohmann::ordered_json* tools,
                      ChatPrompt& p) const;

  const Tokenizer& tok_;
  std::optional<ChatTemplate> tmpl_;
  std::string source_;  // the template's Jinja text (empty: ChatML fallback)
  std::string bos_text_, eos_text_;
  // The tokenizer's special tokens (control, unknown, user-defined), longest first: how it
  // splits text into fragments it tokenises one by one.
  std::vector<tokenizer_internal::SpecialToken> specials_;
};

// Work allowed for turn offsets, in bytes rendered and tokenised per byte of the prompt.
inline constexpr uint64_t kTurnWorkFactor = 16;

}  // namespace kvw::server
