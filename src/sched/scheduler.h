// sched/scheduler.h: continuous batching under a fixed KV pool. One schedule() call per engine
// step turns the running and waiting requests into a plan: which token spans to compute, and
// which requests were preempted, swapped back in or finished. The engine runs the forward and
// the sampler, then reports back with update_from_output().
// Owner: the engine thread owns the Scheduler and the KvManager it drives (not thread-safe).
// Works with token ids and counts only; never includes model/ or kernels/.
//
// One step (the phases of schedule(), in order):
//   apply_cancellations()   cancelled requests end, their blocks are freed
//   schedule_running()      decodes of running requests first (1 token each), then the next
//                           chunk of running prefills; preempt_until_fits() makes room by
//                           preempting the newest unprotected request (never the oldest, so
//                           nothing starves): swap_out when the tier has room, else recompute;
//                           then drafts (schedule_drafts, spec on): decodes of speculating
//                           requests grow by k prompt-lookup tokens where budget and free
//                           blocks allow (drafts never preempt or evict anything)
//   schedule_waiting()      admissions (swapped-in, recomputed or new), FCFS with repeatedly
//                           preempted requests first, while the budget, max_num_seqs and the
//                           blocks above the watermark allow, after reserving what every
//                           running request and the candidate still need (the rest of their
//                           prompts, the expected output: reserve_blocks_for); a choice
//                           whose sibling (same prompt) is still prefilling it waits for the
//                           prefix cache instead of computing the same prompt beside it
//   build_output()
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "core/status.h"
#include "kv/kv_manager.h"
#include "sched/context_overflow.h"
#include "sched/draft_proposer.h"
#include "sched/kv_reserve.h"
#include "sched/request.h"
#include "sched/sched_config.h"

namespace kvw {

// One sequence in the step's batch: compute tokens [start_pos, start_pos + num_tokens) of the
// request's tokens(); its KV slots are already allocated in block_table(seq_id).
// A speculative decode (num_draft_tokens = k > 0) computes the last token followed by the k
// tokens of Request::draft_ids (num_tokens = 1 + k) and needs logits at every position:
//   positions  start_pos   +1   +2  ...  +k
//   tokens     last        d1   d2  ...  dk      -> logits rows 0..k verify d1..dk, + 1 more
struct ScheduledSeq {
  SeqId seq_id{0};
  int64_t start_pos = 0;
  int64_t num_tokens = 0;
  bool needs_logits = false;     // the span ends the known tokens: sample the next one
  bool is_prefill = false;       // false: a decode (one token, plus its drafts)
  int32_t num_draft_tokens = 0;  // k drafts after the decode token (logits for each)
  // Prompt logprobs: logits for every token of the span (num_tokens rows, the last of which is
  // the sample row when needs_logits); at most SchedConfig::max_prompt_logit_rows a step.
  bool prompt_logits = false;
};

struct FinishedRequest {
  SeqId seq_id{0};
  FinishReason reason = FinishReason::kNone;
};

struct SchedulerOutput {
  uint64_t step = 0;
  std::vector<ScheduledSeq> scheduled;    // decodes first, then prefill chunks
  int64_t num_batched_tokens = 0;         // sum of num_tokens, <= max_num_batched_tokens
  std::vector<SeqId> preempted;           // this step (their KV is swapped or dropped)
  std::vector<SeqId> swapped_in;          // this step (resident again, decoding)
  std::vector<FinishedRequest> finished;  // ended inside schedule() (cancellations)
  bool empty() const { return scheduled.empty(); }
};

// The engine's result for one ScheduledSeq with needs_logits, in the same order. A speculative
// decode with k drafts gets 1..k+1 consecutive entries: the accepted drafts, then the target's
// own token after them; a stop or error entry ends the run (nothing after it).
struct SampledToken {
  SeqId seq_id{0};
  int32_t token_id = 0;
  bool stop = false;   // the engine saw EOS / a stop string: finish with kStop (token kept)
  bool error = false;  // e.g. NaN logits: finish with kError (token dropped)
  // With `error`: the forward pass failed for this sequence, so this step's KV is not valid:
  // its slots are given back and nothing of the step is committed (or cached). May come for a
  // sequence that needed no logits (a prefill chunk).
  bool discard_kv = false;
};

struct SchedCounters {
  uint64_t num_steps = 0;
  uint64_t num_admitted = 0;     // admissions of any kind (new, recompute, swap-in)
  uint64_t num_preemptions = 0;  // = num_swap_outs + num_recomputes
  uint64_t num_swap_outs = 0;
  uint64_t num_recomputes = 0;
  uint64_t num_swap_ins = 0;
  uint64_t num_swap_in_aborts = 0;       // read-backs dropped to make room for running requests
  uint64_t num_swap_lost = 0;            // swap_in found the data lost: recomputed instead
  uint64_t num_alloc_failures = 0;       // a running sequence's next slots did not fit (-> preempt)
  uint64_t num_admission_deferrals = 0;  // the queue head did not fit; retried next step
  uint64_t num_rejected = 0;             // add_request errors
  uint64_t num_truncated = 0;            // prompts shortened by the overflow policy
  std::array<uint64_t, 5> num_finished{};  // indexed by FinishReason
  // Where the model's work went: tokens run through forward for requests that finished, by
  // FinishReason (kCancelled: the client left, a stop string, the queue-wait limit), and the
  // tokens computed again at positions a request had computed before (after a preemption
  // dropped its KV; prefix-cache hits are not recomputed).
  std::array<uint64_t, 5> forward_tokens_finished{};
  uint64_t num_recomputed_tokens = 0;
  SpecCounters spec;
  uint64_t finished(FinishReason r) const { return num_finished[static_cast<size_t>(r)]; }
};

class Scheduler {
 public:
  // `kv` must outlive the Scheduler; the Scheduler is its only user of sequences.
  // CHECKs cfg.validate().
  Scheduler(const SchedConfig& cfg, KvManager* kv);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Errors (the request is not queued, counted as rejected): duplicate id,
  // empty prompt, max_tokens < 1, prompt too long under OverflowPolicy::kError (or turns that
  // cannot fit under kSlidingWindow).
  Status add_request(RequestInput input);
  // Marks a live request cancelled: it ends (kCancelled, listed in the next output's
  // `finished`) and its blocks are freed at the next schedule(). False if unknown or finished.
  bool cancel(SeqId id);

  // Forms the next step. CHECKs that the previous step was reported (update_from_output).
  SchedulerOutput schedule();
  // After the forward + sampling of `out`: advances computed tokens, commits their KV (prefix
  // cache), appends sampled tokens (one per needs_logits entry, same order), finishes requests
  // on stop, error, max_tokens or max_model_len (kLength) and frees their blocks. Returns the
  // requests that finished; they are forgotten by the scheduler at once.
  std::vector<FinishedRequest> update_from_output(const SchedulerOutput& out,
                                                  std::span<const SampledToken> sampled);

  // nullptr when unknown (never added, or finished and forgotten). The pointer stays valid until
  // the request finishes (update_from_output / the schedule() that applies its cancellation).
  const Request* find(SeqId id) const;
  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  // Requests whose KV is in the swap tier (waiting, or being read back), O(waiting).
  size_t num_swapped() const;
  size_t num_swapping_in() const { return swapping_in_.size(); }
  // The work the waiting requests still need, in tokens: each one's tokens to compute (prompt,
  // or everything again after a recompute preemption) plus the output it may still produce:
  // max_tokens less what it has, capped by max_model_len and, once kv_reserve_min_samples
  // requests finished, by the p95 output length of finished requests (a chat request that
  // leaves max_tokens at the context limit rarely uses it). O(waiting).
  int64_t num_waiting_work_tokens() const;
  bool has_unfinished() const { return !requests_.empty(); }
  // Drafts come from `proposer` (a draft model) instead of prompt lookup; it is told when a
  // sequence finishes or is preempted. Not owned; must outlive the Scheduler's use of it.
  void set_draft_proposer(DraftProposer* proposer);
  const SchedCounters& counters() const { return counters_; }
  const SchedConfig& config() const { return cfg_; }
  // max_model_len clamped to what the pool can hold for one request (not clamped under a
  // sliding window whose max_window_blocks() fit above the watermarks).
  int64_t max_model_len() const { return max_len_; }
  // The per-request reservation the p95 policy currently applies (0 when off/warming up).
  int64_t reserve_tokens() const;

  // CHECKs: every request is in exactly one of running/waiting/swapping-in; running requests
  // are resident in the KvManager with matching counts; swapped ones are swapped; totals balance.
  void check_invariants() const;

 private:
  struct WaitKey {  // waiting-queue order: protected (often preempted) first, then FCFS
    int32_t neg_priority;
    uint64_t arrival_order;
    SeqId id;
    auto operator<=>(const WaitKey&) const = default;
  };

  void apply_cancellations(SchedulerOutput& out);
  void complete_swap_ins(SchedulerOutput& out);
  void schedule_running(SchedulerOutput& out);
  void schedule_one_running(Request* r, int64_t num_new, SchedulerOutput& out);
  // scheduler_spec.cc: adds prompt-lookup drafts to this step's decodes, then, after sampling,
  // applies one sequence's sampled tokens in order (per-token stop and length checks), rolls
  // back the slots of rejected drafts and adapts the draft length. Returns how it ended.
  void schedule_drafts(SchedulerOutput& out);
  // With set_draft_proposer: drafts for the decodes among out.scheduled[first..], catch-up for
  // its prefill chunks; schedule_draft_catch_up offers the chunks admitted after it.
  void schedule_model_drafts(SchedulerOutput& out, size_t first);
  void schedule_draft_catch_up(SchedulerOutput& out);
  Request* draft_candidate(const ScheduledSeq& s);  // a speculating plain decode, else null
  // Allocates the draft's slots (free blocks only, shortening it to fit) and adds it to `s`.
  bool attach_draft(Request* r, ScheduledSeq& s, std::span<const int32_t> draft);
  int32_t draft_length_cap(const Request* r) const;
  FinishReason apply_sampled(Request* r, const ScheduledSeq& s, std::span<const SampledToken> toks);
  void account_drafts(Request* r, int32_t num_drafts, std::span<const SampledToken> toks);
  bool preempt_until_fits(Request* r, int64_t num_new, SchedulerOutput& out);
  Request* pick_victim(Request* r) const;
  void preempt(Request* victim, SchedulerOutput& out);
  void schedule_waiting(SchedulerOutput& out);
  bool admit(Request* r, int64_t running_reserve, SchedulerOutput& out);
  // Whether a running choice of the same prompt is still computing it: r then waits and gets
  // the prompt from the prefix cache once that is done (n choices of a long prompt otherwise
  // each prefill it in parallel, n times the work).
  bool sibling_is_prefilling(const Request* r) const;
  SwapInStatus admit_swapped(Request* r, int64_t running_reserve);
  void requeue_lost_swap(Request* r);  // not queued anywhere when called
  void build_output(SchedulerOutput& out);

  void push_scheduled(Request* r, int64_t num_new, SchedulerOutput& out);
  int64_t chunk_tokens(const Request* r) const;  // next span length within budget/chunk limit
  int64_t expected_total_tokens(const Request* r) const;  // p95 policy
  // Output tokens r will probably still produce: its remaining max_tokens capped by the p95
  // output length of finished requests; 0 until kv_reserve_min_samples finished.
  int64_t expected_output_left(const Request* r) const;
  // Blocks r still needs beyond resident_tokens: its whole known sequence plus the expected
  // output (more under --kv-reserve p95 or when protected). Admission keeps them free.
  int64_t reserve_blocks_for(const Request* r, int64_t resident_tokens) const;
  int64_t running_reserve_blocks() const;
  void enqueue_waiting(Request* r);
  void remove_running(Request* r);
  void finish(Request* r, FinishReason reason);  // frees KV, counts, observes the length
  // Adds a scheduled chunk to r's forward tokens and its recomputed part to the counters.
  void count_forward(Request* r, const ScheduledSeq& s);
  WaitKey wait_key(const Request* r) const;
  int64_t blocks_for(int64_t tokens) const;
  // Blocks a sequence of `tokens` tokens holds at most: blocks_for, capped by the window.
  int64_t blocks_held(int64_t tokens) const;
  // Most tokens a resident sequence with num_computed computed (and no uncomputed) tokens can
  // add while holding at most limit_blocks blocks (its window holes are not held).
  int64_t max_new_tokens(int64_t num_computed, int64_t limit_blocks) const;

  SchedConfig cfg_;
  KvManager* kv_;  // not owned
  int64_t max_len_;
  int64_t admit_limit_blocks_;  // blocks an admission may hold after its first chunk:
                                // pool - watermarks
  int64_t window_blocks_ = 0;   // KvManager::max_window_blocks(); 0 without a sliding window
  std::unordered_map<SeqId, std::unique_ptr<Request>> requests_;  // live (not finished)
  std::vector<Request*> running_;  // admission order: back() is the newest
  std::set<WaitKey> waiting_;
  std::vector<Request*> swapping_in_;  // kSwappingIn, in admission order
  std::vector<SeqId> cancelled_;       // cancel() ids, applied at the next schedule()
  LengthTracker lengths_;
  LengthTracker output_lengths_;  // output tokens of requests that ended on stop or length
  SchedCounters counters_;
  uint64_t next_arrival_ = 0;
  // Request::shared_prompt_hashes: the last prompt's when `r` shares that prompt, else hashed.
  void share_or_hash_prompt(Request& r);
  // fit_prompt for a prompt over the limit; the choices of one request share one shortened
  // copy as they share the prompt (the last fit is reused while both lists live).
  // Fits the prompt into `fitted` and its turn offsets into `turns`, sharing both with the
  // previous request's when it had the same input (the choices of one request).
  Result<FittedPrompt> fit_or_reuse(const RequestInput& input, TokenList& fitted,
                                    TurnStarts& turns);
  std::weak_ptr<const std::vector<int32_t>> last_fit_input_, last_fit_output_;
  std::weak_ptr<const std::vector<int64_t>> last_fit_turns_;  // the output's turn offsets
  std::vector<int64_t> last_fit_turn_starts_;  // the input's (a chat's turn offsets, small)
  FittedPrompt last_fit_;                      // turn offsets and drops of the output; no ids
  // The last prompt hashed at add_request and its hashes: the choices of one request arrive
  // one after another with one shared prompt, and share its hashes too. The pointer is compared
  // only while the hashes live, that is while a Request holding that prompt does.
  const int32_t* last_hashed_prompt_ = nullptr;
  std::weak_ptr<const std::vector<uint64_t>> last_prompt_hashes_;
  uint64_t next_admission_ = 0;
  uint64_t step_ = 0;
  bool awaiting_update_ = false;

  // Per-step scratch (reused, no allocation once warm).
  int64_t budget_ = 0;
  int64_t prompt_rows_left_ = 0;  // max_prompt_logit_rows less this step's prompt_logits spans
  bool preempted_this_step_ = false;
  std::unordered_map<SeqId, size_t> scheduled_index_;  // seq -> index in out.scheduled
  std::vector<Request*> pass_;  // snapshot of running_ walked by one pass of schedule_running
  std::vector<int32_t> draft_;  // proposer scratch ([max_seqs][k] with a draft model)
  DraftProposer* proposer_ = nullptr;      // not owned; null: prompt lookup
  std::vector<DraftSlot> draft_slots_;     // this step's draft-model candidates
  std::vector<size_t> draft_slot_index_;   // their index in out.scheduled
  size_t num_scheduled_before_admit_ = 0;  // out.scheduled entries seen by schedule_drafts
};

}  // namespace kvw
