#include "server/chat_prompt.h"

namespace kvw::server {

ChatPrompter::ChatPrompter(PassKey, const Tokenizer& tok, std::optional<ChatTemplate> tmpl,
                           std::string source)
    : tok_(tok), tmpl_(std::move(tmpl)), source_(std::move(source)) {
  if (tok.bos_id() >= 0) bos_text_ = tok.token_bytes(tok.bos_id(), /*render_special=*/true);
  if (tok.eos_id() >= 0) eos_text_ = tok.token_bytes(tok.eos_id(), /*render_special=*/true);
  specials_ = tokenizer_internal::collect_special_tokens(tok.vocab());
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
                                         const nlohmann::ordered_json* tools,
                                         std::vector<int64_t>* message_starts) const {
  if (tmpl_) {
    ChatRenderOptions opt{.add_generation_prompt = add_generation_prompt,
                          .bos_token = bos_text_,
                          .eos_token = eos_text_,
                          .tools = tools};
    return tmpl_->render(messages, opt, message_starts);
  }
  std::string out;
  if (message_starts != nullptr) message_starts->clear();
  for (const ChatMessage& m : messages) {
    if (message_starts != nullptr) message_starts->push_back((int64_t)out.size());
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::vector<int32_t> ChatPrompter::tokenize(std::string_view text) const {
  // Templates that write the BOS text themselves must not get a second BOS (llama.cpp's rule).
  const bool has_bos = !bos_text_.empty() && text.starts_with(bos_text_);
  return tok_.encode(text, /*add_special=*/!has_bos, /*parse_special=*/true);
}

Result<ChatPrompt> ChatPrompter::build(std::span<const ChatMessage> messages, bool with_turn_starts,
                                       const nlohmann::ordered_json* tools) const {
  std::vector<int64_t> message_starts;
  auto text = render(messages, /*add_generation_prompt=*/true, tools,
                     with_turn_starts ? &message_starts : nullptr);
  if (!text.ok()) return text.error();
  ChatPrompt p{.text = std::move(*text)};
  p.num_renders = 1;
  p.tokens = tokenize(p.text);
  p.num_tokenized_bytes = p.text.size();
  if (with_turn_starts) find_turn_starts(messages, tools, message_starts, p);
  return p;
}

}  // namespace kvw::server
