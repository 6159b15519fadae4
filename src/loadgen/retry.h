// loadgen/retry.h: when and after how long the load generator retries a request, the way the
// official `openai` SDKs do, so a benchmark sees what an SDK user sees: up to max_retries (2)
// more attempts on 408, 409, 429, any 5xx and connection failures (an `x-should-retry: true|false`
// header overrides); wait retry-after-ms, else Retry-After (seconds or an HTTP date) when it asks
// for 0 < wait < 60 s, else 0.5 s * 2^n capped at 8 s, minus up to 25% jitter.
// Pure functions; no I/O and no clock except the `now_unix_s` argument.
#pragma once

#include <optional>
#include <string>

#include "loadgen/http_client.h"

namespace kvw::loadgen {

// What a refused attempt's response said about retrying (from its headers).
struct RetryHints {
  std::optional<double> wait_s;      // from retry-after-ms or Retry-After, when parseable
  std::optional<bool> should_retry;  // x-should-retry: true / false
};
// Reads retry-after-ms, retry-after and x-should-retry; `now_unix_s` turns an HTTP-date
// Retry-After into a wait (a date in the past gives a negative wait, which is ignored later).
RetryHints parse_retry_hints(const HttpHeaders& headers, double now_unix_s);

// True when the SDK would retry an attempt that ended with `status` (0: no response head arrived:
// connect failure, reset or timeout before the headers).
bool is_retryable(int status, const RetryHints& hints);

// Seconds to wait before retry number `num_retries_done + 1`; `uniform01` is a draw in [0, 1)
// used for jitter only when no header gave the wait.
double retry_delay_s(const RetryHints& hints, int num_retries_done, double uniform01);

constexpr double kMaxHonouredRetryAfterS = 60;  // the SDK ignores longer waits and backs off
constexpr double kInitialRetryDelayS = 0.5, kMaxRetryDelayS = 8;

}  // namespace kvw::loadgen
