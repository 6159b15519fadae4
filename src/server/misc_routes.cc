// JSON/error helpers and the small routes: /tokenize and /detokenize (vLLM's shapes).
#include "server/leased_answer.h"
#include "server/openai_request.h"
#include "server/routes.h"
#include "tokenizer/utf8.h"

namespace kvw::server {

using nlohmann::json;

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void send_json(HttpResponse& res, const json& j, int status) {
  res.status = status;
  res.set_content(dump_json(j), kJsonType);
}

void send_error(ServerState& st, HttpResponse& res, const ApiError& err) {
  st.refused(err.reason);
  res.status = err.status;
  if (err.retry_after_s > 0) res.set_header("Retry-After", std::to_string(err.retry_after_s));
  res.set_content(err.to_json(), kJsonType);
}

uint64_t dom_budget(const HttpRequest& req) {
  const uint64_t held = req.lease.bytes();
  return held > req.body.size() ? held - req.body.size() : UINT64_MAX;  // no lease: no body
}

std::optional<ApiError> prompt_bytes_over_context(const ServerState& st, size_t bytes, bool chat) {
  const auto per_token = (uint64_t)std::max<int64_t>(1, st.max_token_bytes);
  const uint64_t at_least = (bytes + per_token - 1) / per_token;
  const EngineLimits& lim = st.limits();
  if (lim.overflow != OverflowPolicy::kError || at_least <= (uint64_t)lim.max_model_len) {
    return std::nullopt;
  }
  const char* what = chat ? "messages" : "prompt";
  return ApiError(RefusalReason::kContextLength,
                  "This model's maximum context length is " + std::to_string(lim.max_model_len) +
                      " tokens. However, your " + what + " is at least " +
                      std::to_string(at_least) + " tokens (" + std::to_string(bytes) +
                      " bytes; no token covers more than " + std::to_string(per_token) +
                      " bytes). Please reduce the length.")
      .with_param(what);
}

std::string_view tokenizable_tail_bytes(std::string_view text, uint64_t keep) {
  if (text.size() <= keep) return text;
  size_t start = text.size() - keep;
  while (start < text.size() && ((unsigned char)text[start] & 0xC0) == 0x80) ++start;
  return text.substr(start);
}

std::string_view tokenizable_tail(const ServerState& st, std::string_view text) {
  return tokenizable_tail_bytes(text, (uint64_t)(st.limits().max_model_len + 1) *
                                          (uint64_t)std::max<int64_t>(1, st.max_token_bytes));
}

std::optional<ApiError> bound_message_count(const ServerState& st,
                                            std::vector<ChatMessage>& messages) {
  const EngineLimits& lim = st.limits();
  const auto most = (size_t)std::max<int64_t>(1, lim.max_model_len);
  if (messages.size() <= most) return std::nullopt;
  size_t num_system = 0;
  for (const ChatMessage& m : messages) num_system += m.role == "system";
  if (lim.overflow == OverflowPolicy::kError || num_system >= most) {
    return invalid_param("messages", "too many messages: " + std::to_string(messages.size()) +
                                         " (each is at least one token; this model's maximum "
                                         "context length is " +
                                         std::to_string(lim.max_model_len) + " tokens)");
  }
  size_t to_drop = messages.size() - most;
  std::vector<ChatMessage> kept;
  kept.reserve(most);
  for (ChatMessage& m : messages) {
    if (to_drop > 0 && m.role != "system") {
      --to_drop;
      continue;
    }
    kept.push_back(std::move(m));
  }
  messages = std::move(kept);
  return std::nullopt;
}

void handle_tokenize(ServerState& st, HttpRequest& req, HttpResponse& res) {
  auto body = parse_body(req.body, dom_budget(req));
  if (auto* e = std::get_if<ApiError>(&body)) return send_error(st, res, *e);
  const json& j = std::get<json>(body);
  if (auto m = j.find("model"); m != j.end() && !m->is_null()) {
    if (!m->is_string() || m->get<std::string>() != st.model_name) {
      return send_error(
          st, res,
          ApiError(RefusalReason::kModelNotFound, "The model " + m->dump() + " does not exist")
              .with_param("model"));
    }
  }
  std::vector<int32_t> tokens;
  if (auto p = j.find("prompt"); p != j.end()) {
    if (!p->is_string())
      return send_error(st, res, invalid_param("prompt", "'prompt' must be a string"));
    bool add_special = true;
    if (auto a = j.find("add_special_tokens"); a != j.end()) {
      if (!a->is_boolean()) {
        return send_error(st, res, invalid_param("add_special_tokens", "must be a boolean"));
      }
      add_special = a->get<bool>();
    }
    const std::string& text = p->get_ref<const std::string&>();
    if (auto e = prompt_bytes_over_context(st, text.size(), false)) return send_error(st, res, *e);
    tokens = st.tokenizer().encode(tokenizable_tail(st, text), add_special, /*parse_special=*/true);
  } else if (auto m = j.find("messages"); m != j.end()) {
    auto msgs = parse_messages(*m);
    if (auto* e = std::get_if<ApiError>(&msgs)) return send_error(st, res, *e);
    auto& list = std::get<std::vector<ChatMessage>>(msgs);
    if (auto e = bound_message_count(st, list)) return send_error(st, res, *e);
    size_t bytes = 0;
    for (const ChatMessage& cm : std::get<std::vector<ChatMessage>>(msgs))
      bytes += cm.content.size();
    if (auto e = prompt_bytes_over_context(st, bytes, true)) return send_error(st, res, *e);
    auto prompt = st.prompter->build(std::get<std::vector<ChatMessage>>(msgs), false);
    if (!prompt.ok()) return send_error(st, res, invalid_param("messages", prompt.message()));
    tokens = std::move(prompt->tokens);
  } else {
    return send_error(st, res, invalid_param("prompt", "give 'prompt' (a string) or 'messages'"));
  }
  // The answer while built: its JSON DOM (16 B a token, chunk headers included) and text (at
  // most 12 B a token); then it holds its text while written (hold_answer).
  const char* param = j.contains("prompt") ? "prompt" : "messages";
  if (auto e = charge_building(st, req.lease, 28 * (uint64_t)tokens.size() + 256, param)) {
    return send_error(st, res, *e);
  }
  send_json(
      res,
      {{"tokens", tokens}, {"count", tokens.size()}, {"max_model_len", st.limits().max_model_len}});
  if (auto e = hold_answer(st, res, std::move(req.lease), param)) send_error(st, res, *e);
}

void handle_detokenize(ServerState& st, HttpRequest& req, HttpResponse& res) {
  auto body = parse_body(req.body, dom_budget(req));
  if (auto* e = std::get_if<ApiError>(&body)) return send_error(st, res, *e);
  const json& j = std::get<json>(body);
  auto t = j.find("tokens");
  if (t == j.end()) return send_error(st, res, invalid_param("tokens", "'tokens' is required"));
  auto ids = parse_token_ids(*t, "tokens", st.tokenizer().n_vocab());
  if (auto* e = std::get_if<ApiError>(&ids)) return send_error(st, res, *e);
  const auto& list = std::get<std::vector<int32_t>>(ids);
  // The decoded text (at most max_token_bytes a token), then its valid UTF-8 copy (a
  // replacement character, 3 B, for an invalid byte) and the JSON text (\u00XX, 6 B, for a
  // control byte): at most 10 x the text while built.
  const uint64_t text_bytes = list.size() * (uint64_t)std::max<int64_t>(1, st.max_token_bytes);
  if (auto e = charge_building(st, req.lease, 10 * text_bytes + 256, "tokens")) {
    return send_error(st, res, *e);
  }
  send_json(res, {{"prompt", to_valid_utf8(st.tokenizer().decode(list))}});
  if (auto e = hold_answer(st, res, std::move(req.lease), "tokens")) send_error(st, res, *e);
}

}  // namespace kvw::server
