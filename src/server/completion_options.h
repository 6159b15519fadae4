// server/completion_options.h: the /v1/completions fields beyond sampling, as vLLM shapes them:
// `echo` (the prompt starts each choice's text; with `logprobs` its tokens get logprobs too,
// the first null; `max_tokens: 0` allowed), `prompt_logprobs` (vLLM: top k per prompt token
// in a per-choice list) and `best_of` (candidates of which the n with the highest cumulative
// logprob are returned; not with stream). `suffix` stays refused (unsupported_fields.cc).
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "server/api_error.h"
#include "server/openai_request.h"

namespace kvw::server {

// Reads echo, prompt_logprobs and best_of into `p` (after n, stream and logprobs were read).
// Every refusal is a 400 naming the field.
std::optional<ApiError> read_completion_options(const nlohmann::json& body, GenParams& p);

// Engine requests per prompt: best_of when set, else n.
inline int32_t num_candidates(const GenParams& p) {
  return p.best_of > 0 ? p.best_of : p.n;
}

// The top k the engine computes per prompt token: echo with logprobs k, or prompt_logprobs k
// (the larger when both); -1 when neither.
inline int32_t engine_prompt_logprobs(const GenParams& p) {
  const int32_t echo_k = p.echo ? p.logprobs : -1;
  return echo_k > p.prompt_logprobs ? echo_k : p.prompt_logprobs;
}

}  // namespace kvw::server
