// server/routes.h: the route handlers behind Server (internal to kvw_server) and the helpers
// that write JSON and OpenAI errors. Each handler catches everything at its boundary.
// Thread safety: handlers run concurrently on the handler pool; state is in ServerState.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <vector>

#include "http/http_message.h"
#include "server/api_error.h"
#include "server/server_state.h"

namespace kvw::server {

using http::HttpRequest;
using http::HttpResponse;

// Dumps with invalid UTF-8 replaced (token pieces may hold partial characters).
std::string dump_json(const nlohmann::json& j);
void send_json(HttpResponse& res, const nlohmann::json& j, int status = 200);
// Counts the refusal under err.reason and writes the error body (+ Retry-After when set).
void send_error(ServerState& st, HttpResponse& res, const ApiError& err);
inline constexpr const char* kJsonType = "application/json; charset=utf-8";

// The request memory a parsed body may use: what the transport reserved, less the body itself.
uint64_t dom_budget(const HttpRequest& req);

// A prompt's text is at least ceil(bytes / max_token_bytes) tokens. When that alone is over
// the context (error policy), the prompt is refused before it is tokenised; under the other
// policies only the last (max_model_len + 1) x max_token_bytes bytes are tokenised (their
// tokens still cover the context), so tokenising never costs more than O(max_model_len).
std::optional<ApiError> prompt_bytes_over_context(const ServerState& st, size_t bytes, bool chat);
std::string_view tokenizable_tail(const ServerState& st, std::string_view text);
// Every chat message renders to at least one token, so more than max_model_len messages cannot
// fit: under --overflow error that is a 400 naming 'messages', before anything is rendered;
// under the other policies the oldest non-system messages are dropped down to max_model_len
// (they would be cut anyway), so rendering stays O(max_model_len) messages.
std::optional<ApiError> bound_message_count(const ServerState& st,
                                            std::vector<ChatMessage>& messages);
// The last `keep` bytes of `text` or fewer, starting at a UTF-8 character boundary.
std::string_view tokenizable_tail_bytes(std::string_view text, uint64_t keep);

// The HTTP answer for an engine error message; choice_error for a choice that ended in error
// (a request cancelled at the end of a drain is refused like one arriving during it).
ApiError engine_refusal(ServerState& st, const Error& e);
class ChoiceRunner;
ApiError choice_error(ServerState& st, const ChoiceRunner& r);

// The generation routes' door check (http::DoorCheck), from the request line and headers
// alone: 503 + Retry-After while draining or shedding, 429 + Retry-After when admission has no
// room for one more request; otherwise one admission slot is reserved for the request
// (AdmissionTicket in req.door_pass) and the handler admits its exact count against it.
std::optional<HttpResponse> generation_door(ServerState& st, HttpRequest& req);
void handle_completions(ServerState& st, HttpRequest& req, HttpResponse& res);
void handle_chat_completions(ServerState& st, HttpRequest& req, HttpResponse& res);
void handle_tokenize(ServerState& st, HttpRequest& req, HttpResponse& res);
void handle_detokenize(ServerState& st, HttpRequest& req, HttpResponse& res);

}  // namespace kvw::server
