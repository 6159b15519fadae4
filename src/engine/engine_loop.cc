// The engine thread: drain -> schedule -> forward -> guard + sample -> update -> emit.
#include <algorithm>
#include <chrono>
#include <exception>
#include <new>
#include <span>

#include "core/check.h"
#include "core/log.h"
#include "engine/engine.h"

namespace kvw {
namespace {

uint64_t elapsed_ns(std::chrono::steady_clock::time_point since) {
  return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now() - since)
      .count();
}

}  // namespace

void Engine::run() {
  using namespace std::chrono_literals;
  while (true) {
    admit_pending();
    publish_snapshot_if_wanted();
    if (queue_->closed()) break;
    if (!sched_->has_unfinished()) {
      publish_and_emit();
      queue_->wait_for_work(100ms);
      continue;
    }
    expire_overdue();
    // Nothing schedulable (all waiting on memory that no running request will free) should
    // not happen; back off rather than spin if it does.
    if (!step()) queue_->wait_for_work(1ms);
  }
  drain_at_shutdown();
}

void Engine::admit_pending() {
  pending_.clear();
  cancels_.clear();
  queue_->drain(pending_, cancels_);
  for (PendingRequest& p : pending_) {
    // An allocation failure while admitting one request refuses that request only.
    try {
      admit_one(p);
    } catch (const std::exception& e) {
      const bool oom = dynamic_cast<const std::bad_alloc*>(&e) != nullptr;
      sched_->cancel(SeqId{p.request_id});  // if it got that far
      live_.erase(p.request_id);
      ++stats_.num_request_faults;
      ++stats_.num_finished;
      LOG(ERROR, engine) << "request " << p.request_id << ": admission failed: " << e.what();
      p.channel->finish(FinishReason::kError, std::string("internal error: ") + e.what(),
                        oom ? ErrorKind::kOutOfMemory : ErrorKind::kInternal);
    }
  }
  for (uint64_t id : cancels_) sched_->cancel(SeqId{id});  // unknown or finished: ignored
}

void Engine::admit_one(PendingRequest& p) {
  const uint64_t id = p.request_id;
  RequestInput in{.id = SeqId{id},
                  .prompt = std::move(p.request.prompt),
                  .max_tokens = p.request.max_tokens,
                  .turn_starts = std::move(p.request.turn_starts),
                  .speculate = can_speculate(p.request),
                  .prompt_logits = p.request.prompt_logprobs >= 0};
  Status st = sched_->add_request(std::move(in));
  if (!st.ok()) {
    ++stats_.num_rejected;
    ++stats_.num_finished;
    LOG(INFO, engine) << "request " << id << " rejected: " << st.message();
    p.channel->finish(FinishReason::kError, st.message(), st.kind());
    return;
  }
  if (cfg_.admit_fault_hook) cfg_.admit_fault_hook(id, p.request.max_tokens);
  // The channel is copied, not moved: if the insert throws, admit_pending still answers it.
  live_.emplace(id, Live{.channel = p.channel,
                         .sampler = std::move(p.sampler),
                         .ignore_eos = p.request.ignore_eos,
                         .error = {},
                         .next_events = {},
                         .first_token_deadline = p.first_token_deadline,
                         .prompt_logprobs = p.request.prompt_logprobs,
                         .max_tokens = p.request.max_tokens});
  next_deadline_ = std::min(next_deadline_, p.first_token_deadline);
}

bool Engine::step() {
  const auto step_start = std::chrono::steady_clock::now();
  const uint32_t used_before = kv_->pool().num_used_blocks();
  auto t0 = step_start;
  SchedulerOutput out = sched_->schedule();
  stats_.schedule_ns += elapsed_ns(t0);
  for (const FinishedRequest& f : out.finished) emit_finished_.push_back(f);
  if (out.empty()) {
    sched_->update_from_output(out, {});
    publish_and_emit();
    return false;
  }
  build_inputs(out);
  CHECK((size_t)Model::num_logit_rows(inputs_) * model_->hparams().n_vocab <= logits_.size());
  t0 = std::chrono::steady_clock::now();
  run_forward(out);
  stats_.forward_ns += elapsed_ns(t0);

  t0 = std::chrono::steady_clock::now();
  sample_rows(out);
  run_prompt_rows();
  stats_.sample_ns += elapsed_ns(t0);
  emit_prompt_chunks();  // before this step's tokens: a request's prompt comes first

  t0 = std::chrono::steady_clock::now();
  std::vector<FinishedRequest> done = sched_->update_from_output(out, sampled_);
  stats_.schedule_ns += elapsed_ns(t0);
  queue_token_events();
  for (const SampleJob& job : sample_jobs_) job.live->next_events.clear();
  for (const FinishedRequest& f : done) emit_finished_.push_back(f);
  ++stats_.num_steps;
  stats_.last_step_seqs = (uint32_t)out.scheduled.size();
  stats_.last_step_tokens = 0;
  for (const ScheduledSeq& s : out.scheduled) stats_.last_step_tokens += (uint32_t)s.num_tokens;
  if (cfg_.check_invariants_every_step) {
    kv_->check_invariants();
    sched_->check_invariants();
  }
  if (cfg_.step_observer) observe_step(out.step, step_start, out, used_before);
  measure_rate(step_start, out.num_batched_tokens);
  publish_and_emit();
  return true;
}

void Engine::measure_rate(std::chrono::steady_clock::time_point step_start, int64_t num_tokens) {
  // Why 1 s: long enough to hold many steps (1-50 ms each), short enough to follow a change of
  // load (a batch filling up) within a second or two.
  constexpr uint64_t kWindowNs = 1'000'000'000;
  stats_.num_computed_tokens += (uint64_t)num_tokens;
  rate_window_tokens_ += num_tokens;
  rate_window_ns_ += elapsed_ns(step_start);
  const bool full = rate_window_ns_ >= kWindowNs;
  // Until the first window is full its partial figure shows, so a rate exists after one step.
  if (full || !rate_window_closed_) {
    stats_.token_rate =
        (double)rate_window_tokens_ * 1e9 / (double)std::max<uint64_t>(1, rate_window_ns_);
  }
  if (full) {
    rate_window_closed_ = true;
    rate_window_tokens_ = 0;
    rate_window_ns_ = 0;
  }
}

void Engine::expire_overdue() {
  using Clock = std::chrono::steady_clock;
  const auto now = Clock::now();
  if (now < next_deadline_) return;
  next_deadline_ = Clock::time_point::max();
  for (auto& [id, live] : live_) {
    if (live.first_token_deadline > now) {
      next_deadline_ = std::min(next_deadline_, live.first_token_deadline);
      continue;
    }
    live.first_token_deadline = Clock::time_point::max();
    // The limit is on waiting to start: a request whose prefill has begun (a long prompt on a
    // slow machine can take minutes before its first token) is working, not queued.
    if (const Request* r = sched_->find(SeqId{id});
        r != nullptr && (r->state != RequestState::kWaiting || r->num_computed_tokens > 0)) {
      continue;
    }
    // False when already cancelled (client gone, stop string): that end stands.
    if (!sched_->cancel(SeqId{id})) continue;
    live.timed_out = true;
    live.error =
        "request timed out: no token within the queue-wait limit (--max-queue-wait); "
        "the server is busy, retry later";
    live.error_kind = ErrorKind::kQueueTimeout;
    ++stats_.num_queue_timeouts;
  }
}

void Engine::observe_step(uint64_t step, std::chrono::steady_clock::time_point start,
                          const SchedulerOutput& out, uint32_t used_before) {
  StepObservation o;
  o.step = step;
  o.start_ns =
      (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch())
          .count();
  o.duration_ns = elapsed_ns(start);
  o.num_seqs = stats_.last_step_seqs;
  o.num_tokens = stats_.last_step_tokens;
  // Net change of used blocks over the step (a block freed and reused within it is not seen).
  const uint32_t used_after = kv_->pool().num_used_blocks();
  o.blocks_allocated = used_after > used_before ? used_after - used_before : 0;
  o.blocks_freed = used_before > used_after ? used_before - used_after : 0;
  o.num_used_blocks = used_after;
  o.num_used_window_slots = kv_->num_used_window_slots();  // O(blocks): observers only
  for (SeqId id : out.preempted) {
    const Request* r = sched_->find(id);
    const bool swapped = r != nullptr && r->state == RequestState::kPreemptedSwapped;
    (swapped ? o.preempted_swap : o.preempted_recompute).push_back(index_of(id));
  }
  for (SeqId id : out.swapped_in) o.swapped_in.push_back(index_of(id));
  for (const FinishedRequest& f : emit_finished_) o.finished.push_back(index_of(f.seq_id));
  cfg_.step_observer(o);
}

void Engine::publish_snapshot_if_wanted() {
  if (!snapshot_box_.wanted()) return;
  auto snap = std::make_shared<KvSnapshot>();
  snap->step = sched_->counters().num_steps;
  snap->taken_ns = (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now().time_since_epoch())
                       .count();
  snap->stats = kv_->stats();
  snap->blocks = kv_->block_map();
  snapshot_box_.publish(std::move(snap));
}

void Engine::publish_and_emit() {
  if (cfg_.kv_event_sink) {
    kv_->take_kv_events(kv_events_);
    if (!kv_events_.empty()) cfg_.kv_event_sink(std::move(kv_events_));
    kv_events_.clear();  // moved-from: valid, emptied for reuse
  }
  const SchedCounters& c = sched_->counters();
  stats_.num_preemptions = c.num_preemptions;
  stats_.num_swap_outs = c.num_swap_outs;
  stats_.num_swap_ins = c.num_swap_ins;
  stats_.num_blocks = kv_->num_blocks();
  stats_.num_allocatable_blocks = kv_->num_allocatable_blocks();
  stats_.num_kv_sequences = kv_->num_sequences();
  stats_.num_running = sched_->num_running();
  stats_.num_waiting = sched_->num_waiting();
  stats_.num_waiting_work_tokens = sched_->num_waiting_work_tokens();
  stats_.num_preemptions_swap = c.num_swap_outs;
  stats_.num_preemptions_recompute = c.num_recomputes;
  stats_.forward_tokens_finished = c.forward_tokens_finished;
  stats_.num_recomputed_tokens = c.num_recomputed_tokens;
  stats_.num_alloc_failures = c.num_alloc_failures;
  stats_.num_admission_deferrals = c.num_admission_deferrals;
  stats_.num_window_freed_blocks = kv_->num_window_freed_blocks();
  if (const SwapSpace* swap = kv_->swap_space(); swap != nullptr) {
    stats_.swap_out_bytes = swap->counters().bytes_out;
    stats_.swap_in_bytes = swap->counters().bytes_in;
  }
  stats_.num_swapped = sched_->num_swapped();
  stats_.spec = c.spec;
  stats_.prefix = kv_->prefix_counters();
  // KvManager::stats() walks every block: at most every 100 ms, so it costs nothing per step.
  const auto now = std::chrono::steady_clock::now();
  if (now - kv_stats_time_ >= std::chrono::milliseconds(cfg_.kv_stats_interval_ms)) {
    stats_.kv = kv_->stats();
    // Free blocks scattered between used ones: gather them with a bounded number of moves
    // between steps (defragment() itself waits while swap-ins have blocks in flight).
    if (cfg_.defrag_threshold > 0 && stats_.kv.fragmentation() > cfg_.defrag_threshold) {
      const uint32_t moved = kv_->defragment(cfg_.defrag_max_moves);
      stats_.num_defrag_moves += moved;
      if (moved > 0) stats_.kv = kv_->stats();
    }
    kv_stats_time_ = now;
  }
  for (const auto& [id, ev] : emit_tokens_) {
    stats_.num_generated_tokens += ev.kind == ChannelEvent::Kind::kToken ? 1 : 0;
  }
  stats_.num_finished += emit_finished_.size();
  stats_box_.publish(stats_);
  // After publishing: a client that sees its request end also sees the freed blocks.
  for (auto& [id, ev] : emit_tokens_) {
    Live& live = live_.at(id);
    if (live.emit_failed) continue;
    try {
      if (ev.kind == ChannelEvent::Kind::kPromptLogprobs) {
        live.channel->push_prompt_logprobs(std::move(ev));
      } else {
        live.channel->push_token(std::move(ev));
      }
    } catch (const std::exception& e) {
      fail_emission(id, live, e);
    }
  }
  emit_tokens_.clear();
  for (const FinishedRequest& f : emit_finished_) {
    finish_live(index_of(f.seq_id), f.reason, {});
  }
  emit_finished_.clear();
}

void Engine::finish_live(uint64_t id, FinishReason reason, const std::string& error,
                         ErrorKind kind) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  // The scheduler ended it as cancelled; the client learns it timed out.
  if (it->second.timed_out || it->second.emit_failed) reason = FinishReason::kError;
  // Cancelled by the engine itself (a non-finite prompt logit row): the error stands.
  if (reason == FinishReason::kCancelled && !it->second.error.empty())
    reason = FinishReason::kError;
  std::string msg = !error.empty() ? error : it->second.error;
  if (error.empty() && !it->second.error.empty()) kind = it->second.error_kind;
  if (reason == FinishReason::kError && msg.empty()) msg = "request failed";
  it->second.channel->finish(reason, std::move(msg), kind);
  live_.erase(it);
}

void Engine::drain_at_shutdown() {
  // Submissions that raced with close(): refuse them.
  admit_pending();
  // Cancel everything live so the KvManager ends with every block free, then fail the channels.
  for (const auto& [id, live] : live_) sched_->cancel(SeqId{id});
  SchedulerOutput out = sched_->schedule();
  CHECK(out.empty()) << "every request was cancelled, yet " << out.scheduled.size()
                     << " were scheduled";
  sched_->update_from_output(out, {});
  std::vector<uint64_t> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  for (uint64_t id : ids) {
    finish_live(id, FinishReason::kError, "engine shut down", ErrorKind::kUnavailable);
  }
  emit_tokens_.clear();
  emit_finished_.clear();
  publish_and_emit();
}

}  // namespace kvw
