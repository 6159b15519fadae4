#include "server/unsupported_fields.h"

#include <string>

namespace kvw::server {
namespace {

using json = nlohmann::json;

bool is_unset(const json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_array() && v.empty()) ||
         (v.is_string() && v.get<std::string>().empty());
}

ApiError refusal(const std::string& param, const std::string& what) {
  return invalid_param(param, "'" + param + "' is not supported by this server yet (" + what +
                                  "); remove it or use a server that implements it");
}

}  // namespace

std::optional<ApiError> refuse_unsupported_fields(const json& body, Endpoint endpoint) {
  if (!body.is_object()) return std::nullopt;
  auto set = [&](const char* key) -> const json* {
    auto it = body.find(key);
    return it == body.end() || is_unset(*it) ? nullptr : &*it;
  };
  // Tool calling (tools, tool_choice, functions, ...) is read by server/tool_request.h.
  // Other output-changing extensions of vLLM / llama-server.
  for (const char* key :
       {"truncate_prompt_tokens", "bad_words", "allowed_token_ids", "n_probs", "mirostat",
        "typical_p", "dry_multiplier", "xtc_probability", "audio", "reasoning_effort"}) {
    if (set(key)) return refusal(key, "this sampling or output option is not implemented");
  }
  // echo, best_of and prompt_logprobs are completions fields (server/completion_options.cc).
  if (endpoint == Endpoint::kChat) {
    for (const char* key : {"echo", "best_of", "prompt_logprobs"}) {
      if (set(key)) return refusal(key, "it is supported on /v1/completions only");
    }
  }
  if (endpoint == Endpoint::kCompletions && set("suffix")) {
    return refusal("suffix", "insertion (fill-in-the-middle) is not implemented");  // as vLLM
  }
  return std::nullopt;
}

}  // namespace kvw::server
