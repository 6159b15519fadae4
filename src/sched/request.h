// sched/request.h: one generation request as the scheduler tracks it, and its state machine.
// Owner: the Scheduler (engine thread only, not thread-safe). The request id is the SeqId of
// its one KV sequence; the n choices of one prompt are n Requests sharing its prompt ids.
//
//            add_request                   schedule(): admitted
//   (input) ------------> kWaiting ---------------------------------> kRunning
//                            ^  ^                                      |  |  |
//          admitted again    |  |  preempt: swap_out ok               |  |  | update_from_output:
//   kPreemptedSwapped -------+  +--------- kPreemptedSwapped <---------+  |  | stop/length/error
//   kPreemptedRecompute -----+  +--------- kPreemptedRecompute <----------+  v
//   (both wait in the waiting queue)    preempt: no swap room             kFinished
//   An admitted kPreemptedSwapped request is kSwappingIn (blocks reserved, reads in flight,
//   not scheduled) until the read-back lands, then kRunning; other requests keep stepping.
//   cancel(id) from any live state -> kFinished(kCancelled) at the next schedule().
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/ids.h"
#include "core/token_list.h"
#include "core/token_span.h"
#include "core/turn_starts.h"

namespace kvw {

enum class RequestState {
  kWaiting,
  kRunning,
  kPreemptedSwapped,
  kSwappingIn,  // admitted from kPreemptedSwapped; its blocks are being read back
  kPreemptedRecompute,
  kFinished
};
enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };

const char* to_string(RequestState s);
const char* to_string(FinishReason r);

// What a client submits (the scheduler copies it into a Request).
struct RequestInput {
  SeqId id{0};
  // Token ids. Shared, not copied: the n choices of one prompt pass the same list, and each
  // Request keeps it (unless overflow handling shortens it), so they hold one copy.
  TokenList prompt;
  int32_t max_tokens = 16;  // output tokens at most (>= 1)
  // Chat turn start offsets into `prompt` (ascending, first == 0; turn 0 is the system prompt).
  // Needed only by the sliding-window overflow policy. Shared like `prompt` by its choices.
  TurnStarts turn_starts;
  // May carry prompt-lookup drafts when SchedConfig::spec is on (the engine clears it for
  // requests whose sampling it cannot verify exactly, and on per-request opt-out).
  bool speculate = false;
  // Logits at every prompt position are wanted (prompt logprobs): prefill chunks carry them
  // (ScheduledSeq::prompt_logits) and no prefix-cache hit skips a position still owed.
  bool prompt_logits = false;
};

struct Request {
  SeqId id{0};
  // The prompt (after overflow handling; shared with the request's other choices, see
  // RequestInput::prompt), then this sequence's sampled outputs: position p holds tokens()[p].
  // tokens() is the run KvManager::commit_computed hashes, so outputs become prefix-cacheable
  // too (turns).
  TokenList prompt_ids;
  std::vector<int32_t> output_ids;
  int64_t num_prompt_tokens = 0;
  int32_t max_tokens = 0;
  TurnStarts turn_starts;  // after overflow handling (shared by the choices, as prompt_ids)
  // Chain hashes of the prompt's full blocks (prefix caching on), computed once at add_request
  // for every admission check, admission and commit of this request; shared like the prompt
  // by the choices that share it. Null: none (no full block, or no prefix caching).
  std::shared_ptr<const std::vector<uint64_t>> shared_prompt_hashes;
  int64_t num_dropped_prompt_tokens = 0;  // removed by truncate-left / sliding-window

  uint64_t arrival_order = 0;    // add_request order, FCFS key
  uint64_t admission_order = 0;  // last admission (running_ order); preemption picks the newest
  RequestState state = RequestState::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  // Tokens [0, num_computed_tokens) have KV in the pool (== KvManager's count while resident).
  int64_t num_computed_tokens = 0;
  int32_t num_preemptions = 0;
  // Tokens run through the model for this request, recomputes included (the waste accounting:
  // SchedCounters::forward_tokens_finished), and the furthest position ever computed, beyond
  // which nothing counts as recomputed.
  int64_t num_forward_tokens = 0;
  int64_t max_computed_tokens = 0;
  bool cancel_requested = false;
  // Speculative decoding (sched/scheduler_spec.cc).
  bool speculate = false;
  int32_t num_spec_tokens = 0;     // adaptive draft length for the next step, [1, k max]
  std::vector<int32_t> draft_ids;  // this step's drafts: positions num_tokens() .. + size
  // Prompt logprobs: positions [0, prompt_logits_done) have had their logit rows computed (a
  // recompute after preemption may reuse cached KV that far, never further).
  bool prompt_logits = false;
  int64_t prompt_logits_done = 0;

  TokenSpan tokens() const { return TokenSpan(prompt_ids.span(), output_ids); }
  int64_t num_tokens() const { return num_prompt_tokens + num_output_tokens(); }
  int64_t num_output_tokens() const { return static_cast<int64_t>(output_ids.size()); }
  std::span<const int32_t> prompt() const { return prompt_ids.span(); }
  std::span<const int32_t> output_token_ids() const { return output_ids; }
  std::span<const uint64_t> prompt_hashes() const {
    return shared_prompt_hashes ? std::span<const uint64_t>(*shared_prompt_hashes)
                                : std::span<const uint64_t>();
  }
  // Tokens still to run through the model before the next sample (1 for a decode).
  int64_t num_tokens_to_compute() const { return num_tokens() - num_computed_tokens; }
  // Whether the prompt positions from num_computed_tokens on still owe logit rows (the last
  // prompt position's row is the first sample, not a prompt logprob).
  bool owes_prompt_logits() const {
    return prompt_logits && prompt_logits_done + 1 < num_prompt_tokens &&
           num_computed_tokens + 1 < num_prompt_tokens;
  }
  // The part of the prompt a prefix-cache hit may cover: with prompt logits owed, only the
  // positions whose rows were already computed (match_prefix leaves the last token out).
  TokenSpan cacheable_prompt() const {
    if (!prompt_logits) return tokens();
    return tokens().first(static_cast<size_t>(std::min(num_tokens(), prompt_logits_done + 1)));
  }
  bool is_finished() const { return state == RequestState::kFinished; }
};

}  // namespace kvw
