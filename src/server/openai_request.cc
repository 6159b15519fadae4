#include "server/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "server/completion_options.h"
#include "server/tool_request.h"
#include "server/unsupported_fields.h"

namespace kvw::server {
namespace {

using nlohmann::json;

const json* field(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;  // null means "use the default"
  return &*it;
}

std::optional<ApiError> read_number(const json& body, const char* key, double lo, double hi,
                                    float& out) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) return invalid_param(key, std::string("'") + key + "' must be a number");
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    return invalid_param(key, std::string("'") + key + "' must be in [" + json(lo).dump() + ", " +
                                  json(hi).dump() + "], got " + v->dump());
  }
  out = (float)d;
  return std::nullopt;
}

// Integers may arrive as 5 or 5.0; anything fractional or outside [lo, hi] is refused.
std::optional<ApiError> read_int(const json& body, const char* key, int64_t lo, int64_t hi,
                                 std::optional<int64_t>& out) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  const std::string name = std::string("'") + key + "'";
  if (!v->is_number()) return invalid_param(key, name + " must be an integer");
  const double d = v->get<double>();
  if (!std::isfinite(d) || std::floor(d) != d)
    return invalid_param(key, name + " must be an integer");
  if (d < (double)lo || d > (double)hi) {
    return invalid_param(key, name + " must be in [" + std::to_string(lo) + ", " +
                                  std::to_string(hi) + "], got " + v->dump());
  }
  out = v->is_number_integer() ? v->get<int64_t>() : (int64_t)d;
  return std::nullopt;
}

std::optional<ApiError> read_bool(const json& body, const char* key, bool& out) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return invalid_param(key, std::string("'") + key + "' must be a boolean");
  out = v->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> read_stop(const json& body, std::vector<std::string>& out) {
  const json* v = field(body, "stop");
  if (!v) return std::nullopt;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
    return std::nullopt;
  }
  if (!v->is_array()) return invalid_param("stop", "'stop' must be a string or a list of strings");
  if (v->size() > kMaxStops) {
    return invalid_param("stop", "'stop' takes at most " + std::to_string(kMaxStops) + " strings");
  }
  for (const json& s : *v) {
    if (!s.is_string()) return invalid_param("stop", "'stop' must be a list of strings");
    out.push_back(s.get<std::string>());
  }
  return std::nullopt;
}

// vLLM's stop_token_ids: a list of token ids (>= 0 here; < n_vocab is checked by the handler,
// check_generation_bounds), kept sorted and distinct.
std::optional<ApiError> read_stop_token_ids(const json& body,
                                            std::shared_ptr<const std::vector<int32_t>>& out) {
  const json* v = field(body, "stop_token_ids");
  if (v == nullptr) return std::nullopt;
  if (!v->is_array()) {
    return invalid_param("stop_token_ids", "'stop_token_ids' must be a list of token ids");
  }
  std::vector<int32_t> ids;
  for (const json& t : *v) {
    const bool integral =
        t.is_number_integer() || (t.is_number_float() && std::isfinite(t.get<double>()) &&
                                  std::floor(t.get<double>()) == t.get<double>());
    if (!integral || t.get<double>() < 0 || t.get<double>() > INT32_MAX) {
      return invalid_param("stop_token_ids", "'stop_token_ids' holds " + t.dump() +
                                                 ", not a token id (an integer >= 0)");
    }
    ids.push_back((int32_t)t.get<double>());
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  if (!ids.empty()) out = std::make_shared<const std::vector<int32_t>>(std::move(ids));
  return std::nullopt;
}

// A token id written the one canonical way: decimal digits, no sign, space or leading zero.
// Then distinct JSON keys are distinct ids ("1", "01" and " +001" cannot name one token
// three times), so logit_bias holds at most n_vocab entries once ids are range-checked.
std::optional<int32_t> canonical_token_id(const std::string& key) {
  if (key.empty() || key.size() > 10 || (key.size() > 1 && key[0] == '0')) return std::nullopt;
  int64_t id = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return std::nullopt;
    id = id * 10 + (c - '0');
  }
  if (id > INT32_MAX) return std::nullopt;
  return (int32_t)id;
}

// OpenAI logit_bias: {"50256": -100, ...}; keys are token ids as canonical decimal strings,
// values in [-100, 100]. Ids are checked against the vocabulary by the handler
// (check_generation_bounds) before any work.
std::optional<ApiError> read_logit_bias(const json& body, LogitBias& out) {
  const json* v = field(body, "logit_bias");
  if (v == nullptr) return std::nullopt;
  if (!v->is_object()) {
    return invalid_param("logit_bias", "'logit_bias' must be an object of token id -> bias");
  }
  std::vector<LogitBias::Entry> entries;
  for (const auto& [key, bias] : v->items()) {
    const std::optional<int32_t> id = canonical_token_id(key);
    if (!id) {
      return invalid_param("logit_bias", "logit_bias key '" + key +
                                             "' is not a token id (decimal digits, no sign, "
                                             "spaces or leading zeros)");
    }
    if (!bias.is_number() || !(bias.get<double>() >= -100 && bias.get<double>() <= 100)) {
      return invalid_param("logit_bias",
                           "logit_bias['" + key + "'] must be a number in [-100, 100]");
    }
    entries.emplace_back(*id, bias.get<float>());
  }
  out = LogitBias(std::move(entries));
  return std::nullopt;
}

// Everything but the prompt/messages and the endpoint-specific logprobs fields.
// max_tokens may be 0 only where min_max_tokens says so (completions with echo).
std::optional<ApiError> read_common(const json& body, GenParams& p, int64_t min_max_tokens = 1) {
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) return invalid_param("model", "'model' must be a string");
    p.model = m->get<std::string>();
  }
  std::optional<int64_t> i;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    i.reset();
    if (auto e = read_int(body, key, min_max_tokens, INT32_MAX, i)) return e;
    if (i) p.max_tokens = (int32_t)*i;
  }
  if (auto e = read_number(body, "temperature", 0, 2, p.temperature)) return e;
  if (auto e = read_number(body, "top_p", 0, 1, p.top_p)) return e;
  if (p.top_p <= 0) return invalid_param("top_p", "'top_p' must be in (0, 1]");
  if (auto e = read_number(body, "min_p", 0, 1, p.min_p)) return e;
  if (auto e = read_number(body, "presence_penalty", -2, 2, p.presence_penalty)) return e;
  if (auto e = read_number(body, "frequency_penalty", -2, 2, p.frequency_penalty)) return e;
  if (const json* v = field(body, "repetition_penalty")) {
    const double d = v->is_number() ? v->get<double>() : -1;
    if (!(d > 0 && d <= std::numeric_limits<float>::max())) {
      return invalid_param("repetition_penalty",
                           "'repetition_penalty' must be a number > 0, got " + v->dump());
    }
    p.repetition_penalty = (float)d;
  }
  i.reset();
  if (auto e = read_int(body, "min_tokens", 0, INT32_MAX, i)) return e;
  if (i) p.min_tokens = (int32_t)*i;
  if (p.max_tokens && p.min_tokens > *p.max_tokens) {
    return invalid_param("min_tokens", "'min_tokens' (" + std::to_string(p.min_tokens) +
                                           ") must be <= max_tokens (" +
                                           std::to_string(*p.max_tokens) + ")");
  }
  if (auto e = read_stop_token_ids(body, p.stop_token_ids)) return e;
  i.reset();
  if (auto e = read_int(body, "top_k", -1, 1 << 20, i)) return e;
  if (i) p.top_k = *i < 0 ? 0 : (int32_t)*i;
  i.reset();
  if (auto e = read_int(body, "seed", INT64_MIN, INT64_MAX, i)) return e;
  if (i) p.seed = (uint64_t)*i;
  i.reset();
  if (auto e = read_int(body, "n", 1, kMaxN, i)) return e;
  if (i) p.n = (int32_t)*i;
  if (auto e = read_stop(body, p.stop)) return e;
  if (auto e = read_logit_bias(body, p.logit_bias)) return e;
  if (auto e = read_bool(body, "stream", p.stream)) return e;
  if (auto e = read_bool(body, "ignore_eos", p.ignore_eos)) return e;
  if (auto e = read_bool(body, "speculative", p.speculative)) return e;
  i.reset();
  if (auto e = read_int(body, "speculative.n_max", 0, 1 << 20, i)) return e;
  if (i && *i == 0) p.speculative = false;
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object())
      return invalid_param("stream_options", "'stream_options' must be an object");
    if (auto e = read_bool(*so, "include_usage", p.include_usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
  }
  return std::nullopt;
}

ApiResult<std::string> read_content(const json& m, const std::string& role,
                                    const std::string& param) {
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) {
    // Only an assistant turn may omit content (OpenAI: a tool-call turn); a user or system
    // turn without text is a client bug, not an empty prompt.
    if (role == "assistant") return std::string();
    return invalid_param(param, param + " is required for a " + role + " message");
  }
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array()) return invalid_param(param, "'content' must be a string or a list of parts");
  std::string text;
  for (const json& part : *it) {
    if (!part.is_object()) return invalid_param(param, "each content part must be an object");
    auto type = part.find("type");
    auto t = part.find("text");
    if (type == part.end() || !type->is_string() || *type != "text") {
      return invalid_param(param, "only content parts of type 'text' are supported");
    }
    if (t == part.end() || !t->is_string()) {
      return invalid_param(param, "a text part needs a string 'text'");
    }
    text += t->get<std::string>();
  }
  return text;
}

}  // namespace

namespace {
struct JsonTooLarge {};
struct JsonTooDeep {};
}  // namespace

ApiResult<json> parse_body(const std::string& body, uint64_t dom_budget_bytes) {
  uint64_t cost = 0;
  auto count = [&](int depth, json::parse_event_t ev, json& v) {
    if (depth > kMaxJsonDepth) throw JsonTooDeep{};
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        cost += kJsonContainerBytes;
        break;
      case json::parse_event_t::key:
        cost += kJsonNodeBytes + v.get_ref<const std::string&>().size();
        break;
      case json::parse_event_t::value:
        cost += kJsonNodeBytes + (v.is_string() ? v.get_ref<const std::string&>().size() : 0);
        break;
      default:
        break;
    }
    if (cost > dom_budget_bytes) throw JsonTooLarge{};
    return true;
  };
  json j;
  try {
    j = dom_budget_bytes == UINT64_MAX ? json::parse(body, nullptr, /*allow_exceptions=*/false)
                                       : json::parse(body, count, /*allow_exceptions=*/false);
  } catch (const JsonTooDeep&) {
    return ApiError(RefusalReason::kInvalidRequest,
                    "request body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels")
        .with_code("invalid_json");
  } catch (const JsonTooLarge&) {
    return ApiError(RefusalReason::kBodyTooLarge,
                    "the request's JSON needs more than the " + std::to_string(dom_budget_bytes) +
                        " bytes of request memory reserved for a body of " +
                        std::to_string(body.size()) + " bytes (too many small values)")
        .with_code("request_too_large");
  }
  if (j.is_discarded()) {
    return ApiError(RefusalReason::kInvalidRequest,
                    "request body is not valid JSON (or has invalid UTF-8)")
        .with_code("invalid_json");
  }
  if (!j.is_object()) {
    return ApiError(RefusalReason::kInvalidRequest, "request body must be a JSON object")
        .with_code("invalid_json");
  }
  return j;
}

ApiResult<std::vector<ChatMessage>> parse_messages(const json& messages) {
  if (!messages.is_array() || messages.empty()) {
    return invalid_param("messages", "'messages' must be a non-empty list");
  }
  std::vector<ChatMessage> out;
  for (size_t k = 0; k < messages.size(); ++k) {
    const json& m = messages[k];
    const std::string param = "messages[" + std::to_string(k) + "]";
    if (!m.is_object()) return invalid_param(param, param + " must be an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return invalid_param(param + ".role", param + " needs a string 'role'");
    }
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";  // OpenAI's newer name for the system turn
    if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
      return invalid_param(param + ".role",
                           "role '" + r + "' is not one of system, user, assistant, tool");
    }
    auto content = read_content(m, r, param + ".content");
    if (auto* e = std::get_if<ApiError>(&content)) return *e;
    ChatMessage msg{.role = std::move(r), .content = std::get<std::string>(content)};
    if (auto e = read_message_tool_fields(m, param, msg)) return *e;
    out.push_back(std::move(msg));
  }
  return out;
}

ApiResult<std::vector<int32_t>> parse_token_ids(const json& v, const std::string& param,
                                                int32_t n_vocab) {
  if (!v.is_array()) return invalid_param(param, "'" + param + "' must be a list of token ids");
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (const json& t : v) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab) {
      return invalid_param(param, "'" + param + "' holds " + t.dump() + ", not a token id in [0, " +
                                      std::to_string(n_vocab) + ")");
    }
    ids.push_back((int32_t)t.get<int64_t>());
  }
  return ids;
}

ApiResult<CompletionRequest> parse_completion_request(const json& body) {
  CompletionRequest r;
  if (auto e = refuse_unsupported_fields(body, Endpoint::kCompletions)) return *e;
  const json* echo = field(body, "echo");
  const bool echoed = echo && echo->is_boolean() && echo->get<bool>();
  if (auto e = read_common(body, r.params, echoed ? 0 : 1)) return *e;
  std::optional<int64_t> lp;
  if (auto e = read_int(body, "logprobs", 0, kMaxLogprobs, lp)) return *e;
  if (lp) r.params.logprobs = (int32_t)*lp;
  if (auto e = read_completion_options(body, r.params)) return *e;
  const json* p = field(body, "prompt");
  if (!p) return invalid_param("prompt", "'prompt' is required");
  auto bad = [] {
    return invalid_param("prompt",
                         "'prompt' must be a string, a list of strings, a list of token ids or "
                         "a list of token id lists (non-empty)");
  };
  auto ids = [](const json& a, PromptInput& in) {
    for (const json& t : a) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
        return false;
      }
      in.tokens.push_back((int32_t)t.get<int64_t>());
    }
    in.is_tokens = true;
    return !a.empty();
  };
  if (p->is_string()) {
    PromptInput in;
    in.text = p->get<std::string>();
    r.prompts.push_back(std::move(in));
  } else if (p->is_array() && !p->empty()) {
    if ((*p)[0].is_number()) {
      PromptInput in;
      if (!ids(*p, in)) return bad();
      r.prompts.push_back(std::move(in));
    } else {
      for (const json& e : *p) {
        PromptInput in;
        if (e.is_string()) {
          in.text = e.get<std::string>();
        } else if (!e.is_array() || !ids(e, in)) {
          return bad();
        }
        r.prompts.push_back(std::move(in));
      }
    }
  } else {
    return bad();
  }
  if (r.prompts.size() * (size_t)r.params.n > (size_t)kMaxN * 4) {
    return invalid_param("prompt",
                         "too many choices: prompts x n must be <= " + std::to_string(kMaxN * 4));
  }
  return r;
}

ApiResult<ChatRequest> parse_chat_request(const json& body) {
  ChatRequest r;
  if (auto e = refuse_unsupported_fields(body, Endpoint::kChat)) return *e;
  if (auto e = read_common(body, r.params)) return *e;
  bool logprobs = false;
  if (auto e = read_bool(body, "logprobs", logprobs)) return *e;
  std::optional<int64_t> top;
  if (auto e = read_int(body, "top_logprobs", 0, kMaxLogprobs, top)) return *e;
  if (top && !logprobs) {
    return invalid_param("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  }
  if (logprobs) r.params.logprobs = top ? (int32_t)*top : 0;
  const json* m = field(body, "messages");
  if (!m) return invalid_param("messages", "'messages' is required");
  auto msgs = parse_messages(*m);
  if (auto* e = std::get_if<ApiError>(&msgs)) return *e;
  r.messages = std::move(std::get<std::vector<ChatMessage>>(msgs));
  return r;
}

}  // namespace kvw::server
