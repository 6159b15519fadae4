// The step loop of the Scheduler: running requests (decodes, then prefill chunks), preemption,
// output, and the update after sampling. Admission of waiting requests is in scheduler_admit.cc.
#include "sched/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace kvw {

Scheduler::Scheduler(const SchedConfig& cfg, KvManager* kv) : cfg_(cfg), kv_(kv) {
  const Status st = cfg.validate();
  CHECK(st.ok()) << st.message();
  CHECK(kv != nullptr);
  // Admissions keep both watermarks free, so a first chunk can use at most the rest of the pool.
  const int64_t spare = int64_t(kv->config().watermark_blocks) + cfg.watermark_blocks;
  CHECK(spare < int64_t(kv->num_blocks()))
      << "watermarks (" << spare << " blocks) leave nothing of the KV pool (" << kv->num_blocks()
      << " blocks) to admit into";
  admit_limit_blocks_ = int64_t(kv->num_blocks()) - spare;
  // One request alone may use the whole pool (running sequences ignore the watermark), so the
  // context limit is what the pool can hold. Under a sliding window a sequence holds at most
  // max_window_blocks() while it decodes and its prefill chunks are cut to fit the pool, so its
  // length is free of the pool once that many blocks can be admitted.
  const int64_t pool_tokens = int64_t(kv->num_blocks()) * kv->block_size();
  window_blocks_ = kv->max_window_blocks();
  const bool window_fits = window_blocks_ > 0 && window_blocks_ <= admit_limit_blocks_;
  max_len_ = window_fits ? cfg.max_model_len : std::min(cfg.max_model_len, pool_tokens);
  running_.reserve(size_t(cfg.max_num_seqs));
}

int64_t Scheduler::blocks_for(int64_t tokens) const {
  const int64_t bs = kv_->block_size();
  return (tokens + bs - 1) / bs;
}

int64_t Scheduler::blocks_held(int64_t tokens) const {
  const int64_t b = blocks_for(tokens);
  return window_blocks_ > 0 ? std::min(b, window_blocks_) : b;
}

int64_t Scheduler::max_new_tokens(int64_t num_computed, int64_t limit_blocks) const {
  // Blocks before first_live_block are holes: the limit counts from there.
  return (kv_->first_live_block(num_computed) + limit_blocks) * kv_->block_size() - num_computed;
}

const Request* Scheduler::find(SeqId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

bool Scheduler::cancel(SeqId id) {
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second->cancel_requested) return false;
  it->second->cancel_requested = true;
  cancelled_.push_back(id);
  return true;
}

SchedulerOutput Scheduler::schedule() {
  CHECK(!awaiting_update_) << "schedule() before update_from_output() of step " << step_;
  SchedulerOutput out;
  out.step = ++step_;
  ++counters_.num_steps;
  kv_->advance_step();
  kv_->poll_swap();
  budget_ = cfg_.max_num_batched_tokens;
  prompt_rows_left_ = cfg_.max_prompt_logit_rows;
  preempted_this_step_ = false;
  scheduled_index_.clear();

  apply_cancellations(out);
  schedule_running(out);
  // After the running requests' room is settled (as an admission would be), so a read-back that
  // landed is never the victim of this step's growth; its blocks were reserved all along.
  complete_swap_ins(out);
  // After every decode and prefill chunk of a running request has its room: drafts take only
  // budget and free blocks nobody scheduled needs.
  schedule_drafts(out);
  schedule_waiting(out);
  schedule_draft_catch_up(out);  // a draft model computes the admissions' first chunks too
  build_output(out);
  awaiting_update_ = !out.scheduled.empty();
  return out;
}

void Scheduler::apply_cancellations(SchedulerOutput& out) {
  for (SeqId id : cancelled_) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;  // finished before the cancel took effect
    Request* r = it->second.get();
    if (r->state == RequestState::kRunning) {
      remove_running(r);
    } else if (r->state == RequestState::kSwappingIn) {
      std::erase(swapping_in_, r);
    } else {
      waiting_.erase(wait_key(r));
    }
    finish(r, FinishReason::kCancelled);
    out.finished.push_back({id, FinishReason::kCancelled});
    requests_.erase(it);
  }
  cancelled_.clear();
}

void Scheduler::complete_swap_ins(SchedulerOutput& out) {
  // Landed read-backs join running_ and decode in this very step.
  if (swapping_in_.empty()) return;
  std::erase_if(swapping_in_, [&](Request* r) {
    const SwapInStatus st = kv_->poll_swap_in(r->id, /*reserve_next_token=*/true);
    if (st == SwapInStatus::kPending) return false;
    CHECK(st != SwapInStatus::kNoFreeBlocks) << "swap-in lost its reserved blocks";
    if (st == SwapInStatus::kLost) {
      requeue_lost_swap(r);
      return true;
    }
    CHECK(kv_->num_computed_tokens(r->id) == r->num_computed_tokens)
        << "swap_in of " << index_of(r->id) << " restored " << kv_->num_computed_tokens(r->id)
        << " tokens, expected " << r->num_computed_tokens;
    // Its place is its admission (it may be the oldest, which is never a victim), not the
    // moment the disk answered.
    r->state = RequestState::kRunning;
    running_.insert(std::upper_bound(running_.begin(), running_.end(), r,
                                     [](const Request* a, const Request* b) {
                                       return a->admission_order < b->admission_order;
                                     }),
                    r);
    ++counters_.num_swap_ins;
    out.swapped_in.push_back(r->id);
    // Its next token's room was reserved with the read-back; claim it before anyone else runs.
    const int64_t n = chunk_tokens(r);
    if (n > 0 && kv_->allocate_slots(r->id, n) == AllocStatus::kOk) push_scheduled(r, n, out);
    return true;
  });
}

void Scheduler::schedule_running(SchedulerOutput& out) {
  // Each pass walks a snapshot: preemption may remove any request but the oldest from
  // running_; a preempted one is skipped by its state.
  pass_.assign(running_.begin(), running_.end());
  // Pass 1: decodes (1 token each), oldest first.
  for (Request* r : pass_) {
    if (budget_ <= 0) break;
    if (r->state != RequestState::kRunning || r->num_tokens_to_compute() != 1) continue;
    schedule_one_running(r, 1, out);
  }
  // Pass 2: the next chunk of each running prefill (or recompute), oldest first.
  pass_.assign(running_.begin(), running_.end());
  for (Request* r : pass_) {
    if (budget_ <= 0) break;
    if (r->state != RequestState::kRunning || r->num_tokens_to_compute() <= 1) continue;
    const int64_t n = chunk_tokens(r);
    if (n > 0) schedule_one_running(r, n, out);  // 0: this step's prompt logit rows are spent
  }
}

void Scheduler::schedule_one_running(Request* r, int64_t num_new, SchedulerOutput& out) {
  if (!preempt_until_fits(r, num_new, out)) return;  // r itself was preempted
  CHECK(kv_->allocate_slots(r->id, num_new) == AllocStatus::kOk);
  push_scheduled(r, num_new, out);
}

size_t Scheduler::num_swapped() const {
  size_t n = 0;
  for (const WaitKey& k : waiting_) {
    n += requests_.at(k.id)->state == RequestState::kPreemptedSwapped ? 1 : 0;
  }
  return n + swapping_in_.size();
}

bool Scheduler::preempt_until_fits(Request* r, int64_t num_new, SchedulerOutput& out) {
  // allocate_slots already evicts unreferenced cached prefixes; can_allocate counts them.
  if (!kv_->can_allocate(r->id, num_new)) ++counters_.num_alloc_failures;
  while (!kv_->can_allocate(r->id, num_new)) {
    // A read-back in flight is the cheapest room: its reads are dropped, its data stays in the
    // tier, and it waits again. Running requests are preempted only when none is left.
    if (!swapping_in_.empty()) {
      Request* back = swapping_in_.back();
      swapping_in_.pop_back();
      kv_->cancel_swap_in(back->id);
      back->state = RequestState::kPreemptedSwapped;
      ++counters_.num_swap_in_aborts;
      enqueue_waiting(back);
      continue;
    }
    Request* victim = pick_victim(r);
    preempt(victim, out);
    if (victim == r) return false;
  }
  return true;
}

Request* Scheduler::pick_victim(Request* r) const {
  // The oldest running request is never a victim for another, so it always progresses and
  // nothing starves. Otherwise the newest request that is not protected (preempted fewer than
  // protect_after_preemptions times), which may be r itself: often-preempted requests are not
  // swapped back and forth (thrashing). If all are protected, the newest other than the oldest.
  const Request* oldest = running_.front();
  Request* newest = nullptr;
  for (auto it = running_.rbegin(); it != running_.rend() && *it != oldest; ++it) {
    if (newest == nullptr) newest = *it;
    if ((*it)->num_preemptions < cfg_.protect_after_preemptions) return *it;
  }
  return newest != nullptr ? newest : r;
}

void Scheduler::preempt(Request* victim, SchedulerOutput& out) {
  if (auto it = scheduled_index_.find(victim->id); it != scheduled_index_.end()) {
    // Already planned this step (a decode, when a prefill needs room): unplan it.
    ScheduledSeq& s = out.scheduled[it->second];
    budget_ += s.num_tokens;
    s.num_tokens = 0;
    scheduled_index_.erase(it);
  }
  remove_running(victim);
  ++victim->num_preemptions;
  if (proposer_ != nullptr) proposer_->release(victim->id);
  const bool swapped = cfg_.preemption_mode == PreemptionMode::kSwap && kv_->has_swap() &&
                       kv_->swap_out(victim->id, victim->tokens());
  if (swapped) {
    victim->state = RequestState::kPreemptedSwapped;
    ++counters_.num_swap_outs;
  } else {
    // Recompute: the computed blocks that were hashed stay cached and may be revived.
    kv_->free_sequence(victim->id);
    victim->num_computed_tokens = 0;
    victim->state = RequestState::kPreemptedRecompute;
    ++counters_.num_recomputes;
  }
  ++counters_.num_preemptions;
  preempted_this_step_ = true;
  out.preempted.push_back(victim->id);
  enqueue_waiting(victim);
}

void Scheduler::push_scheduled(Request* r, int64_t num_new, SchedulerOutput& out) {
  CHECK(num_new > 0 && num_new <= budget_);
  ScheduledSeq s{.seq_id = r->id, .start_pos = r->num_computed_tokens, .num_tokens = num_new};
  s.needs_logits = s.start_pos + num_new == r->num_tokens();
  s.is_prefill = !(num_new == 1 && s.needs_logits && s.start_pos >= r->num_prompt_tokens);
  if (r->owes_prompt_logits()) {
    CHECK(num_new <= prompt_rows_left_) << "prompt logit rows over the step's limit";
    s.prompt_logits = true;
    prompt_rows_left_ -= num_new;
  }
  scheduled_index_[r->id] = out.scheduled.size();
  out.scheduled.push_back(s);
  budget_ -= num_new;
}

int64_t Scheduler::chunk_tokens(const Request* r) const {
  int64_t n = std::min(r->num_tokens_to_compute(), budget_);
  if (cfg_.long_prefill_chunk_tokens > 0) n = std::min(n, cfg_.long_prefill_chunk_tokens);
  if (r->owes_prompt_logits()) n = std::min(n, prompt_rows_left_);
  // Windowed: a prompt longer than the pool advances in chunks that fit it (the chunk's
  // positions plus the w - 1 before it). Without a window the whole sequence fits (max_len_).
  if (window_blocks_ > 0) {
    n = std::min(n, max_new_tokens(r->num_computed_tokens, int64_t(kv_->num_blocks())));
  }
  return std::max<int64_t>(n, 0);
}

void Scheduler::build_output(SchedulerOutput& out) {
  // Drop entries unplanned by preemption; swapped-in decodes join the decodes at the front.
  std::erase_if(out.scheduled, [](const ScheduledSeq& s) { return s.num_tokens == 0; });
  std::stable_partition(out.scheduled.begin(), out.scheduled.end(),
                        [](const ScheduledSeq& s) { return !s.is_prefill; });
  out.num_batched_tokens = 0;
  for (const ScheduledSeq& s : out.scheduled) out.num_batched_tokens += s.num_tokens;
  CHECK(out.num_batched_tokens <= cfg_.max_num_batched_tokens);
}

std::vector<FinishedRequest> Scheduler::update_from_output(const SchedulerOutput& out,
                                                           std::span<const SampledToken> sampled) {
  CHECK(out.step == step_) << "update for step " << out.step << ", current " << step_;
  CHECK(awaiting_update_ || out.scheduled.empty());
  awaiting_update_ = false;
  std::vector<FinishedRequest> done;
  size_t next_sample = 0;
  for (const ScheduledSeq& s : out.scheduled) {
    auto it = requests_.find(s.seq_id);
    CHECK(it != requests_.end()) << "scheduled sequence " << index_of(s.seq_id) << " unknown";
    Request* r = it->second.get();
    CHECK(r->state == RequestState::kRunning && r->num_computed_tokens == s.start_pos);
    count_forward(r, s);
    if (s.prompt_logits) {
      r->prompt_logits_done = std::max(r->prompt_logits_done, s.start_pos + s.num_tokens);
    }
    // This sequence's sampled tokens: one, or 1..k+1 for a speculative decode.
    // A sequence without logits has none, unless its forward failed (one discard_kv error).
    size_t n = 0;
    while (next_sample + n < sampled.size() && sampled[next_sample + n].seq_id == s.seq_id &&
           n < size_t(s.num_draft_tokens) + 1) {
      ++n;
    }
    CHECK(n >= 1 || !s.needs_logits) << "missing sampled token for " << index_of(s.seq_id);
    const FinishReason reason = apply_sampled(r, s, sampled.subspan(next_sample, n));
    // Rejected drafts leave positions uncomputed: only what was kept counts as computed.
    r->max_computed_tokens = std::max(r->max_computed_tokens, r->num_computed_tokens);
    next_sample += n;
    if (reason == FinishReason::kNone) continue;
    remove_running(r);
    finish(r, reason);
    done.push_back({s.seq_id, reason});
    requests_.erase(it);
  }
  CHECK(next_sample == sampled.size()) << "more sampled tokens than logits requested";
  return done;
}

void Scheduler::finish(Request* r, FinishReason reason) {
  if (proposer_ != nullptr) proposer_->release(r->id);
  if (kv_->has_sequence(r->id) || kv_->is_swapped(r->id)) kv_->free_sequence(r->id);
  // Lengths of requests that ran to their natural end feed the p95 reservation.
  if (reason == FinishReason::kStop || reason == FinishReason::kLength) {
    lengths_.observe(r->num_tokens());
    output_lengths_.observe(r->num_output_tokens());
  }
  r->state = RequestState::kFinished;
  r->finish_reason = reason;
  ++counters_.num_finished[static_cast<size_t>(reason)];
  counters_.forward_tokens_finished[static_cast<size_t>(reason)] += (uint64_t)r->num_forward_tokens;
}

void Scheduler::count_forward(Request* r, const ScheduledSeq& s) {
  r->num_forward_tokens += s.num_tokens;
  counters_.num_recomputed_tokens +=
      (uint64_t)std::clamp<int64_t>(r->max_computed_tokens - s.start_pos, 0, s.num_tokens);
}

void Scheduler::remove_running(Request* r) {
  auto it = std::find(running_.begin(), running_.end(), r);
  CHECK(it != running_.end()) << "request " << index_of(r->id) << " not running";
  running_.erase(it);
}

void Scheduler::check_invariants() const {
  CHECK(running_.size() + waiting_.size() + swapping_in_.size() == requests_.size())
      << running_.size() << " running + " << waiting_.size() << " waiting + " << swapping_in_.size()
      << " swapping in != " << requests_.size() << " live";
  CHECK(running_.size() + swapping_in_.size() <= size_t(cfg_.max_num_seqs));
  for (const Request* r : swapping_in_) {
    CHECK(r->state == RequestState::kSwappingIn) << to_string(r->state);
    CHECK(kv_->is_swapping_in(r->id)) << "request " << index_of(r->id);
  }
  for (size_t i = 0; i < running_.size(); ++i) {
    const Request* r = running_[i];
    CHECK(r->state == RequestState::kRunning) << to_string(r->state);
    CHECK(i == 0 || running_[i - 1]->admission_order < r->admission_order);
    CHECK(kv_->has_sequence(r->id)) << "running " << index_of(r->id) << " not resident";
    CHECK(kv_->num_computed_tokens(r->id) == r->num_computed_tokens);
    CHECK(r->num_tokens() <= max_len_);
  }
  for (const WaitKey& k : waiting_) {
    const Request* r = requests_.at(k.id).get();
    CHECK(k == wait_key(r));
    const bool swapped = r->state == RequestState::kPreemptedSwapped;
    CHECK(swapped || r->state == RequestState::kWaiting ||
          r->state == RequestState::kPreemptedRecompute);
    CHECK(!kv_->has_sequence(r->id));
    CHECK(kv_->is_swapped(r->id) == swapped) << "request " << index_of(r->id);
  }
  CHECK(kv_->num_sequences() == running_.size());
}

}  // namespace kvw
