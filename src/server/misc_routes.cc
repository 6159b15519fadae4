// JSON/error helpers and the small routes: /tokenize and /detokenize (vLLM's shapes).
#include "server/openai_request.h"
#include "server/routes.h"
#include "tokenizer/utf8.h"

namespace kvw::server {

using nlohmann::json;

namespace {
// Debian's httplib brotli-compresses exactly "application/json" (quality 11) for clients that
// accept br: a 135 kB logprobs response took ~0.3 s longer to send. With the charset parameter
// the type no longer matches and bodies go out plain (JSON is UTF-8 anyway).
constexpr const char* kJson = "application/json; charset=utf-8";
}  // namespace

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void send_json(httplib::Response& res, const json& j, int status) {
  res.status = status;
  res.set_content(dump_json(j), kJson);
}

void send_error(ServerState& st, httplib::Response& res, const ApiError& err) {
  st.refused(err.reason);
  res.status = err.status;
  if (err.retry_after_s > 0) res.set_header("Retry-After", std::to_string(err.retry_after_s));
  res.set_content(err.to_json(), kJson);
}

void handle_tokenize(ServerState& st, const httplib::Request& req, httplib::Response& res) {
  auto body = parse_body(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) return send_error(st, res, *e);
  const json& j = std::get<json>(body);
  if (auto m = j.find("model"); m != j.end() && !m->is_null()) {
    if (!m->is_string() || m->get<std::string>() != st.model_name) {
      return send_error(st, res,
                        ApiError(404, RefusalReason::kModelNotFound, "model_not_found",
                                 "The model " + m->dump() + " does not exist")
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
    tokens = st.tokenizer().encode(p->get<std::string>(), add_special, /*parse_special=*/true);
  } else if (auto m = j.find("messages"); m != j.end()) {
    auto msgs = parse_messages(*m);
    if (auto* e = std::get_if<ApiError>(&msgs)) return send_error(st, res, *e);
    auto prompt = st.prompter->build(std::get<std::vector<ChatMessage>>(msgs), false);
    if (!prompt.ok()) return send_error(st, res, invalid_param("messages", prompt.message()));
    tokens = std::move(prompt->tokens);
  } else {
    return send_error(st, res, invalid_param("prompt", "give 'prompt' (a string) or 'messages'"));
  }
  send_json(res,
            {{"tokens", tokens}, {"count", tokens.size()}, {"max_model_len", st.max_model_len}});
}

void handle_detokenize(ServerState& st, const httplib::Request& req, httplib::Response& res) {
  auto body = parse_body(req.body);
  if (auto* e = std::get_if<ApiError>(&body)) return send_error(st, res, *e);
  const json& j = std::get<json>(body);
  auto t = j.find("tokens");
  if (t == j.end()) return send_error(st, res, invalid_param("tokens", "'tokens' is required"));
  auto ids = parse_token_ids(*t, "tokens", st.tokenizer().n_vocab());
  if (auto* e = std::get_if<ApiError>(&ids)) return send_error(st, res, *e);
  send_json(
      res, {{"prompt", to_valid_utf8(st.tokenizer().decode(std::get<std::vector<int32_t>>(ids)))}});
}

}  // namespace kvw::server
