// server/server_observer.h: what the server reports to a metrics layer, without depending on
// one: every finished engine request (= one OpenAI choice) with its timings, every refusal by
// reason, and breaker state changes. `kvwarden serve` connects it to obs::ObservabilityContext
// (server/observability.h); tests may use their own.
// Thread safety: the callbacks run on HTTP worker threads (requests, refusals), the gate thread
// (408 refusals) and the breaker monitor thread; implementations must be thread-safe and quick.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/queues.h"
#include "server/api_error.h"
#include "server/breaker.h"

namespace kvw::server {

// Times are steady_clock nanoseconds since its epoch; 0 = did not happen.
struct ChoiceTiming {
  uint64_t arrival_ns = 0;         // the HTTP request was received (handler entry)
  uint64_t first_token_ns = 0;     // first token read from the engine's channel
  uint64_t finish_ns = 0;          // final event read (or the client went away)
  std::vector<uint64_t> token_ns;  // every token as it was read, in order
  uint32_t num_prompt_tokens = 0;
  uint32_t num_generation_tokens = 0;
  FinishReason reason = FinishReason::kStop;  // kCancelled: stop string, disconnect or drain
};

class ServerObserver {
 public:
  virtual ~ServerObserver() = default;
  virtual void on_choice_finished(const ChoiceTiming& t) = 0;
  virtual void on_refusal(RefusalReason reason) = 0;
  virtual void on_breaker_change(BreakerState state) = 0;
};

uint64_t steady_now_ns();

}  // namespace kvw::server
