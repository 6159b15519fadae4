#include "server/admission.h"

#include <algorithm>
#include <cmath>

namespace kvw::server {

double AdmissionController::drain_rate_locked() const {
  if (ewma_interval_s_ <= 0) return cfg_.initial_drain_rate;
  return 1.0 / ewma_interval_s_;
}

int64_t AdmissionController::queued_locked(int64_t engine_waiting) const {
  return std::max<int64_t>({0, in_flight_ - concurrency_, engine_waiting});
}

int64_t AdmissionController::clamp_retry_after(double wait_s) const {
  return (int64_t)std::clamp(std::ceil(wait_s), 1.0, std::max(1.0, cfg_.max_retry_after_s));
}

int64_t AdmissionController::retry_after_locked(int64_t queued) const {
  return clamp_retry_after((double)std::max<int64_t>(queued, 1) / drain_rate_locked());
}

AdmissionDecision AdmissionController::try_admit(double now_s, int64_t n, const QueueLoad& engine,
                                                 int64_t siblings) {
  const int64_t engine_waiting = std::max<int64_t>(engine.num_waiting, 0);
  std::lock_guard lock(mu_);
  AdmissionDecision d;
  d.queued_ahead = queued_locked(engine_waiting);
  if (engine_waiting > 0) {
    tokens_per_queued_ = (double)std::max<int64_t>(engine.waiting_work_tokens, 0) / engine_waiting;
  }
  // Admitted requests the engine has not reported as waiting yet: the mean work of one that is.
  const double per_request =
      tokens_per_queued_ > 0 ? tokens_per_queued_ : (double)cfg_.initial_request_tokens;
  d.queued_work_tokens =
      std::max<int64_t>(engine.waiting_work_tokens, 0) +
      (int64_t)std::ceil((double)(d.queued_ahead - engine_waiting) * per_request);
  const double rate = engine.token_rate > 0 ? engine.token_rate : cfg_.initial_token_rate;
  // It starts neither before a running slot frees nor before the work ahead is computed: each
  // is a lower bound of its wait, so the larger is taken.
  d.predicted_wait_s = std::max(engine.slot_wait_s, (double)d.queued_work_tokens / rate);
  // The new requests queue too when every slot is taken.
  const int64_t queued_after = std::max<int64_t>(
      {0, in_flight_ + n - concurrency_, engine_waiting > 0 ? engine_waiting + n : 0});
  siblings = std::clamp<int64_t>(siblings, 0, n);
  const int64_t sibling_room = siblings > 0 ? cfg_.max_queue : 0;
  if (cfg_.max_queue > 0 &&
      (queued_after - siblings > cfg_.max_queue || queued_after > cfg_.max_queue + sibling_room)) {
    d.verdict = AdmissionVerdict::kQueueFull;
  } else if (cfg_.max_queue_wait_s > 0 && d.predicted_wait_s > cfg_.max_queue_wait_s) {
    d.verdict = AdmissionVerdict::kWaitTooLong;
  }
  if (d.verdict != AdmissionVerdict::kAdmit) {
    d.retry_after_s = clamp_retry_after(d.predicted_wait_s);
    return d;
  }
  if (in_flight_ == 0) busy_since_s_ = now_s;
  in_flight_ += n;
  return d;
}

void AdmissionController::on_complete(double now_s) {
  std::lock_guard lock(mu_);
  if (in_flight_ > 0) --in_flight_;
  // Only time spent busy counts: an idle gap before the work arrived is not drain time.
  const double since =
      num_completed_ > 0 ? std::max(last_completion_s_, busy_since_s_) : busy_since_s_;
  const double interval = std::max(now_s - since, 1e-3);
  ewma_interval_s_ = ewma_interval_s_ <= 0
                         ? interval
                         : cfg_.ewma_alpha * interval + (1 - cfg_.ewma_alpha) * ewma_interval_s_;
  last_completion_s_ = now_s;
  ++num_completed_;
}

void AdmissionController::release(int64_t n) {
  std::lock_guard lock(mu_);
  in_flight_ = std::max<int64_t>(0, in_flight_ - n);
}

int64_t AdmissionController::retry_after_s() const {
  std::lock_guard lock(mu_);
  return retry_after_locked(in_flight_);
}

AdmissionSnapshot AdmissionController::snapshot() const {
  std::lock_guard lock(mu_);
  return {
      .in_flight = in_flight_, .drain_rate = drain_rate_locked(), .num_completed = num_completed_};
}

}  // namespace kvw::server
