// sched/draft_proposer.h: the interface through which the Scheduler asks a draft model for
// speculative tokens. The scheduler never includes model/: the engine implements it
// (engine/draft_model_proposer.h) and installs it with Scheduler::set_draft_proposer; without
// one the scheduler drafts by prompt lookup (ngram_proposer.h).
// Owner: the engine thread (called from inside Scheduler::schedule and its preemption/finish).
#pragma once

#include <cstdint>
#include <span>

#include "core/ids.h"
#include "core/token_span.h"

namespace kvw {

// One decoding sequence that may carry drafts this step.
struct DraftSlot {
  SeqId seq_id{0};
  TokenSpan tokens;  // the sequence's tokens (prompt + output) known so far
  // At most this many drafts; 0: a prefill chunk the target computes this step: the draft may
  // compute `tokens` too (catch up) but proposes nothing.
  int32_t max_draft = 0;
  int32_t num_draft = 0;     // out: drafts written to `draft` (0: none this step)
  int32_t* draft = nullptr;  // out: [max_draft] proposed token ids
};

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;
  // Proposes drafts for every slot at once (one batched draft pass per drafted position).
  // May propose none for a slot (e.g. its draft state is still catching up, or the draft's
  // memory is short); never fails the step.
  virtual void propose(std::span<DraftSlot> slots) = 0;
  // The sequence is finished or preempted: drop its draft state and memory (recomputed from
  // its tokens if it drafts again).
  virtual void release(SeqId seq) = 0;
};

}  // namespace kvw
