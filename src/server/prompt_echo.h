// server/prompt_echo.h: what /v1/completions returns of the prompt itself: `echo` (the prompt's
// text first, and with logprobs its tokens first, the first one null) and vLLM's per-choice
// `prompt_logprobs` list; and what that costs in request memory, charged before any engine
// work: a choice keeps (k + 1) entries per prompt token until the answer is written.
// Thread safety: pure functions (the lease is the caller's).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "server/choice_runner.h"
#include "tokenizer/tokenizer.h"

namespace kvw::server {

// One prompt as the answer shows it.
struct EchoPrompt {
  std::string text;         // echo: the prompt as sent (token prompts: decoded)
  int32_t first_token = 0;  // the prompt's first token (its logprob is null)
};

// Request memory the prompt logprobs of one prompt hold, for `num_prompt_tokens` tokens with
// top k and `num_choices` candidates: the engine's event and the TokenInfo list the first
// candidate receives (once: shared by the candidates), and per choice the echoed text and the
// copy of the list its answer carries.
uint64_t prompt_logprob_bytes(int64_t num_prompt_tokens, int32_t k, size_t echo_text_bytes,
                              int32_t num_choices = 1);

// The echoed prompt's logprob entries: the first token (null), then what the engine sent, each
// with at most k alternatives (the engine computed the larger of echo's and prompt_logprobs' k).
std::vector<TokenInfo> echo_tokens(const EchoPrompt& p, const std::vector<TokenInfo>& sent,
                                   int32_t k);

// vLLM's prompt_logprobs: [null, {"<id>": {"logprob", "rank", "decoded_token"}, ...}, ...], each
// entry holding the prompt token and the top k there.
nlohmann::json vllm_prompt_logprobs(const Tokenizer& tok, std::span<const TokenInfo> sent,
                                    int32_t k);

}  // namespace kvw::server
