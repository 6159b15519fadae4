#include "server/admission_ticket.h"

#include "core/check.h"

namespace kvw::server {

AdmissionDecision AdmissionTicket::reserve(double now_s, int64_t n, const QueueLoad& engine,
                                           int64_t siblings) {
  const AdmissionDecision d = admission_->try_admit(now_s, n, engine, siblings);
  if (d.verdict == AdmissionVerdict::kAdmit) held_ += n;
  return d;
}

AdmissionDecision AdmissionTicket::admit_exact(double now_s, int64_t total, const QueueLoad& engine,
                                               int64_t siblings) {
  if (total <= held_) {
    admission_->release(held_ - total);
    held_ = total;
    return AdmissionDecision{};  // kAdmit: the door already decided on these slots
  }
  // The slots held stand for first choices as far as they go; the rest are siblings.
  const int64_t extra = total - held_;
  return reserve(now_s, extra, engine, std::min(extra, siblings));
}

void AdmissionTicket::hand_over(int64_t n) {
  CHECK(n >= 0 && n <= held_) << "hand_over(" << n << ") with " << held_ << " slots held";
  held_ -= n;
}

void AdmissionTicket::release() {
  if (held_ > 0) admission_->release(held_);
  held_ = 0;
}

}  // namespace kvw::server
