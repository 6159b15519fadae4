// core/breaker_state.h: the load breaker's states, shared by the server (which runs the
// breaker) and observability (which exports it as kvwarden_breaker_state).
#pragma once

namespace kvw {

enum class BreakerState { kOk = 0, kWarn = 1, kShedding = 2 };

inline const char* to_string(BreakerState s) {
  switch (s) {
    case BreakerState::kOk:
      return "ok";
    case BreakerState::kWarn:
      return "warn";
    case BreakerState::kShedding:
      return "shedding";
  }
  return "?";
}

}  // namespace kvw
