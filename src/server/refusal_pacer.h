// server/refusal_pacer.h: how long a door refusal (429) is held before it is written. A client
// that ignores Retry-After and retries as soon as it is answered (a retry storm) costs the
// server one refusal per round trip: 350 such clients on loopback sent ~11,000 a second. Held
// for `hold_s`, each such client retries at most once per hold, while clients that honour
// Retry-After lose nothing (they wait longer than the hold anyway). Holds start only in a
// storm, when the door has refused more than `hold_after` requests within the last second, so
// a lone 429 is still answered at once. Off by default (--refusal-hold 0): a held refusal also
// holds back a client that would take the next free slot, and while it waits that slot goes
// to whoever comes next (README, "Sampling at real vocabularies, and refusals under overload").
// Pure logic: time comes in as an argument (seconds on any monotonic clock).
// Thread safety: every method locks one mutex; HTTP threads call it concurrently.
#pragma once

#include <cstdint>
#include <mutex>

namespace kvw::server {

struct RefusalPacing {
  double hold_s = 0;        // --refusal-hold; 0 = off
  int64_t hold_after = 64;  // --refusal-hold-after: refusals within a second before holds start
};

class RefusalPacer {
 public:
  explicit RefusalPacer(const RefusalPacing& cfg) : cfg_(cfg) {}

  // Counts one refusal at `now_s` and returns how long to hold it: 0, or hold_s capped at
  // `retry_after_s` (a hold never outlasts the wait the answer announces).
  double on_refusal(double now_s, int64_t retry_after_s);
  uint64_t num_held() const;

 private:
  const RefusalPacing cfg_;
  mutable std::mutex mu_;
  int64_t second_ = -1;  // the whole second `this_second_` counts
  int64_t this_second_ = 0, last_second_ = 0;
  uint64_t num_held_ = 0;
};

}  // namespace kvw::server
