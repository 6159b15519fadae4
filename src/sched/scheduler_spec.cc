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
  int32_t num_seqs = 0;
  for (ScheduledSeq& s : out.scheduled) {
    if (num_seqs >= cfg_.spec.max_seqs || budget_ <= 0) break;
    // A plain decode (entries unplanned by preemption have num_tokens 0).
    if (s.is_prefill || s.num_tokens != 1 || !s.needs_logits) continue;
    Request* r = requests_.at(s.seq_id).get();
    if (!r->speculate) continue;
    const int32_t cap = draft_length_cap(r);
    if (cap <= 0) continue;
    int32_t k = propose_ngram_draft(r->token_ids, cfg_.spec.prompt_lookup_min,
                                    cfg_.spec.prompt_lookup_max, cap, &draft_);
    // Free blocks only: a draft never evicts a cached prefix nor preempts anyone.
    while (k > 0 && kv_->num_blocks_needed(r->id, k) > kv_->pool().num_free_blocks()) --k;
    if (k == 0) continue;
    CHECK(kv_->allocate_slots(r->id, k) == AllocStatus::kOk);
    r->draft_ids.assign(draft_.begin(), draft_.begin() + k);
    s.num_tokens += k;
    s.num_draft_tokens = k;
    budget_ -= k;
    ++num_seqs;
  }
}

FinishReason Scheduler::apply_sampled(Request* r, const ScheduledSeq& s,
                                      std::span<const SampledToken> toks) {
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
    r->token_ids.push_back(t.token_id);
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
  kv_->commit_computed(r->id, r->token_ids, r->num_computed_tokens, r->prompt_hashes);
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
