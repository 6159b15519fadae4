#include "server/completion_options.h"

#include <string>

namespace kvw::server {

using nlohmann::json;

namespace {

// An integer field in [lo, hi]; null or absent leaves `out` as it is.
std::optional<ApiError> read_small_int(const json& body, const char* key, int32_t lo, int32_t hi,
                                       int32_t& out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  const std::string name = std::string("'") + key + "'";
  if (!it->is_number_integer() || it->get<int64_t>() < lo || it->get<int64_t>() > hi) {
    return invalid_param(key, name + " must be an integer in [" + std::to_string(lo) + ", " +
                                  std::to_string(hi) + "], got " + it->dump());
  }
  out = (int32_t)it->get<int64_t>();
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> read_completion_options(const json& body, GenParams& p) {
  if (auto it = body.find("echo"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return invalid_param("echo", "'echo' must be a boolean");
    p.echo = it->get<bool>();
  }
  if (p.max_tokens && *p.max_tokens == 0 && !p.echo) {
    return invalid_param("max_tokens", "'max_tokens' must be >= 1 (0 only with 'echo': true)");
  }
  if (auto e = read_small_int(body, "prompt_logprobs", 0, kMaxLogprobs, p.prompt_logprobs)) {
    return e;
  }
  if (auto e = read_small_int(body, "best_of", 1, kMaxN, p.best_of)) return e;
  if (p.best_of > 0 && p.best_of < p.n) {
    return invalid_param("best_of", "'best_of' (" + std::to_string(p.best_of) +
                                        ") must be >= 'n' (" + std::to_string(p.n) + ")");
  }
  // As vLLM: the best candidates are known only once every one has finished.
  if (p.best_of > p.n && p.stream) {
    return invalid_param("best_of", "'best_of' > 'n' cannot be used with 'stream': true");
  }
  if (p.best_of == p.n) p.best_of = 0;  // plain sampling of n choices
  return std::nullopt;
}

}  // namespace kvw::server
