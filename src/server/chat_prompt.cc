#include "server/chat_prompt.h"

namespace kvw::server {

ChatPrompter::ChatPrompter(PassKey, const Tokenizer& tok, std::optional<ChatTemplate> tmpl,
                           std::string source)
    : tok_(tok), tmpl_(std::move(tmpl)), source_(std::move(source)) {
  if (tok.bos_id() >= 0) bos_text_ = tok.token_bytes(tok.bos_id(), /*render_special=*/true);
  if (tok.eos_id() >= 0) eos_text_ = tok.token_bytes(tok.eos_id(), /*render_special=*/true);
}

Result<std::unique_ptr<ChatPrompter>> ChatPrompter::create(const Tokenizer& tok,
                                                           const std::string& template_source) {
  std::optional<ChatTemplate> tmpl;
  if (!template_source.empty()) {
    auto parsed = ChatTemplate::parse(template_source);
    if (!parsed.ok()) return Error{"chat template: " + parsed.message()};
    tmpl.emplace(std::move(*parsed));
  }
  std::string source = tmpl ? template_source : std::string();
  return std::make_unique<ChatPrompter>(PassKey{}, tok, std::move(tmpl), std::move(source));
}

bool ChatPrompter::supports_tools() const {
  // Tool-aware templates (Llama 3.1+, Qwen2.5+, Mistral, DeepSeek-V3, GPT-OSS, Hermes) all
  // read the `tools` variable; one that never names it would drop the tools silently.
  return tmpl_.has_value() && source_.find("tools") != std::string::npos;
}

Result<std::string> ChatPrompter::render(std::span<const ChatMessage> messages,
                                         bool add_generation_prompt,
                                         const nlohmann::ordered_json* tools) const {
  if (tmpl_) {
    ChatRenderOptions opt{.add_generation_prompt = add_generation_prompt,
                          .bos_token = bos_text_,
                          .eos_token = eos_text_,
                          .tools = tools};
    return tmpl_->render(messages, opt);
  }
  std::string out;
  for (const ChatMessage& m : messages) {
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::vector<int32_t> ChatPrompter::tokenize(const std::string& text) const {
  // Templates that write the BOS text themselves must not get a second BOS (llama.cpp's rule).
  const bool has_bos = !bos_text_.empty() && text.starts_with(bos_text_);
  return tok_.encode(text, /*add_special=*/!has_bos, /*parse_special=*/true);
}

Result<ChatPrompt> ChatPrompter::build(std::span<const ChatMessage> messages, bool with_turn_starts,
                                       const nlohmann::ordered_json* tools) const {
  auto text = render(messages, /*add_generation_prompt=*/true, tools);
  if (!text.ok()) return text.error();
  ChatPrompt p{.text = std::move(*text), .tokens = {}, .turn_starts = {}};
  p.tokens = tokenize(p.text);
  if (!with_turn_starts) return p;
  p.turn_starts.push_back(0);
  for (size_t k = 1; k < messages.size(); ++k) {
    auto prefix = render(messages.first(k), /*add_generation_prompt=*/false, tools);
    // A template may refuse a prefix (e.g. "must end with a user turn"): no turn offsets then,
    // and sliding-window refuses the overflowing request instead of cutting mid-turn.
    if (!prefix.ok() || !p.text.starts_with(*prefix)) return ChatPrompt{p.text, p.tokens, {}};
    const auto n = (int64_t)tokenize(*prefix).size();
    if (n <= p.turn_starts.back() || n >= (int64_t)p.tokens.size()) {
      return ChatPrompt{p.text, p.tokens, {}};
    }
    p.turn_starts.push_back(n);
  }
  return p;
}

}  // namespace kvw::server
