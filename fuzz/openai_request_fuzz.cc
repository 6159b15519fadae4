// fuzz/openai_request_fuzz.cc: the OpenAI request parser on arbitrary bodies: parse_body (with a
// request-memory budget, as the server calls it), then the completion and chat readers. Every
// body is either a request or an ApiError with a 4xx status; never a crash or an exception.
// The tool fields (tools, tool_choice, functions, ...) are read too.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <variant>

#include "server/openai_request.h"
#include "server/tool_request.h"

using kvw::server::ApiError;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  auto parsed = kvw::server::parse_body(body, 4 * body.size() + (256u << 10));
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    if (e->status < 400 || e->status >= 500) std::abort();
    return 0;
  }
  const nlohmann::json& j = std::get<nlohmann::json>(parsed);
  auto completion = kvw::server::parse_completion_request(j);
  if (auto* e = std::get_if<ApiError>(&completion); e && (e->status < 400 || e->status >= 500)) {
    std::abort();
  }
  auto chat = kvw::server::parse_chat_request(j);
  if (auto* e = std::get_if<ApiError>(&chat); e && (e->status < 400 || e->status >= 500)) {
    std::abort();
  }
  auto tools = kvw::server::parse_tool_request(j, body);
  if (auto* e = std::get_if<ApiError>(&tools); e && (e->status < 400 || e->status >= 500)) {
    std::abort();
  }
  return 0;
}
