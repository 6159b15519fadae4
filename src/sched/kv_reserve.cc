#include "sched/kv_reserve.h"

#include <algorithm>

#include "core/check.h"

namespace kvw {

LengthTracker::LengthTracker(size_t window) : window_(window) {
  CHECK(window > 0);
  samples_.reserve(window);
}

void LengthTracker::observe(int64_t total_tokens) {
  if (samples_.size() < window_) {
    samples_.push_back(total_tokens);
  } else {
    samples_[next_] = total_tokens;
    next_ = (next_ + 1) % window_;
  }
  dirty_ = true;
}

int64_t LengthTracker::p95() const {
  if (samples_.empty()) return 0;
  if (dirty_) {
    scratch_.assign(samples_.begin(), samples_.end());
    // Nearest rank: the smallest value with >= 95% of the samples at or below it.
    const size_t rank = (scratch_.size() * 95 + 99) / 100;
    const size_t k = std::max<size_t>(rank, 1) - 1;
    std::nth_element(scratch_.begin(), scratch_.begin() + static_cast<ptrdiff_t>(k),
                     scratch_.end());
    p95_ = scratch_[k];
    dirty_ = false;
  }
  return p95_;
}

}  // namespace kvw
