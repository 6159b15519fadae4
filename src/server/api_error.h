// server/api_error.h: OpenAI-style error responses ({"error":{"message","type","param","code"}})
// and the refusal counters (one per reason) that /metrics can export.
// Thread safety: ApiError is a value; RefusalCounters are atomics, any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace kvw::server {

// Why a request was refused. Every non-2xx answer counts under exactly one reason.
enum class RefusalReason {
  kInvalidRequest,      // 400: bad JSON, wrong type, out of range
  kContextLength,       // 400 context_length_exceeded
  kUnauthorized,        // 401
  kModelNotFound,       // 404 model_not_found
  kNotFound,            // 404 unknown path
  kMethodNotAllowed,    // 405
  kBodyTooLarge,        // 413
  kHeaderTimeout,       // 408: headers not complete within --header-timeout
  kBodyTimeout,         // 408: body not complete within --body-timeout
  kHeadersTooLarge,     // 431: more than the header count or byte limit
  kMalformedHttp,       // 400: not HTTP/1.1
  kTooManyConnections,  // 503: over --max-connections
  kRequestMemory,       // 503: request memory (--request-memory) stayed spent too long
  kSlowConsumer,        // stream dropped: the client read too slowly (no answer possible)
  kInternal,            // 500: a handler failed
  kQueueFull,           // 429: --max-queue
  kQueueWait,           // 429: predicted wait over --max-queue-wait
  kShedding,            // 503: breaker shedding
  kDraining,            // 503: shutting down
  kEngine,              // engine refused or failed the request
  kCount,
};
const char* to_string(RefusalReason r);

struct ApiError {
  ApiError() = default;
  ApiError(int status_, RefusalReason reason_, std::string code_, std::string message_)
      : status(status_), message(std::move(message_)), code(std::move(code_)), reason(reason_) {}
  ApiError& with_param(std::string p) & {
    param = std::move(p);
    return *this;
  }
  ApiError&& with_param(std::string p) && {
    param = std::move(p);
    return std::move(*this);
  }
  ApiError&& with_type(std::string t) && {
    type = std::move(t);
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

// What an engine error message means for the HTTP answer. Engine::submit and the channel's
// kError report text only, so this matches the engine's own wording (src/engine/engine.cc
// "request queue full (...)", "engine is shut down"; engine_loop.cc "engine shut down",
// "numerics guard: ..."). Anything else is the request's fault (400).
enum class EngineErrorKind { kQueueFull, kShutDown, kNumerics, kBadRequest };
EngineErrorKind classify_engine_error(std::string_view message);

// Cumulative counts, one per RefusalReason.
class RefusalCounters {
 public:
  void add(RefusalReason r) { counts_[(size_t)r].fetch_add(1, std::memory_order_relaxed); }
  uint64_t get(RefusalReason r) const { return counts_[(size_t)r].load(std::memory_order_relaxed); }

 private:
  std::array<std::atomic<uint64_t>, (size_t)RefusalReason::kCount> counts_{};
};

}  // namespace kvw::server
