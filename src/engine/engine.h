// engine/engine.h: continuous-batching inference over one model under a hard memory budget.
// create() plans weights + workspace + KV pool + reserve against --memory-budget, logs the table
// and allocates everything once; then one engine thread loops
//   drain submissions -> Scheduler::schedule -> Model::forward -> numerics guard + sample
//   -> Scheduler::update_from_output -> emit tokens to the per-request channels.
// Ownership: the Engine owns the model, the KV arena, the KvManager and the Scheduler; only the
// engine thread touches them while it runs. submit/cancel/stats/shutdown are thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/draft_model_proposer.h"
#include "engine/engine_config.h"
#include "engine/queues.h"
#include "engine/seq_sampler.h"
#include "kv/kv_arena.h"
#include "kv/kv_manager.h"
#include "model/model.h"
#include "planner/engine_budget.h"
#include "sched/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace kvw {

// What one request may ask of the engine, fixed at create(): the numbers submit() and the
// scheduler enforce. Front ends read them here to refuse early and to report them; they keep no
// copies (the configured --max-model-len may be more than the KV pool holds).
struct EngineLimits {
  int64_t max_model_len = 0;  // prompt + output tokens: --max-model-len clamped to the KV pool
  int32_t n_vocab = 0;        // prompt token ids lie in [0, n_vocab)
  int32_t max_num_seqs = 0;   // requests running at once (--max-num-seqs)
  // What a prompt over max_model_len - 1 tokens gets (kError: refused, kind kContextOverflow).
  OverflowPolicy overflow = OverflowPolicy::kError;
};

class Engine {
  struct PassKey {  // lets create() use make_unique while keeping construction private
    explicit PassKey() = default;
  };

 public:
  explicit Engine(PassKey) {}  // use create()
  // Loads the model, plans and allocates the pools, starts the engine thread. Errors: a bad
  // config or model file, a swap file that cannot be created, or a budget too small; the
  // last one carries the budget table and names --memory-budget.
  static Result<std::unique_ptr<Engine>> create(const EngineConfig& cfg);
  // The same over cfg.model_path already open (kvwarden serve reads its defaults from it): the
  // file is planned with, then kept by the Model; create() opens and parses nothing else.
  static Result<std::unique_ptr<Engine>> create(const EngineConfig& cfg,
                                                std::unique_ptr<GgufFile> file);
  // The same with its hyper-parameters already read (hparams_from_gguf of `file`): the plan
  // and the Model both take them, so start-up parses them once.
  static Result<std::unique_ptr<Engine>> create(const EngineConfig& cfg,
                                                std::unique_ptr<GgufFile> file, ModelHParams hp);
  ~Engine();  // shutdown()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request; its tokens and end arrive on the returned channel (channel->request_id()
  // is the id for cancel()). Errors (nothing queued): empty prompt, max_tokens < 1, token ids
  // out of range, bad sampling values, queue full ("retry later": back-pressure), shut down.
  // Requests the scheduler refuses (e.g. prompt over --max-model-len) end on the channel with
  // FinishReason::kError and the scheduler's message.
  Result<std::shared_ptr<TokenChannel>> submit(GenerationRequest req);
  // Asks the engine to cancel: the request ends with kCancelled and its blocks are freed at the
  // next step. False once shut down.
  bool cancel(uint64_t request_id);
  // Stops the engine thread after its current step and joins it. Queued and running requests end
  // with kError ("engine shut down") and their blocks are freed. Idempotent; never terminates.
  void shutdown();

  const EngineLimits& limits() const { return limits_; }
  const planner::BudgetTable& budget() const { return budget_; }
  const Model& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  EngineStats stats() const { return stats_box_.read(); }
  // The block map as of the latest step (or idle tick) after this call's request; waits at most
  // `timeout` for the engine thread, else returns the previous snapshot (null before the first).
  std::shared_ptr<const KvSnapshot> kv_snapshot(std::chrono::milliseconds timeout) const;
  // Only after shutdown() (the engine thread no longer runs).
  const KvManager& kv_manager() const;
  const Scheduler& scheduler() const;

 private:
  struct Live {  // a request the scheduler knows (engine thread only)
    std::shared_ptr<TokenChannel> channel;
    std::shared_ptr<SeqSampler> sampler;
    bool ignore_eos = false;
    std::string error;  // set by the numerics guard, sent with kError
    ErrorKind error_kind = ErrorKind::kInternal;
    // Log-probabilities of the tokens sampled this step (one, or 1..k+1 when speculating).
    std::vector<ChannelEvent> next_events;
    // PendingRequest::first_token_deadline until the first token is emitted, then max().
    std::chrono::steady_clock::time_point first_token_deadline;
    bool timed_out = false;         // expire_overdue() cancelled it: its channel ends with kError
    int32_t prompt_logprobs = -1;   // GenerationRequest::prompt_logprobs
    int64_t next_prompt_token = 1;  // the first prompt token whose logprob is still owed
    int32_t max_tokens = 0;         // GenerationRequest::max_tokens (the test fault hooks)
    bool emit_failed = false;       // an event could not be queued: it ends with `error`
  };
  Status init(const EngineConfig& cfg, std::unique_ptr<GgufFile> file, ModelHParams hp);
  Status check_memory_available(uint64_t logits_bytes) const;
  Status lock_memory() const;
  // draft_file and draft_hp: both or neither (--draft-model).
  Status plan_budget(const GgufFile& file, const ModelHParams& hp, const GgufFile* draft_file,
                     const ModelHParams* draft_hp);
  // --draft-model: loads it into the planned draft rows and hands it to the scheduler.
  Status load_draft(std::unique_ptr<GgufFile> file, ModelHParams hp,
                    const ModelOptions& target_options);
  void run();
  void admit_pending();
  void admit_one(PendingRequest& p);  // may throw (bad_alloc): admit_pending ends that request
  // Cancels every request that emitted no token by its first_token_deadline (queued or in
  // prefill); the scheduler frees its blocks at the next schedule() and the channel ends with
  // kError, ErrorKind::kQueueTimeout. O(live requests), only when a deadline may have passed.
  void expire_overdue();
  void measure_rate(std::chrono::steady_clock::time_point step_start, int64_t num_tokens);
  bool step();  // false when nothing was scheduled
  // Model::forward over inputs_ into logits_. A pass that throws cannot be pinned on one
  // sequence of a batched matmul, so the step is run again one sequence at a time; the
  // sequences whose own pass throws are put in forward_faults_ (engine_forward.cc).
  void run_forward(const SchedulerOutput& out);
  void forward_seqs(const SchedulerOutput& out, size_t first, size_t count, float* logits);
  // Queues this step's token events (engine_forward.cc); a request whose emission throws is
  // cancelled with an error and the others' events go on.
  void queue_token_events();
  void fail_emission(uint64_t id, Live& live, const std::exception& e);
  // One sequence's logit rows to sample this step (one, or 1 + k for a speculative decode);
  // sample_rows runs them on the model's threads (engine_sample.cc).
  struct SampleJob {
    float* row;  // [num_rows][n_vocab]
    int32_t num_rows;
    Live* live;
    const Request* request;
    int64_t pos;  // position of the first row's token (for the numerics guard's message)
    SeqId seq_id;
    // Out: the tokens kept in order (accepted drafts, then the target's own token).
    std::array<int32_t, kMaxSpecDraftTokens + 1> ids;
    int32_t num_ids;
    bool stop;    // ids' last is an end-of-generation or stop_token_ids token
    bool finite;  // false: the row after ids was non-finite (the request ends with kError)
    const char* fault = nullptr;  // what() of an exception while sampling (static or owned)
    bool discard_kv = false;      // the fault was in its forward pass: this step's KV is junk
    std::string fault_text = {};  // owns the message when `fault` points at it
    ErrorKind fault_kind = ErrorKind::kInternal;
  };
  // Prompt logprobs (engine_prompt_logprobs.cc): one event per prefill chunk that owes them,
  // filled from its logit rows on the model's threads, then queued for emission.
  struct PromptChunk {
    uint64_t id;
    Live* live;
    const float* rows;  // [prompt.size()][n_vocab]: row i predicts token prompt_pos + i
    std::span<const int32_t> targets;  // the prompt tokens those rows predict
    ChannelEvent ev;                   // kPromptLogprobs, sized, filled by run_prompt_rows
    bool finite = true;
  };
  // The chunk of `s` (whose rows start at logits_ row `first_row`) that owes prompt logprobs.
  void plan_prompt_chunk(const ScheduledSeq& s, size_t first_row);
  void run_prompt_rows();
  void emit_prompt_chunks();
  void build_inputs(const SchedulerOutput& out);
  // Ends the job's request with its fault (update_from_output frees its blocks).
  void fail_sample(SampleJob& job);
  void sample_rows(const SchedulerOutput& out);
  void sample_job(SampleJob& job, int32_t n_vocab) const;
  // Whether a request may carry drafts: speculation on and not opted out (greedy and sampled
  // requests are verified exactly, see sample_job).
  bool can_speculate(const GenerationRequest& r) const;
  void publish_and_emit();
  void publish_snapshot_if_wanted();
  void observe_step(uint64_t step, std::chrono::steady_clock::time_point start,
                    const SchedulerOutput& out, uint32_t used_before);
  void finish_live(uint64_t id, FinishReason reason, const std::string& error,
                   ErrorKind kind = ErrorKind::kInternal);
  void drain_at_shutdown();

  EngineConfig cfg_;
  EngineLimits limits_;
  planner::BudgetTable budget_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<KvArena> arena_;
  std::unique_ptr<KvManager> kv_;
  std::unique_ptr<Scheduler> sched_;
  // --draft-model (null: none). Declared after sched_: destroyed first, the scheduler holds a
  // pointer to it but never calls it after the engine thread stops.
  std::unique_ptr<DraftModelProposer> draft_;
  std::unique_ptr<RequestQueue> queue_;
  StatsBox stats_box_;
  mutable SnapshotBox snapshot_box_;
  std::atomic<uint64_t> next_request_id_{1};
  std::atomic<bool> joined_{false};
  std::thread thread_;

  // Engine thread only.
  std::unordered_map<uint64_t, Live> live_;
  EngineStats stats_;
  std::chrono::steady_clock::time_point kv_stats_time_{};  // last KvLayoutStats refresh
  // Earliest first_token_deadline of a live request that has emitted nothing (or later: a
  // request that emitted meanwhile leaves it early, which costs one scan).
  std::chrono::steady_clock::time_point next_deadline_ =
      std::chrono::steady_clock::time_point::max();
  int64_t rate_window_tokens_ = 0;   // tokens computed in the current token_rate window
  uint64_t rate_window_ns_ = 0;      // step time of the current token_rate window
  bool rate_window_closed_ = false;  // a whole window was measured (else the partial one shows)
  // [min(max_num_seqs, max_num_batched_tokens) + SchedConfig::extra_logit_rows()][n_vocab] f32
  std::vector<float> logits_;
  std::vector<SeqInput> inputs_;                            // per-step batch, reused
  std::vector<SampledToken> sampled_;                       // per-step samples, reused
  std::vector<SampleJob> sample_jobs_;                      // per-step rows to sample, reused
  std::vector<PromptChunk> prompt_chunks_;                  // per-step, reused
  std::vector<std::pair<uint32_t, uint32_t>> prompt_rows_;  // per-step (chunk, row), reused
  // Per-step inputs not contiguous elsewhere: [last, d1..dk] per drafted decode, and prefill
  // chunks across the end of a shared prompt. [<= max_num_batched_tokens] int32, reserved.
  std::vector<int32_t> step_tokens_;
  // Hybrid window models: per-step window-slot tables, one per scheduled sequence, reused
  // (at most max_num_seqs of at most max_model_len / block_size entries).
  std::vector<std::vector<uint32_t>> window_tables_;
  // Sequences whose forward pass threw this step (run_forward), with the fault.
  struct ForwardFault {
    SeqId seq_id;
    std::string error;
    ErrorKind kind;
  };
  std::vector<ForwardFault> forward_faults_;
  // Tests only (EngineConfig::kernel_fault_hook): (request id, max_tokens) of the sequences in
  // the forward pass running now; written by the engine thread before the pass, read by the
  // kernel threads during it (ThreadPool::run orders the two).
  std::vector<std::pair<uint64_t, int32_t>> kernel_fault_pass_;
  const ForwardFault* forward_fault(SeqId id) const;  // null: its pass did not fail
  std::vector<PendingRequest> pending_;
  std::vector<uint64_t> cancels_;
  // Emitted at the end of the step, after the stats that reflect it are published.
  std::vector<std::pair<uint64_t, ChannelEvent>> emit_tokens_;
  std::vector<KvCacheEvent> kv_events_;  // this step's, handed to cfg_.kv_event_sink
  std::vector<FinishedRequest> emit_finished_;
};

}  // namespace kvw
