// sched/kv_reserve.h: the --kv-reserve p95 estimator: keeps the total lengths (prompt + output)
// of the most recently finished requests and answers "how long will a request probably get?".
// Owner: the Scheduler (engine thread only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvw {

class LengthTracker {
 public:
  // Keeps the last `window` samples; p95 is recomputed lazily (O(window)) after a change.
  explicit LengthTracker(size_t window = 1024);

  void observe(int64_t total_tokens);
  size_t num_samples() const { return samples_.size(); }
  // 95th percentile (nearest rank) of the kept samples; 0 when there are none.
  int64_t p95() const;

 private:
  size_t window_;
  std::vector<int64_t> samples_;  // ring buffer [min(seen, window)]
  size_t next_ = 0;
  mutable int64_t p95_ = 0;
  mutable bool dirty_ = false;
  mutable std::vector<int64_t> scratch_;  // reused by p95(): no allocation per query
};

}  // namespace kvw
