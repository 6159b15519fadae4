// Speculative decoding in the Scheduler: prompt-lookup drafts on this step's decodes, and the
// update that keeps what the target accepted and rolls back the rest. Drafts live only between
// schedule() and update_from_output(): a preempted or cancelled request never holds any.
#include <algorithm>

#include "core/check.h"
#include "sched/ngram_proposer.h"
#include "sched/scheduler.h"

namespace kvw {

int32_t Scheduler::draft_length_cap(const Request* r) const {
  // The step may append up to k + 1 tokens; all of them must fit under max_tokens and the
  // context limit, so that length ends a request only on its last token, as without drafts.
  int64_t k = std::min<int64_t>(r->num_spec_tokens, budget_);
  k = std::min<int64_t>(k, int64_t(r->max_tokens) - r->num_output_tokens() - 1);
  k = std::min<int64_t>(k, max_len_ - r->num_tokens() - 1);
  return static_cast<int32_t>(std::max<int64_t>(k, 0));
}

void Scheduler::schedule_drafts(SchedulerOutput& out) {
  // Sliding-window models do not speculate (the window's block release is not verified with
  // rolled-back slots yet).
  if (!cfg_.spec.enabled || window_blocks_ > 0) return;
  if (proposer_ != nullptr) return schedule_model_drafts(out, 0);
  int32_t num_seqs = 0;
  for (ScheduledSeq& s : out.scheduled) {
    if (num_seqs >= cfg_.spec.max_seqs || budget_ <= 0) break;
    Request* r = draft_candidate(s);
    if (r == nullptr) continue;
    const int32_t cap = draft_length_cap(r);
    if (cap <= 0) continue;
    const int32_t k = propose_ngram_draft(r->tokens(), cfg_.spec.prompt_lookup_min,
                                          cfg_.spec.prompt_lookup_max, cap, &draft_);
    if (attach_draft(r, s, std::span<const int32_t>(draft_).first(size_t(k)))) ++num_seqs;
  }
}

Request* Scheduler::draft_candidate(const ScheduledSeq& s) {
  // A plain decode (entries unplanned by preemption have num_tokens 0).
  if (s.is_prefill || s.num_tokens != 1 || !s.needs_logits) return nullptr;
  Request* r = requests_.at(s.seq_id).get();
  return r->speculate ? r : nullptr;
}

bool Scheduler::attach_draft(Request* r, ScheduledSeq& s, std::span<const int32_t> draft) {
  int64_t k = static_cast<int64_t>(draft.size());
  // Free blocks only: a draft never evicts a cached prefix nor preempts anyone.
  // (and, for hybrid window models, while window slots allow: can_allocate checks those).
  while (k > 0 && (kv_->num_blocks_needed(r->id, k) > kv_->pool().num_free_blocks() ||
                   !kv_->can_allocate(r->id, k)))
    --k;
  if (k == 0) return false;
  CHECK(kv_->allocate_slots(r->id, k) == AllocStatus::kOk);
  r->draft_ids.assign(draft.begin(), draft.begin() + k);
  s.num_tokens += k;
  s.num_draft_tokens = static_cast<int32_t>(k);
  budget_ -= k;
  return true;
}

void Scheduler::schedule_draft_catch_up(SchedulerOutput& out) {
  // The first chunks of this step's admissions (schedule_drafts ran before them).
  if (proposer_ != nullptr && cfg_.spec.enabled && window_blocks_ == 0) {
    schedule_model_drafts(out, num_scheduled_before_admit_);
  }
}

void Scheduler::schedule_model_drafts(SchedulerOutput& out, size_t first) {
  // Gather the sequences first so the draft model runs once per drafted position for all.
  // Decodes come first in out.scheduled; then prefill chunks, which the draft model computes
  // beside the target (max_draft 0) so that the first decode finds it caught up.
  num_scheduled_before_admit_ = out.scheduled.size();
  draft_slots_.clear();
  draft_slot_index_.clear();
  int64_t budget = budget_;
  const auto k_max = static_cast<size_t>(cfg_.spec.num_speculative_tokens);
  for (size_t i = first; i < out.scheduled.size(); ++i) {
    if (draft_slots_.size() >= size_t(cfg_.spec.max_seqs)) break;
    const ScheduledSeq& s = out.scheduled[i];
    int32_t cap = 0;
    TokenSpan tokens;
    if (Request* r = draft_candidate(s); r != nullptr) {
      cap = static_cast<int32_t>(std::min<int64_t>(draft_length_cap(r), budget));
      if (cap <= 0) continue;
      budget -= cap;
      tokens = r->tokens();
    } else if (s.is_prefill && s.num_tokens > 0 && requests_.at(s.seq_id)->speculate) {
      tokens =
          requests_.at(s.seq_id)->tokens().first(static_cast<size_t>(s.start_pos + s.num_tokens));
    } else {
      continue;
    }
    draft_slots_.push_back(DraftSlot{.seq_id = s.seq_id,
                                     .tokens = tokens,
                                     .max_draft = cap,
                                     .num_draft = 0,
                                     .draft = draft_.data() + draft_slots_.size() * k_max});
    draft_slot_index_.push_back(i);
  }
  if (draft_slots_.empty()) return;
  proposer_->propose(draft_slots_);
  for (size_t j = 0; j < draft_slots_.size(); ++j) {
    const DraftSlot& d = draft_slots_[j];
    CHECK(d.num_draft >= 0 && d.num_draft <= d.max_draft) << d.num_draft << " > " << d.max_draft;
    if (d.max_draft == 0) continue;  // a prefill chunk
    ScheduledSeq& s = out.scheduled[draft_slot_index_[j]];
    attach_draft(requests_.at(s.seq_id).get(), s,
                 std::span<const int32_t>(d.draft, static_cast<size_t>(d.num_draft)));
  }
}

void Scheduler::set_draft_proposer(DraftProposer* proposer) {
  proposer_ = proposer;
  // Scratch for every slot's drafts, sized once (max_seqs x k ids).
  draft_.assign(size_t(cfg_.spec.max_seqs) * size_t(cfg_.spec.num_speculative_tokens), 0);
  draft_slots_.reserve(size_t(cfg_.spec.max_seqs));
  draft_slot_index_.reserve(size_t(cfg_.spec.max_seqs));
}

FinishReason Scheduler::apply_sampled(Request* r, const ScheduledSeq& s,
                                      std::span<const SampledToken> toks) {
  if (!toks.empty() && toks.front().discard_kv) {
    // The forward failed: none of this step's KV is valid, so none of it is computed or cached.
    kv_->truncate_slots(r->id, r->num_computed_tokens);
    r->draft_ids.clear();
    return FinishReason::kError;
  }
  // KV is valid for every computed token; for a speculative decode that is the decode token and
  // the accepted drafts: m sampled tokens accept m - 1 drafts (the m-th is the target's own
  // token, computed next step), so positions [start_pos, start_pos + m).
  const int64_t computed =
      s.num_draft_tokens > 0 ? static_cast<int64_t>(toks.size()) : s.num_tokens;
  r->num_computed_tokens += computed;
  FinishReason reason = FinishReason::kNone;
  for (const SampledToken& t : toks) {
    CHECK(reason == FinishReason::kNone)
        << "sampled tokens after the end of request " << index_of(r->id);
    if (t.error) {
      reason = FinishReason::kError;  // the token is dropped
      continue;
    }
    r->output_ids.push_back(t.token_id);
    if (t.stop) {
      reason = FinishReason::kStop;
    } else if (r->num_output_tokens() >= r->max_tokens || r->num_tokens() >= max_len_) {
      reason = FinishReason::kLength;
    }
  }
  if (s.num_draft_tokens > 0) {
    account_drafts(r, s.num_draft_tokens, toks);
    // Rejected drafts' slots go back; their blocks were never hashed (only computed tokens
    // are), so the prefix cache sees accepted tokens only.
    kv_->truncate_slots(r->id, r->num_computed_tokens);
    r->draft_ids.clear();
  }
  kv_->commit_computed(r->id, r->tokens(), r->num_computed_tokens, r->prompt_hashes());
  return reason;
}

void Scheduler::account_drafts(Request* r, int32_t num_drafts, std::span<const SampledToken> toks) {
  int32_t accepted = 0;
  while (accepted < num_drafts && size_t(accepted) < toks.size() && !toks[accepted].error &&
         toks[accepted].token_id == r->draft_ids[size_t(accepted)]) {
    ++accepted;
  }
  SpecCounters& c = counters_.spec;
  ++c.num_drafts;
  c.num_draft_tokens += uint64_t(num_drafts);
  c.num_accepted_tokens += uint64_t(accepted);
  for (int32_t i = 0; i < accepted; ++i) ++c.num_accepted_tokens_per_pos[size_t(i)];
  // Adaptive length: one longer after a full acceptance, else just past what was accepted
  // (a rejected position costs a wasted row of the forward; an accepted one saves a step).
  const int32_t k_max = cfg_.spec.num_speculative_tokens;
  r->num_spec_tokens =
      accepted == num_drafts ? std::min(r->num_spec_tokens + 1, k_max) : std::max(1, accepted + 1);
}

}  // namespace kvw
