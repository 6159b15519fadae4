// server/server_stats.h: the server's own counters (requests, tokens, cancellations), for
// /metrics. Refusals by reason are in api_error.h's RefusalCounters.
// Thread safety: atomics; any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace kvw::server {

struct ServerCounters {
  std::atomic<uint64_t> num_requests{0};              // generation requests received (HTTP)
  std::atomic<uint64_t> num_choices_finished{0};      // engine requests that ended normally
  std::atomic<uint64_t> num_cancelled_stop{0};        // cancelled because a stop string matched
  std::atomic<uint64_t> num_cancelled_disconnect{0};  // client went away mid-request
  std::atomic<uint64_t> num_cancelled_drain{0};       // cancelled at the end of --drain-timeout
  std::atomic<uint64_t> num_prompt_tokens{0};
  std::atomic<uint64_t> num_completion_tokens{0};
  std::atomic<int64_t> num_active_streams{0};  // SSE responses open now
};

}  // namespace kvw::server
