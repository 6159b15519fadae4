#include "server/refusal_pacer.h"

#include <algorithm>
#include <cmath>

namespace kvw::server {

double RefusalPacer::on_refusal(double now_s, int64_t retry_after_s) {
  if (!(cfg_.hold_s > 0)) return 0;
  const auto sec = static_cast<int64_t>(std::floor(now_s));
  std::lock_guard lock(mu_);
  if (sec != second_) {
    last_second_ = sec == second_ + 1 ? this_second_ : 0;
    this_second_ = 0;
    second_ = sec;
  }
  ++this_second_;
  // The last second's count weighted by the part of it still inside the one-second window.
  const double frac = now_s - double(sec);
  const double recent = double(this_second_) + double(last_second_) * (1.0 - frac);
  if (recent <= double(cfg_.hold_after)) return 0;
  ++num_held_;
  return std::min(cfg_.hold_s, double(std::max<int64_t>(retry_after_s, 0)));
}

uint64_t RefusalPacer::num_held() const {
  std::lock_guard lock(mu_);
  return num_held_;
}

}  // namespace kvw::server
