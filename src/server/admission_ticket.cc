#include "server/admission_ticket.h"

#include "core/check.h"

namespace kvw::server {

AdmissionDecision AdmissionTicket::reserve(double now_s, int64_t n, const QueueLoad& engine) {
  const AdmissionDecision d = admission_->try_admit(now_s, n, engine);
  if (d.verdict == AdmissionVerdict::kAdmit) held_ += n;
  return d;
}

AdmissionDecision AdmissionTicket::admit_exact(double now_s, int64_t total,
                                               const QueueLoad& engine) {
  if (total <= held_) {
    admission_->release(held_ - total);
    held_ = total;
    return AdmissionDecision{};  // kAdmit: the door already decided on these slots
  }
  return reserve(now_s, total - held_, engine);
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
