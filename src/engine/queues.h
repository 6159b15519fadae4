// engine/queues.h: the two thread boundaries of the engine. RequestQueue carries submissions and
// cancellations from client (HTTP) threads to the engine thread (bounded MPSC: a full queue is
// back-pressure, never growth); TokenChannel carries one request's tokens and its end back to
// the client (bounded by max_tokens + the final event).
// Thread safety: every method is thread-safe; all mutex/condvar code of the engine lives here.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/token_list.h"
#include "engine/gen_sampling.h"
#include "kv/layout_stats.h"
#include "kv/prefix_cache.h"
#include "sched/request.h"
#include "sched/spec_config.h"

namespace kvw {

struct GenerationRequest {
  // Token ids, each in [0, n_vocab). Copies share one list: submit the n choices of a prompt
  // with copies of one TokenList and the engine holds that prompt once (issue 30).
  TokenList prompt;
  int32_t max_tokens = 16;  // output tokens at most (>= 1)
  GenSampling sampling;
  bool ignore_eos = false;  // keep generating past end-of-generation tokens
  // Chat turn offsets (sliding-window overflow only). Copies share one list, as `prompt`.
  TurnStarts turn_starts;
  // > 0: a request that has emitted no token this many seconds after submit() (still queued,
  // or its prefill not done) is removed from the engine, its blocks freed, and ends with
  // kError, ErrorKind::kQueueTimeout. 0: no limit. Checked between steps (resolution: a step).
  double max_queue_wait_s = 0;
  // Per-request opt-out of speculative decoding (when the engine runs with it on). Output is
  // the same either way for greedy requests; only the speed differs.
  bool speculate = true;
  // Prompt logprobs (echo + logprobs, vLLM's prompt_logprobs): -1 = none; k >= 0 = every
  // prompt token after the first gets its log-probability given the tokens before it, plus the
  // k most likely tokens there (k <= 20), computed from the prefill's own logits (teacher
  // forcing), and arrives as kPromptLogprobs events before the first token. No prefix-cache
  // hit skips those positions; their chunks share SchedConfig::max_prompt_logit_rows a step.
  int32_t prompt_logprobs = -1;
};

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

// What the client reads: tokens in order, then exactly one final event.
struct ChannelEvent {
  enum class Kind { kToken, kPromptLogprobs, kFinished };
  Kind kind = Kind::kToken;
  int32_t token_id = 0;                         // kToken
  float logprob = 0.0f;                         // kToken, when GenSampling::logprobs >= 0
  std::vector<TokenLogprob> top_logprobs;       // kToken: GenSampling::logprobs entries, best first
  FinishReason reason = FinishReason::kNone;    // kFinished
  std::string error;                            // kFinished with kError: what went wrong
  ErrorKind error_kind = ErrorKind::kInternal;  // kFinished with kError: which kind of fault
  // kPromptLogprobs: prompt tokens [prompt_pos, prompt_pos + prompt.size()), each with its
  // log-probability given the prompt before it; top_logprobs holds prompt_top_k entries per
  // token ([prompt.size()][prompt_top_k], best first). prompt_pos >= 1 (the first token has
  // nothing before it); events of one request come in order and do not overlap.
  // prompt_ranks[i]: 1 + the number of tokens more likely than prompt[i] there (vLLM's rank).
  int64_t prompt_pos = 0;
  std::vector<TokenLogprob> prompt;
  std::vector<int32_t> prompt_ranks;
  int32_t prompt_top_k = 0;
};

// One request's output stream. Producer: the engine thread; consumer: one client thread.
class TokenChannel {
 public:
  TokenChannel(uint64_t request_id, int32_t max_tokens);
  uint64_t request_id() const { return request_id_; }

  // Engine side. push_token CHECKs that fewer than max_tokens tokens were pushed and that the
  // channel is not finished; finish() is idempotent (the first reason wins).
  void push_token(int32_t token_id);
  void push_token(ChannelEvent ev);  // ev.kind == kToken, with log-probabilities
  // ev.kind == kPromptLogprobs; not counted against max_tokens (the prompt bounds them). CHECKs
  // that no token was pushed yet and the channel is not finished.
  void push_prompt_logprobs(ChannelEvent ev);
  void finish(FinishReason reason, std::string error = {}, ErrorKind kind = ErrorKind::kInternal);

  // Client side. next() blocks until an event is available; after the kFinished event it keeps
  // returning that event. next_for() returns nullopt on timeout.
  ChannelEvent next();
  std::optional<ChannelEvent> next_for(std::chrono::milliseconds timeout);
  bool finished() const;

  // Event-driven clients: `fn` runs on the engine thread after every push and finish (and once
  // at once when events are already waiting). It must be cheap and must not call back into the
  // channel. set_notify({}) returns only after any running call ended, so what `fn` captures
  // may be destroyed after it.
  void set_notify(std::function<void()> fn);

  // Blocks until finished; returns every token not yet read and the final event.
  struct Collected {
    std::vector<int32_t> tokens;
    FinishReason reason = FinishReason::kNone;
    std::string error;
    ErrorKind error_kind = ErrorKind::kInternal;
  };
  Collected collect();

 private:
  std::optional<ChannelEvent> pop_locked();
  void notify();

  const uint64_t request_id_;
  const int32_t max_tokens_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Unread kToken events (at most max_tokens_), after any unread kPromptLogprobs events.
  std::deque<ChannelEvent> tokens_;
  int32_t num_pushed_ = 0;
  bool finished_ = false;
  ChannelEvent final_;
  std::mutex notify_mu_;  // serialises notify_ calls with set_notify
  std::function<void()> notify_;
};

// A submission on its way to the engine thread. The channel is shared: the client holds it to
// read, the engine to write, and either may finish first (hence shared_ptr).
class SeqSampler;
struct PendingRequest {
  uint64_t request_id = 0;
  GenerationRequest request;
  std::shared_ptr<TokenChannel> channel;
  std::shared_ptr<SeqSampler> sampler;  // built (and validated) once, by submit()
  // submit() + max_queue_wait_s; time_point::max() when there is no limit.
  std::chrono::steady_clock::time_point first_token_deadline =
      std::chrono::steady_clock::time_point::max();
};

// Bounded multi-producer, single-consumer queue of submissions and cancellations.
class RequestQueue {
 public:
  explicit RequestQueue(size_t capacity);

  // False when the queue holds `capacity` submissions (back-pressure) or is closed; then the
  // request was not taken.
  bool try_push(PendingRequest&& p);
  // Cancellations are tiny and never refused while open (a cancel must not be lost to a full
  // queue). False when closed.
  bool push_cancel(uint64_t request_id);
  // Engine thread: moves everything queued into the outputs (appending). Never blocks.
  void drain(std::vector<PendingRequest>& requests, std::vector<uint64_t>& cancels);
  // Engine thread, when idle: blocks until something is queued, the queue is closed, or
  // `timeout` passes.
  void wait_for_work(std::chrono::milliseconds timeout);
  // Wakes the engine thread from wait_for_work (e.g. a snapshot was asked for).
  void wake();
  // Refuses further pushes and wakes the engine thread. Queued items stay for drain().
  void close();
  bool closed() const;
  size_t capacity() const { return capacity_; }

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<PendingRequest> requests_;
  std::vector<uint64_t> cancels_;
  bool closed_ = false;
  bool woken_ = false;
};

// Engine figures, published once per step by the engine thread (counters are cumulative).
struct EngineStats {
  uint64_t num_steps = 0;             // steps that ran a forward
  uint64_t num_generated_tokens = 0;  // sampled tokens emitted to channels
  uint64_t num_numerics_errors = 0;   // requests ended by the NaN/Inf guard
  uint64_t num_request_faults = 0;    // requests ended by an exception while serving them
  uint64_t num_rejected = 0;          // requests refused by the scheduler (bad input)
  uint64_t num_finished = 0;          // requests ended for any reason
  uint64_t num_queue_timeouts = 0;    // ended with no token within max_queue_wait_s
  uint64_t num_computed_tokens = 0;   // prompt + output tokens run through forward
  // Of them: those of finished requests, by FinishReason, and those computed again after a
  // preemption dropped their KV (SchedCounters: where the work went).
  std::array<uint64_t, 5> forward_tokens_finished{};
  uint64_t num_recomputed_tokens = 0;
  uint64_t num_preemptions = 0;
  uint64_t num_swap_outs = 0;
  uint64_t num_swap_ins = 0;
  uint32_t num_blocks = 0;              // KV pool
  uint32_t num_allocatable_blocks = 0;  // free + evictable cached
  size_t num_kv_sequences = 0;          // sequences holding blocks (resident or swapped)
  size_t num_running = 0;
  size_t num_waiting = 0;
  // Work left of the waiting requests, in tokens: prompt (or recompute) tokens still to run
  // plus the output tokens they may still produce (Scheduler::num_waiting_work_tokens).
  int64_t num_waiting_work_tokens = 0;
  // Tokens per second the engine computes while busy (prefill + decode, per second of step
  // time), over the last ~1 s of steps; 0 before the first step.
  double token_rate = 0;
  uint64_t schedule_ns = 0;  // time inside Scheduler::schedule + update_from_output
  uint64_t forward_ns = 0;   // time inside Model::forward
  uint64_t sample_ns = 0;    // numerics guard + sampling
  SpecCounters spec;         // speculative decoding (vllm:spec_decode_*)

  // For /metrics. Cumulative unless noted.
  uint64_t num_preemptions_swap = 0;       // preempted to the swap tier
  uint64_t num_preemptions_recompute = 0;  // preempted and dropped (recomputed later)
  uint64_t swap_out_bytes = 0;
  uint64_t swap_in_bytes = 0;
  uint64_t num_alloc_failures = 0;       // a running sequence found no free block (-> preempted)
  uint64_t num_admission_deferrals = 0;  // the queue head found no room; retried next step
  uint64_t num_defrag_moves = 0;         // KV blocks moved by the defragmenter
  uint64_t num_window_freed_blocks = 0;  // KV blocks released behind the sliding window
  size_t num_swapped = 0;                // now: preempted requests whose KV sits in the swap tier
  PrefixCacheCounters prefix;
  KvLayoutStats kv;               // now: refreshed at most every 100 ms (O(blocks))
  uint32_t last_step_seqs = 0;    // now: sequences in the last step's batch
  uint32_t last_step_tokens = 0;  // now: tokens in the last step's batch
};

// One engine step, reported to EngineConfig::step_observer on the engine thread right after
// the step (metrics histograms, trace ring). Must be cheap; must not call into the Engine.
struct StepObservation {
  uint64_t step = 0;
  uint64_t start_ns = 0;  // steady_clock
  uint64_t duration_ns = 0;
  uint32_t num_seqs = 0;
  uint32_t num_tokens = 0;
  uint32_t blocks_allocated = 0;              // pool blocks that went from free/cached to used
  uint32_t blocks_freed = 0;                  // pool blocks that went from used to free/cached
  uint32_t num_used_blocks = 0;               // after the step
  uint32_t num_used_window_slots = 0;         // after the step; hybrid window models only
  std::vector<uint64_t> preempted_swap;       // request ids
  std::vector<uint64_t> preempted_recompute;  // request ids
  std::vector<uint64_t> swapped_in;           // request ids
  std::vector<uint64_t> finished;             // request ids
};

// The KV pool's block map for /debug/kv and the dashboard. BlockRecord::owner is the request id.
struct KvSnapshot {
  uint64_t step = 0;
  uint64_t taken_ns = 0;  // steady_clock
  KvLayoutStats stats;
  std::vector<BlockRecord> blocks;  // [num_blocks], index == block id
};

// The latest KvSnapshot. Readers ask (request()), the engine thread sees wanted() at its next
// step or idle tick and publishes; a reader waits for a snapshot newer than its request.
class SnapshotBox {
 public:
  uint64_t request();  // returns the generation a fresh snapshot will exceed
  bool wanted() const;
  void publish(std::shared_ptr<const KvSnapshot> s);
  // The latest snapshot once one newer than `generation` exists, or after `timeout` whatever
  // is there (null before the first).
  std::shared_ptr<const KvSnapshot> wait_newer(uint64_t generation,
                                               std::chrono::milliseconds timeout) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool wanted_ = false;
  uint64_t generation_ = 0;
  std::shared_ptr<const KvSnapshot> latest_;
};

// Latest EngineStats: written by the engine thread, read by any thread.
class StatsBox {
 public:
  void publish(const EngineStats& s);
  EngineStats read() const;

 private:
  mutable std::mutex mu_;
  EngineStats stats_;
};

}  // namespace kvw
