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
       {"min_tokens", "repetition_penalty", "stop_token_ids", "prompt_logprobs",
        "truncate_prompt_tokens", "bad_words", "allowed_token_ids", "n_probs", "mirostat",
        "typical_p", "dry_multiplier", "xtc_probability", "audio", "reasoning_effort"}) {
    if (set(key)) return refusal(key, "this sampling or output option is not implemented");
  }
  if (endpoint == Endpoint::kCompletions) {
    if (set("echo")) return refusal("echo", "the prompt is not echoed");
    if (const json* b = set("best_of")) {
      // best_of == n (or 1 with n 1) is plain sampling; more candidates are not implemented.
      const json* n = set("n");
      const int64_t want = n && n->is_number_integer() ? n->get<int64_t>() : 1;
      if (!b->is_number_integer() || b->get<int64_t>() != want) {
        return refusal("best_of", "best_of must equal n");
      }
    }
    if (set("suffix"))
      return refusal("suffix", "insertion (fill-in-the-middle) is not implemented");
  }
  return std::nullopt;
}

}  // namespace kvw::server
