// server/api_error.h: OpenAI-style error responses ({"error":{"message","type","param","code"}}),
// the one table that gives every refusal reason its HTTP status, error type and code, the map
// from the engine's typed faults (ErrorKind) to reasons, and the refusal counters for /metrics.
// Thread safety: ApiError is a value; RefusalCounters are atomics, any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>

#include "core/status.h"

namespace kvw::server {

// Why a request was refused. Every non-2xx answer counts under exactly one reason, and each
// reason has exactly one status (refusal_spec), streamed or not.
enum class RefusalReason {
  kInvalidRequest,      // 400: bad JSON, wrong type, out of range
  kContextLength,       // 400 context_length_exceeded
  kUnauthorized,        // 401
  kModelNotFound,       // 404 model_not_found
  kNotFound,            // 404 unknown path
  kMethodNotAllowed,    // 405
  kBodyTooLarge,        // 413
  kBodyNotAllowed,      // 413: a body on a route that takes none, or without the API key
  kHeaderTimeout,       // 408: headers not complete within --header-timeout
  kBodyTimeout,         // 408: body not complete within --body-timeout
  kHeadersTooLarge,     // 431: more than the header count or byte limit
  kMalformedHttp,       // 400: not HTTP/1.1
  kTooManyConnections,  // 503: over --max-connections
  kRequestMemory,       // 503: request memory (--request-memory) stayed spent too long
  kSlowConsumer,        // 500: stream dropped, the client read too slowly (no answer possible)
  kInternal,            // 500: a handler or the engine failed
  kOutOfMemory,         // 503: an allocation failed while serving the request
  kNumerics,            // 500: the numerics guard ended the request
  kQueueFull,           // 429: --max-queue or the engine's request queue
  kQueueWait,           // 429: predicted wait over --max-queue-wait
  kQueueTimeout,        // 503: admitted, but no token within --max-queue-wait
  kShedding,            // 503: breaker shedding
  kDraining,            // 503: shutting down
  kCount,
};
const char* to_string(RefusalReason r);

struct RefusalSpec {
  int status;
  const char* type;  // OpenAI error type
  const char* code;  // default code; nullptr: null
};
const RefusalSpec& refusal_spec(RefusalReason r);
// Overload or a failure of the server's own (429 and 5xx), not a client's mistake (4xx) nor a
// client that reads too slowly: what diagnostics dumps are written for.
bool is_server_fault(RefusalReason r);

// The reason for an engine fault of this kind.
RefusalReason refusal_for(ErrorKind kind);

struct ApiError {
  ApiError() = default;
  // Status, type and code come from refusal_spec(reason).
  ApiError(RefusalReason reason_, std::string message_);
  ApiError& with_param(std::string p) & {
    param = std::move(p);
    return *this;
  }
  ApiError&& with_param(std::string p) && {
    param = std::move(p);
    return std::move(*this);
  }
  ApiError&& with_code(std::string c) && {  // a more precise code than the reason's default
    code = std::move(c);
    return std::move(*this);
  }
  ApiError&& with_retry_after(int64_t s) && {
    retry_after_s = s;
    return std::move(*this);
  }

  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty -> null
  std::string code;   // empty -> null
  RefusalReason reason = RefusalReason::kInvalidRequest;
  int64_t retry_after_s = 0;  // > 0: send Retry-After

  std::string to_json() const;
};

ApiError invalid_param(const std::string& param, const std::string& message);
// An engine Error (submit() or a channel's kError) as the answer; `retry_after_s` is used for
// the kinds that ask the client to come back (overloaded, unavailable).
ApiError engine_error(const Error& e, int64_t retry_after_s);

// Cumulative counts, one per RefusalReason.
class RefusalCounters {
 public:
  void add(RefusalReason r) { counts_[(size_t)r].fetch_add(1, std::memory_order_relaxed); }
  uint64_t get(RefusalReason r) const { return counts_[(size_t)r].load(std::memory_order_relaxed); }

 private:
  std::array<std::atomic<uint64_t>, (size_t)RefusalReason::kCount> counts_{};
};

}  // namespace kvw::server
