// server/admission_ticket.h: the admission slots one generation request holds between the door
// (its headers) and its engine requests, so the cheap check at the door and the exact check
// after parsing cannot disagree. The door reserves one slot before the body is read; after
// parsing, admit_exact() admits the exact count (prompts x n choices) against it:
//
//   headers  -> reserve(1)          refused: 429/503 from the headers, body never read
//   parsed   -> admit_exact(total)  total <= held: admitted, no second decision (surplus back)
//                                   total >  held: only the extra slots are decided
//   submit   -> hand_over(1) each   the slot now returns through on_complete
//   any exit -> ~AdmissionTicket    every slot still held goes back (release, not a completion)
//
// Owned by the request (http::HttpRequest::door_pass, then the handler); one owner at a time.
// The AdmissionController is thread-safe and must outlive the ticket.
#pragma once

#include <cstdint>

#include "http/http_message.h"
#include "server/admission.h"

namespace kvw::server {

class AdmissionTicket final : public http::DoorPass {
 public:
  explicit AdmissionTicket(AdmissionController& admission) : admission_(&admission) {}
  ~AdmissionTicket() override { release(); }
  AdmissionTicket(const AdmissionTicket&) = delete;
  AdmissionTicket& operator=(const AdmissionTicket&) = delete;

  // Decides on `n` more slots (AdmissionController::try_admit); on kAdmit this ticket holds them.
  AdmissionDecision reserve(double now_s, int64_t n, const QueueLoad& engine, int64_t siblings = 0);
  // The exact check for `total` slots. Slots already held count without a new decision; only
  // total - held() more go through try_admit. On kAdmit the ticket holds exactly `total` (a
  // surplus goes back); on a refusal it keeps what it held until release() or destruction.
  // `siblings` of the total are choices beyond the first of their prompt (try_admit).
  AdmissionDecision admit_exact(double now_s, int64_t total, const QueueLoad& engine,
                                int64_t siblings = 0);
  // `n` held slots now belong to submitted engine requests (each returns its own slot through
  // AdmissionController::on_complete). n <= held().
  void hand_over(int64_t n);
  // Gives back every held slot. Idempotent.
  void release();
  int64_t held() const { return held_; }

 private:
  AdmissionController* admission_;
  int64_t held_ = 0;
};

}  // namespace kvw::server
