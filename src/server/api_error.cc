#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace kvw::server {
namespace {

constexpr const char* kInvalid = "invalid_request_error";
constexpr const char* kServer = "server_error";
constexpr const char* kRate = "rate_limit_error";

struct Row {
  const char* label;  // the metrics label (kvwarden_requests_shed_total{reason=...})
  RefusalSpec spec;
};

// The one table: index = RefusalReason.
constexpr std::array<Row, (size_t)RefusalReason::kCount> kTable = {{
    {"invalid_request", {400, kInvalid, "invalid_value"}},
    {"context_length_exceeded", {400, kInvalid, "context_length_exceeded"}},
    {"unauthorized", {401, kInvalid, "invalid_api_key"}},
    {"model_not_found", {404, kInvalid, "model_not_found"}},
    {"not_found", {404, kInvalid, "not_found"}},
    {"method_not_allowed", {405, kInvalid, "method_not_allowed"}},
    {"body_too_large", {413, kInvalid, "payload_too_large"}},
    {"body_not_allowed", {413, kInvalid, "body_not_allowed"}},
    {"header_timeout", {408, kInvalid, "request_timeout"}},
    {"body_timeout", {408, kInvalid, "request_timeout"}},
    {"headers_too_large", {431, kInvalid, "headers_too_large"}},
    {"malformed_http", {400, kInvalid, "bad_request"}},
    {"too_many_connections", {503, kServer, "too_many_connections"}},
    {"request_memory", {503, kServer, "request_memory_exhausted"}},
    {"slow_consumer", {500, kServer, "slow_consumer"}},
    {"internal", {500, kServer, nullptr}},
    {"out_of_memory", {503, kServer, "out_of_memory"}},
    {"numerics", {500, kServer, "numerics_error"}},
    {"queue_full", {429, kRate, "queue_full"}},
    {"queue_wait", {429, kRate, "queue_wait_exceeded"}},
    {"queue_timeout", {503, kServer, "queue_timeout"}},
    {"shedding", {503, kServer, "overloaded"}},
    {"draining", {503, kServer, "draining"}},
}};

}  // namespace

const char* to_string(RefusalReason r) {
  return r < RefusalReason::kCount ? kTable[(size_t)r].label : "?";
}

const RefusalSpec& refusal_spec(RefusalReason r) {
  return kTable[r < RefusalReason::kCount ? (size_t)r : (size_t)RefusalReason::kInternal].spec;
}

bool is_server_fault(RefusalReason r) {
  const int status = refusal_spec(r).status;
  return (status == 429 || status >= 500) && r != RefusalReason::kSlowConsumer;
}

RefusalReason refusal_for(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidInput:
      return RefusalReason::kInvalidRequest;
    case ErrorKind::kContextOverflow:
      return RefusalReason::kContextLength;
    case ErrorKind::kOverloaded:
      return RefusalReason::kQueueFull;
    case ErrorKind::kUnavailable:
      return RefusalReason::kDraining;
    case ErrorKind::kNumerics:
      return RefusalReason::kNumerics;
    case ErrorKind::kQueueTimeout:
      return RefusalReason::kQueueTimeout;
    case ErrorKind::kOutOfMemory:
      return RefusalReason::kOutOfMemory;
    case ErrorKind::kInternal:
      break;
  }
  return RefusalReason::kInternal;
}

ApiError::ApiError(RefusalReason reason_, std::string message_)
    : status(refusal_spec(reason_).status),
      message(std::move(message_)),
      type(refusal_spec(reason_).type),
      code(refusal_spec(reason_).code ? refusal_spec(reason_).code : ""),
      reason(reason_) {}

std::string ApiError::to_json() const {
  nlohmann::json e = {{"message", message},
                      {"type", type},
                      {"param", param.empty() ? nlohmann::json() : nlohmann::json(param)},
                      {"code", code.empty() ? nlohmann::json() : nlohmann::json(code)}};
  return nlohmann::json{{"error", e}}.dump(-1, ' ', false,
                                           nlohmann::json::error_handler_t::replace);
}

ApiError invalid_param(const std::string& param, const std::string& message) {
  return ApiError(RefusalReason::kInvalidRequest, message).with_param(param);
}

ApiError engine_error(const Error& e, int64_t retry_after_s) {
  ApiError a(refusal_for(e.kind), e.message);
  if (a.status == 429 || a.status == 503) a.retry_after_s = retry_after_s;
  return a;
}

}  // namespace kvw::server
