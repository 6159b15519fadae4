// server/routes.h: the route handlers behind Server (internal to kvw_server) and the helpers
// that write JSON and OpenAI errors. Each handler catches everything at its boundary.
// Thread safety: handlers run concurrently on the HTTP pool; state is in ServerState.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/server_state.h"

namespace kvw::server {

// Dumps with invalid UTF-8 replaced (token pieces may hold partial characters).
std::string dump_json(const nlohmann::json& j);
void send_json(httplib::Response& res, const nlohmann::json& j, int status = 200);
// Counts the refusal under err.reason and writes the error body (+ Retry-After when set).
void send_error(ServerState& st, httplib::Response& res, const ApiError& err);

void handle_completions(ServerState& st, const httplib::Request& req, httplib::Response& res);
void handle_chat_completions(ServerState& st, const httplib::Request& req, httplib::Response& res);
void handle_tokenize(ServerState& st, const httplib::Request& req, httplib::Response& res);
void handle_detokenize(ServerState& st, const httplib::Request& req, httplib::Response& res);

}  // namespace kvw::server
