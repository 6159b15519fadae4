// loadgen/retry.cc: SDK-style retry decisions and delays (see retry.h).
#include "loadgen/retry.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace kvw::loadgen {

namespace {
std::optional<double> parse_number(const std::string& v) {
  if (v.empty()) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || !std::isfinite(d)) return std::nullopt;
  return d;
}

// RFC 9110 IMF-fixdate, e.g. "Wed, 21 Oct 2015 07:28:00 GMT".
std::optional<double> parse_http_date(const std::string& v) {
  tm t{};
  const char* end = strptime(v.c_str(), "%a, %d %b %Y %H:%M:%S", &t);
  if (end == nullptr) return std::nullopt;
  return static_cast<double>(timegm(&t));
}
}  // namespace

RetryHints parse_retry_hints(const HttpHeaders& headers, double now_unix_s) {
  RetryHints h;
  std::optional<double> ms, after;
  for (const auto& [name, value] : headers) {
    if (name == "retry-after-ms") {
      ms = parse_number(value);
    } else if (name == "retry-after") {
      after = parse_number(value);
      if (!after) {
        if (auto date = parse_http_date(value)) after = *date - now_unix_s;
      }
    } else if (name == "x-should-retry") {
      if (value == "true") h.should_retry = true;
      if (value == "false") h.should_retry = false;
    }
  }
  // retry-after-ms is finer, so it wins (as in the SDK).
  if (ms && *ms != 0) {
    h.wait_s = *ms / 1e3;
  } else if (after) {
    h.wait_s = *after;
  }
  return h;
}

bool is_retryable(int status, const RetryHints& hints) {
  if (hints.should_retry) return *hints.should_retry;
  return status == 0 || status == 408 || status == 409 || status == 429 || status >= 500;
}

double retry_delay_s(const RetryHints& hints, int num_retries_done, double uniform01) {
  // A server's wait is taken as given unless it is zero, negative or a minute or more: the SDK
  // then falls back to its own backoff rather than stall (or hammer) the caller.
  if (hints.wait_s && *hints.wait_s > 0 && *hints.wait_s < kMaxHonouredRetryAfterS)
    return *hints.wait_s;
  const double backoff =
      std::min(kInitialRetryDelayS * std::pow(2.0, std::max(0, num_retries_done)), kMaxRetryDelayS);
  return backoff * (1 - 0.25 * std::clamp(uniform01, 0.0, 1.0));
}

}  // namespace kvw::loadgen
