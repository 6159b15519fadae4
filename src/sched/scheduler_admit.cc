// The Scheduler's admission side: add_request (with context-overflow handling), the waiting
// queue, admissions (new, recompute, swap-in) and the --kv-reserve p95 reservation.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/check.h"
#include "sched/scheduler.h"

namespace kvw {

Status Scheduler::add_request(RequestInput input) {
  const std::string who = "request " + std::to_string(index_of(input.id)) + ": ";
  auto reject = [&](std::string msg, ErrorKind kind = ErrorKind::kInvalidInput) -> Status {
    ++counters_.num_rejected;
    return Error{who + msg, kind};
  };
  if (requests_.contains(input.id)) return reject("id already in use");
  if (input.prompt.empty()) return reject("empty prompt");
  if (input.max_tokens < 1) return reject("max_tokens must be >= 1");
  auto r = std::make_unique<Request>();
  // The prompt must leave room for at least one output token. One that does is kept as given
  // (shared with the request's other choices); one that does not is refused or shortened.
  if (static_cast<int64_t>(input.prompt.size()) <= max_len_ - 1) {
    r->prompt_ids = std::move(input.prompt);
    r->turn_starts = std::move(input.turn_starts);
  } else {
    Result<FittedPrompt> fitted = fit_or_reuse(input, r->prompt_ids, r->turn_starts);
    if (!fitted.ok()) return reject(fitted.message(), fitted.kind());
    r->num_dropped_prompt_tokens = fitted->num_dropped_tokens;
  }
  r->id = input.id;
  r->num_prompt_tokens = static_cast<int64_t>(r->prompt_ids.size());
  r->max_tokens = input.max_tokens;
  r->speculate = input.speculate && cfg_.spec.enabled;
  r->prompt_logits = input.prompt_logits;
  r->num_spec_tokens = cfg_.spec.num_speculative_tokens;  // start long; shrinks on rejection
  if (kv_->config().enable_prefix_caching) share_or_hash_prompt(*r);
  r->arrival_order = next_arrival_++;
  r->state = RequestState::kWaiting;
  if (r->num_dropped_prompt_tokens > 0) ++counters_.num_truncated;
  Request* raw = r.get();
  requests_.emplace(input.id, std::move(r));
  enqueue_waiting(raw);
  return Status::ok_status();
}

Result<FittedPrompt> Scheduler::fit_or_reuse(const RequestInput& input, TokenList& fitted,
                                             TurnStarts& turns) {
  auto in = last_fit_input_.lock();
  auto out = last_fit_output_.lock();
  auto out_turns = last_fit_turns_.lock();
  if (out != nullptr && input.prompt.is(in) &&
      std::ranges::equal(input.turn_starts, last_fit_turn_starts_) &&
      (out_turns != nullptr || last_fit_.turn_starts.empty())) {
    fitted = TokenList(std::move(out));
    turns = TurnStarts(std::move(out_turns));
    return FittedPrompt{
        .tokens = {}, .turn_starts = {}, .num_dropped_tokens = last_fit_.num_dropped_tokens};
  }
  Result<FittedPrompt> f =
      fit_prompt(input.prompt, input.turn_starts, max_len_ - 1, max_len_, cfg_.overflow);
  if (!f.ok()) return f;
  fitted = TokenList(std::move(f->tokens));
  f->tokens = {};
  turns = TurnStarts(f->turn_starts);
  last_fit_input_ = input.prompt.weak();
  last_fit_output_ = fitted.weak();
  last_fit_turns_ = turns.weak();
  last_fit_turn_starts_ = input.turn_starts.to_vector();
  last_fit_ = FittedPrompt{
      .tokens = {}, .turn_starts = f->turn_starts, .num_dropped_tokens = f->num_dropped_tokens};
  return f;
}

void Scheduler::share_or_hash_prompt(Request& r) {
  auto hashes = last_prompt_hashes_.lock();
  if (hashes == nullptr || last_hashed_prompt_ != r.prompt_ids.data()) {
    auto fresh = std::make_shared<std::vector<uint64_t>>();
    hash_full_blocks(r.prompt(), kv_->block_size(), 0, kPrefixHashSeed, *fresh);
    hashes = std::move(fresh);
    last_hashed_prompt_ = r.prompt_ids.data();
    last_prompt_hashes_ = hashes;
  }
  r.shared_prompt_hashes = std::move(hashes);
}

Scheduler::WaitKey Scheduler::wait_key(const Request* r) const {
  // Preempted requests were admitted before anything still waiting; the more often a request
  // was preempted, the earlier it comes back (limits thrashing, nothing starves).
  return WaitKey{-r->num_preemptions, r->arrival_order, r->id};
}

void Scheduler::enqueue_waiting(Request* r) {
  const bool inserted = waiting_.insert(wait_key(r)).second;
  CHECK(inserted) << "request " << index_of(r->id) << " already waiting";
}

int64_t Scheduler::num_waiting_work_tokens() const {
  const bool measured = output_lengths_.num_samples() >= size_t(cfg_.kv_reserve_min_samples);
  const int64_t typical_output = measured ? output_lengths_.p95() : INT64_MAX;
  int64_t total = 0;
  for (const WaitKey& k : waiting_) {
    const Request& r = *requests_.at(k.id);
    int64_t decode = std::min<int64_t>(r.max_tokens, max_len_ - r.num_prompt_tokens);
    decode = std::min(decode, std::max<int64_t>(typical_output, 1)) - r.num_output_tokens();
    total += r.num_tokens_to_compute() + std::max<int64_t>(decode, 0);
  }
  return total;
}

void Scheduler::schedule_waiting(SchedulerOutput& out) {
  // A step that had to preempt is short of blocks: admitting now would preempt again.
  if (preempted_this_step_) return;
  int64_t running_reserve = running_reserve_blocks();
  auto next = waiting_.begin();
  while (next != waiting_.end() && budget_ > 0 &&
         running_.size() + swapping_in_.size() < size_t(cfg_.max_num_seqs)) {
    Request* r = requests_.at(next->id).get();
    ++next;  // admit() erases r's entry only
    // Not a starvation risk: the sibling runs, and r comes first once it is done.
    if (sibling_is_prefilling(r)) continue;
    // FCFS: when the head does not fit, nothing behind it jumps the queue (no starvation of
    // long prompts).
    if (!admit(r, running_reserve, out)) {
      ++counters_.num_admission_deferrals;
      break;
    }
    const int64_t resident =
        r->state == RequestState::kSwappingIn ? r->num_computed_tokens + 1 : kv_->num_tokens(r->id);
    running_reserve += reserve_blocks_for(r, resident);
  }
}

bool Scheduler::sibling_is_prefilling(const Request* r) const {
  if (!kv_->config().enable_prefix_caching || r->prompt_logits ||
      r->num_prompt_tokens < kv_->block_size()) {
    return false;
  }
  return std::ranges::any_of(running_, [&](const Request* s) {
    return s->prompt_ids.shares_with(r->prompt_ids) &&
           s->num_computed_tokens < s->num_prompt_tokens;
  });
}

bool Scheduler::admit(Request* r, int64_t running_reserve, SchedulerOutput& out) {
  if (r->state == RequestState::kPreemptedSwapped) {
    const SwapInStatus st = admit_swapped(r, running_reserve);
    if (st != SwapInStatus::kLost) return st == SwapInStatus::kPending;
    // The tier lost its data: fall through and recompute it now.
  }
  const int64_t bs = kv_->block_size();
  const int64_t cached = kv_->num_cached_prefix_tokens(r->cacheable_prompt(), r->prompt_hashes());
  int64_t n = std::min(r->num_tokens() - cached, budget_);
  if (cfg_.long_prefill_chunk_tokens > 0) n = std::min(n, cfg_.long_prefill_chunk_tokens);
  if (r->prompt_logits && r->prompt_logits_done + 1 < r->num_prompt_tokens &&
      cached + 1 < r->num_prompt_tokens) {
    n = std::min(n, prompt_rows_left_);
  }
  // Into an empty pool this always fits, so the head of the queue cannot wait forever.
  n = std::min(n, max_new_tokens(cached, admit_limit_blocks_));
  if (n <= 0) return false;
  // Blocks needed now, plus the spare ones: the scheduler's watermark and, with p95, the
  // expected growth of every running request and of this one.
  const int64_t extra =
      int64_t(cfg_.watermark_blocks) +
      (running_.empty() ? 0 : running_reserve + reserve_blocks_for(r, cached + n));
  if (!kv_->can_admit(r->cacheable_prompt(), (blocks_for(cached + n) + extra) * bs,
                      r->prompt_hashes())) {
    return false;
  }

  waiting_.erase(wait_key(r));
  r->num_computed_tokens = kv_->add_sequence(r->id, r->cacheable_prompt(), r->prompt_hashes());
  // The swap tier may have revived more of the prefix.
  n = std::min(chunk_tokens(r),
               std::max<int64_t>(1, max_new_tokens(r->num_computed_tokens, admit_limit_blocks_)));
  if (kv_->allocate_slots(r->id, n) != AllocStatus::kOk) {
    kv_->free_sequence(r->id);
    r->num_computed_tokens = 0;
    enqueue_waiting(r);
    return false;
  }
  r->state = RequestState::kRunning;
  r->admission_order = next_admission_++;
  running_.push_back(r);
  ++counters_.num_admitted;
  push_scheduled(r, n, out);
  return true;
}

void Scheduler::requeue_lost_swap(Request* r) {
  // A disk error lost its swapped KV: it waits again, to be recomputed from scratch.
  ++counters_.num_swap_lost;
  r->num_computed_tokens = 0;
  r->state = RequestState::kPreemptedRecompute;
  enqueue_waiting(r);
}

SwapInStatus Scheduler::admit_swapped(Request* r, int64_t running_reserve) {
  // Its blocks come back whole (window holes stay holes), plus room for the next token, above
  // both watermarks.
  const int64_t need =
      blocks_for(r->num_computed_tokens + 1) - kv_->first_live_block(r->num_computed_tokens) +
      kv_->config().watermark_blocks + cfg_.watermark_blocks +
      (running_.empty() ? 0 : running_reserve + reserve_blocks_for(r, r->num_computed_tokens + 1));
  if (int64_t(kv_->num_allocatable_blocks()) < need) return SwapInStatus::kNoFreeBlocks;
  // Only starts the read-back (blocks reserved, reads submitted); complete_swap_ins() of a later
  // step makes it running, so this step's other sequences are not held up by the disk.
  const SwapInStatus st = kv_->poll_swap_in(r->id, /*reserve_next_token=*/true);
  if (st == SwapInStatus::kNoFreeBlocks) return st;
  waiting_.erase(wait_key(r));
  if (st == SwapInStatus::kLost) {
    requeue_lost_swap(r);
    return st;
  }
  CHECK(st == SwapInStatus::kPending) << "a read-back cannot land before it is polled";
  r->state = RequestState::kSwappingIn;
  r->admission_order = next_admission_++;
  swapping_in_.push_back(r);
  ++counters_.num_admitted;
  return st;
}

int64_t Scheduler::reserve_tokens() const {
  if (cfg_.kv_reserve == KvReservePolicy::kNone ||
      lengths_.num_samples() < size_t(cfg_.kv_reserve_min_samples)) {
    return 0;
  }
  return int64_t(std::ceil(double(lengths_.p95()) * (1.0 + cfg_.kv_reserve_margin)));
}

int64_t Scheduler::expected_total_tokens(const Request* r) const {
  const int64_t cap = std::min<int64_t>(max_len_, r->num_prompt_tokens + r->max_tokens);
  return std::max(r->num_tokens(), std::min(cap, reserve_tokens()));
}

int64_t Scheduler::expected_output_left(const Request* r) const {
  // Only once outputs were measured: before that, max_tokens (a chat request's default is the
  // rest of the context) would reserve far more than most requests use.
  if (output_lengths_.num_samples() < size_t(cfg_.kv_reserve_min_samples)) return 0;
  const int64_t typical = std::min<int64_t>(r->max_tokens, output_lengths_.p95());
  return std::clamp<int64_t>(typical - r->num_output_tokens(), 0, max_len_ - r->num_tokens());
}

int64_t Scheduler::reserve_blocks_for(const Request* r, int64_t resident_tokens) const {
  // Every known token (the rest of a prompt being prefilled in chunks, or of a recompute) will
  // need its slot, plus the output such requests typically produce: admitting only the first
  // chunk let long prompts grow into each other and preempt (and recompute) one another.
  int64_t total = r->num_tokens() + expected_output_left(r);
  if (r->num_preemptions >= cfg_.protect_after_preemptions) {
    // Limits thrashing: an often-preempted request comes back only with room to finish.
    total = std::min<int64_t>(max_len_, r->num_prompt_tokens + r->max_tokens);
  } else if (reserve_tokens() > 0) {
    total = std::max(total, expected_total_tokens(r));
  }
  // Windowed: finishing never takes more than the window's blocks, however long the request.
  return std::max<int64_t>(0, blocks_held(total) - blocks_held(resident_tokens));
}

int64_t Scheduler::running_reserve_blocks() const {
  int64_t sum = 0;
  for (const Request* r : running_) sum += reserve_blocks_for(r, kv_->num_tokens(r->id));
  for (const Request* r : swapping_in_) sum += reserve_blocks_for(r, r->num_computed_tokens + 1);
  return sum;
}

}  // namespace kvw
