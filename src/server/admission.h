// server/admission.h: admission control for generation requests: a bounded queue and a
// predicted-wait limit. The predicted wait is the queued work in tokens (prompt tokens to
// compute + output tokens to decode) over the engine's measured token rate, or, when every
// running slot is taken and it is longer, the time until the soonest running request ends.
// Retry-After for other refusals comes from a drain-rate estimate (EWMA of completion
// intervals).
// Pure logic: time and the engine's figures come in as arguments (seconds on any monotonic
// clock), so tests drive it.
// Thread safety: every method locks one mutex; HTTP threads call it concurrently.
#pragma once

#include <cstdint>
#include <mutex>

namespace kvw::server {

struct AdmissionConfig {
  // Engine requests that wait for a running slot at most (--max-queue); 0 = unbounded.
  int64_t max_queue = 256;
  // Refuse when the predicted wait exceeds this (--max-queue-wait, seconds); 0 = off. The same
  // flag ends an admitted request that produced no token within it (GenerationRequest).
  double max_queue_wait_s = 60;
  // Token rate assumed before the engine measured one (tokens/s). Low, so the wait limit is
  // not waived while nothing is known; the engine reports a rate after its first step.
  double initial_token_rate = 100;
  // Work assumed for a queued request the engine has not reported yet (tokens), until a
  // waiting request's work was seen.
  int64_t initial_request_tokens = 256;
  // Completions per second assumed before the first completion (conservative, so the wait
  // limit is not waived while nothing is known).
  double initial_drain_rate = 1.0;
  double ewma_alpha = 0.2;         // weight of the newest completion interval
  double max_retry_after_s = 600;  // Retry-After never says more than this
};

enum class AdmissionVerdict { kAdmit, kQueueFull, kWaitTooLong };

// The engine's queue as of its latest step (EngineStats), passed in so the controller is pure.
struct QueueLoad {
  int64_t num_waiting = 0;  // engine requests waiting for a running slot
  // Their work left, tokens: prompt to compute + output to decode (EngineStats::
  // num_waiting_work_tokens).
  int64_t waiting_work_tokens = 0;
  double token_rate = 0;  // tokens/s the engine computes while busy; 0: not measured yet
  // Every running slot taken: until the soonest running request ends (slot_ends.h), seconds;
  // 0 when a slot is free or no end is foreseen.
  double slot_wait_s = 0;
};

struct AdmissionDecision {
  AdmissionVerdict verdict = AdmissionVerdict::kAdmit;
  int64_t queued_ahead = 0;        // engine requests waiting ahead of this one
  int64_t queued_work_tokens = 0;  // their work, tokens
  double predicted_wait_s = 0;     // queued_work_tokens / token rate
  int64_t retry_after_s = 1;       // for a refusal: ceil(predicted wait), >= 1
};

struct AdmissionSnapshot {
  int64_t in_flight = 0;  // admitted engine requests not yet completed
  double drain_rate = 0;  // completions per second (EWMA, or the initial estimate)
  uint64_t num_completed = 0;
};

class AdmissionController {
 public:
  // `concurrency`: requests the engine runs at once (EngineLimits::max_num_seqs); only work
  // beyond it is queued.
  AdmissionController(const AdmissionConfig& cfg, int64_t concurrency)
      : cfg_(cfg), concurrency_(concurrency) {}

  // Decides on `n` engine requests (one HTTP request with n choices). `engine` is the engine's
  // own queue (KV-limited admission can queue below `concurrency`). Queued ahead: the larger of
  // the engine's waiting count and the admitted requests beyond `concurrency` (submissions the
  // engine has not reported yet), whose work is taken as the mean of the engine's waiting
  // requests (or the last mean seen, or initial_request_tokens). Predicted wait: that work over
  // the token rate, or the wait for a running slot (QueueLoad::slot_wait_s) when longer. On
  // kAdmit the n requests count as in flight until on_complete. `siblings` of the n are further
  // choices of prompts already admitted (they share the prompt and its prefill): they may queue
  // up to --max-queue places beyond the limit, while the rest must fit it. Without this a
  // request with n > 1 choices, which needs n free places at once, was refused whenever n = 1
  // requests took each place as it freed (a retry storm starved them, issue 34).
  AdmissionDecision try_admit(double now_s, int64_t n, const QueueLoad& engine,
                              int64_t siblings = 0);
  // One engine request ended (any reason); feeds the drain-rate estimate.
  void on_complete(double now_s);
  // Gives back `n` admitted slots that never became engine requests (a door reservation the
  // request did not use: refused after parsing, bad input, client gone). Not a completion: the
  // drain-rate estimate is unchanged. See admission_ticket.h.
  void release(int64_t n);
  // Retry-After for refusals that are not about the queue (shedding, draining): the time to
  // drain what is in flight now, >= 1 s.
  int64_t retry_after_s() const;
  AdmissionSnapshot snapshot() const;

 private:
  double drain_rate_locked() const;
  int64_t queued_locked(int64_t engine_waiting) const;
  int64_t retry_after_locked(int64_t queued) const;
  int64_t clamp_retry_after(double wait_s) const;

  const AdmissionConfig cfg_;
  const int64_t concurrency_;
  mutable std::mutex mu_;
  int64_t in_flight_ = 0;
  uint64_t num_completed_ = 0;
  double busy_since_s_ = 0;       // when in_flight_ last went from 0 to > 0
  double last_completion_s_ = 0;  // valid when num_completed_ > 0
  double ewma_interval_s_ = 0;    // 0 until the first measured interval
  double tokens_per_queued_ = 0;  // the last mean work of an engine-waiting request; 0: none
};

}  // namespace kvw::server
