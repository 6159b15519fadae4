#include "server/prompt_echo.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace kvw::server {

using nlohmann::json;

uint64_t prompt_logprob_bytes(int64_t num_prompt_tokens, int32_t k, size_t echo_text_bytes,
                              int32_t num_choices) {
  const auto n = (uint64_t)std::max(1, num_choices);
  if (k < 0) return n * echo_text_bytes;
  // Per token: the event's entry, rank and k alternatives; the TokenInfo (with its vector's
  // allocation header, ~16 B) and its k alternatives again.
  const uint64_t event =
      sizeof(TokenLogprob) + sizeof(int32_t) + (uint64_t)k * sizeof(TokenLogprob);
  const uint64_t info = sizeof(TokenInfo) + 16 + (uint64_t)k * sizeof(TokenLogprob);
  // The shared list, and with n > 1 each answer's own copy (echo tokens in its logprobs).
  const uint64_t copies = n > 1 ? n : 0;
  return (uint64_t)num_prompt_tokens * (event + info * (1 + copies)) + n * echo_text_bytes;
}

std::vector<TokenInfo> echo_tokens(const EchoPrompt& p, const std::vector<TokenInfo>& sent,
                                   int32_t k) {
  std::vector<TokenInfo> out;
  out.reserve(sent.size() + 1);
  out.push_back(TokenInfo{.token_id = p.first_token, .has_logprob = false});
  for (const TokenInfo& t : sent) {
    out.push_back(t);
    if (out.back().top.size() > (size_t)k) out.back().top.resize((size_t)k);
  }
  return out;
}

json vllm_prompt_logprobs(const Tokenizer& tok, std::span<const TokenInfo> sent, int32_t k) {
  json out = json::array();
  out.push_back(nullptr);
  for (const TokenInfo& t : sent) {
    json entry = json::object();
    auto add = [&](int32_t id, float logprob, int32_t rank) {
      const std::string key = std::to_string(id);
      if (entry.contains(key)) return;
      entry[key] = {{"logprob", logprob},
                    {"rank", rank},
                    {"decoded_token", to_valid_utf8(tok.token_bytes(id))}};
    };
    add(t.token_id, t.logprob, t.rank);
    for (size_t r = 0; r < t.top.size() && r < (size_t)k; ++r) {
      add(t.top[r].token_id, t.top[r].logprob, (int32_t)r + 1);
    }
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace kvw::server
