#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace kvw::server {

const char* to_string(RefusalReason r) {
  switch (r) {
    case RefusalReason::kInvalidRequest:
      return "invalid_request";
    case RefusalReason::kContextLength:
      return "context_length_exceeded";
    case RefusalReason::kUnauthorized:
      return "unauthorized";
    case RefusalReason::kModelNotFound:
      return "model_not_found";
    case RefusalReason::kNotFound:
      return "not_found";
    case RefusalReason::kMethodNotAllowed:
      return "method_not_allowed";
    case RefusalReason::kBodyTooLarge:
      return "body_too_large";
    case RefusalReason::kHeaderTimeout:
      return "header_timeout";
    case RefusalReason::kHeadersTooLarge:
      return "headers_too_large";
    case RefusalReason::kBodyTimeout:
      return "body_timeout";
    case RefusalReason::kMalformedHttp:
      return "malformed_http";
    case RefusalReason::kTooManyConnections:
      return "too_many_connections";
    case RefusalReason::kRequestMemory:
      return "request_memory";
    case RefusalReason::kSlowConsumer:
      return "slow_consumer";
    case RefusalReason::kInternal:
      return "internal";
    case RefusalReason::kQueueFull:
      return "queue_full";
    case RefusalReason::kQueueWait:
      return "queue_wait";
    case RefusalReason::kShedding:
      return "shedding";
    case RefusalReason::kDraining:
      return "draining";
    case RefusalReason::kEngine:
      return "engine";
    case RefusalReason::kCount:
      break;
  }
  return "?";
}

std::string ApiError::to_json() const {
  nlohmann::json e = {{"message", message},
                      {"type", type},
                      {"param", param.empty() ? nlohmann::json() : nlohmann::json(param)},
                      {"code", code.empty() ? nlohmann::json() : nlohmann::json(code)}};
  return nlohmann::json{{"error", e}}.dump(-1, ' ', false,
                                           nlohmann::json::error_handler_t::replace);
}

EngineErrorKind classify_engine_error(std::string_view m) {
  if (m.starts_with("request queue full")) return EngineErrorKind::kQueueFull;
  if (m == "engine is shut down" || m == "engine shut down") return EngineErrorKind::kShutDown;
  if (m.starts_with("numerics guard")) return EngineErrorKind::kNumerics;
  return EngineErrorKind::kBadRequest;
}

ApiError invalid_param(const std::string& param, const std::string& message) {
  return ApiError(400, RefusalReason::kInvalidRequest, "invalid_value", message).with_param(param);
}

}  // namespace kvw::server
