// engine/queues.h: the two thread boundaries of the engine. RequestQueue carries submissions and
// cancellations from client (HTTP) threads to the engine thread (bounded MPSC: a full queue is
// back-pressure, never growth); TokenChannel carries one request's tokens and its end back to
// the client (bounded by max_tokens + the final event).
// Thread safety: every method is thread-safe; all mutex/condvar code of the engine lives here.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/gen_sampling.h"
#include "sched/request.h"

namespace kvw {

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, each in [0, n_vocab)
  int32_t max_tokens = 16;      // output tokens at most (>= 1)
  GenSampling sampling;
  bool ignore_eos = false;           // keep generating past end-of-generation tokens
  std::vector<int64_t> turn_starts;  // chat turn offsets (sliding-window overflow only)
};

// What the client reads: tokens in order, then exactly one final event.
struct ChannelEvent {
  enum class Kind { kToken, kFinished };
  Kind kind = Kind::kToken;
  int32_t token_id = 0;                       // kToken
  FinishReason reason = FinishReason::kNone;  // kFinished
  std::string error;                          // kFinished with kError: what went wrong
};

// One request's output stream. Producer: the engine thread; consumer: one client thread.
class TokenChannel {
 public:
  TokenChannel(uint64_t request_id, int32_t max_tokens);
  uint64_t request_id() const { return request_id_; }

  // Engine side. push_token CHECKs that fewer than max_tokens tokens were pushed and that the
  // channel is not finished; finish() is idempotent (the first reason wins).
  void push_token(int32_t token_id);
  void finish(FinishReason reason, std::string error = {});

  // Client side. next() blocks until an event is available; after the kFinished event it keeps
  // returning that event. next_for() returns nullopt on timeout.
  ChannelEvent next();
  std::optional<ChannelEvent> next_for(std::chrono::milliseconds timeout);
  bool finished() const;

  // Blocks until finished; returns every token not yet read and the final event.
  struct Collected {
    std::vector<int32_t> tokens;
    FinishReason reason = FinishReason::kNone;
    std::string error;
  };
  Collected collect();

 private:
  std::optional<ChannelEvent> pop_locked();

  const uint64_t request_id_;
  const int32_t max_tokens_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int32_t> tokens_;  // unread tokens, at most max_tokens_
  int32_t num_pushed_ = 0;
  bool finished_ = false;
  ChannelEvent final_;
};

// A submission on its way to the engine thread. The channel is shared: the client holds it to
// read, the engine to write, and either may finish first (hence shared_ptr).
struct PendingRequest {
  uint64_t request_id = 0;
  GenerationRequest request;
  std::shared_ptr<TokenChannel> channel;
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
};

// Engine figures, published once per step by the engine thread (counters are cumulative).
struct EngineStats {
  uint64_t num_steps = 0;             // steps that ran a forward
  uint64_t num_generated_tokens = 0;  // sampled tokens emitted to channels
  uint64_t num_numerics_errors = 0;   // requests ended by the NaN/Inf guard
  uint64_t num_rejected = 0;          // requests refused by the scheduler (bad input)
  uint64_t num_finished = 0;          // requests ended for any reason
  uint64_t num_preemptions = 0;
  uint64_t num_swap_outs = 0;
  uint64_t num_swap_ins = 0;
  uint32_t num_blocks = 0;              // KV pool
  uint32_t num_allocatable_blocks = 0;  // free + evictable cached
  size_t num_kv_sequences = 0;          // sequences holding blocks (resident or swapped)
  size_t num_running = 0;
  size_t num_waiting = 0;
  uint64_t schedule_ns = 0;  // time inside Scheduler::schedule + update_from_output
  uint64_t forward_ns = 0;   // time inside Model::forward
  uint64_t sample_ns = 0;    // numerics guard + sampling
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
