// kvsim/sim.h: replays a workload against one KV allocator (paged KvManager or the contiguous
// baseline) under a byte budget, without running a model, and records what memory did.
// Pure computation over its inputs: same requests + config -> same result. Not thread-safe.
//
// Semantics (one call = one allocator, one run):
// - Time advances in steps of `step_s`. Each step every running sequence computes KV for the
//   tokens it has not computed yet, at most max_num_batched_tokens across the step, oldest
//   sequence first: a sequence whose known tokens (prompt + generated) are all computed except
//   the newest decodes 1 token; one with more left prefills a chunk. When a sequence's known
//   tokens are all computed it samples its next token; it finishes after output_tokens.
//   With nothing running or waiting, time jumps to the next arrival (idle steps are not counted).
// - Arrivals join a FIFO queue; a multi-turn round arrives `think` seconds after its previous
//   round finished, so the slower allocator also receives later rounds later.
// - Admission: the queue head is admitted while max_num_seqs and the token budget allow and the
//   allocator accepts it; the queue is strict FIFO (head-of-line blocking, as in vLLM).
//   Paged: prefix cache on; admission needs blocks for the uncached part plus a watermark;
//   blocks are allocated as tokens are computed; when a running sequence cannot get a block the
//   newest running sequence is preempted (KV freed, recomputed later, queued at the front).
//   Contiguous: admission reserves max_model_len tokens (or prompt + output with
//   reserve_request_max) first-fit in a byte arena; if no hole fits, the request waits. It never
//   needs to preempt, and it has no prefix cache.
// - Requests longer than max_model_len, or that could never fit the budget, are rejected.
// - Utilisation = KV tokens held by running sequences / capacity in tokens (budget / bytes per
//   token). A step is "saturated" when memory was the binding limit: the queue head was refused
//   by the allocator or a running sequence was preempted (steps limited only by the token budget,
//   e.g. the ramp-up after a burst, are not).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/kv_dtype.h"
#include "core/status.h"
#include "kvsim/workload.h"

namespace kvw::kvsim {

// What a token of KV costs: 2 (K and V) x layers x kv heads x head_dim x dtype bytes.
struct ModelShape {
  std::string name = "small";  // preset name or "custom"
  uint32_t num_layers = 16;
  uint32_t num_kv_heads = 4;
  uint32_t head_dim = 64;
  KvDtype dtype = KvDtype::kF16;
  uint64_t kv_bytes_per_token() const {
    return 2ull * num_layers * num_kv_heads * kv_row_bytes(dtype, static_cast<int32_t>(head_dim));
  }
};

// Presets: small (the default), llama-3-8b, llama-3-70b, mistral-7b, qwen2-7b.
Result<ModelShape> model_shape_preset(std::string_view name);

struct SimConfig {
  uint64_t kv_budget_bytes = 512ull << 20;  // the same budget for both allocators
  ModelShape shape;
  uint32_t block_size = 16;                // paged: tokens per block
  uint32_t max_model_len = 16384;          // longest prompt + output; contiguous reservation
  uint32_t max_num_batched_tokens = 2048;  // tokens computed per step across sequences
  uint32_t max_num_seqs = 256;             // running sequences at most
  double watermark = 0.01;                 // paged: fraction of blocks admission leaves free
  double step_s = 0.025;                   // simulated seconds per step
  uint64_t max_steps = 400000;             // stops a run that would not end
  uint32_t max_samples = 1200;             // time-series points kept (evenly spaced steps)
  bool prefix_caching = true;              // paged only
  bool reserve_request_max = false;        // contiguous: reserve prompt + output, not max_model_len
  Status validate() const;
  uint64_t capacity_tokens() const { return kv_budget_bytes / shape.kv_bytes_per_token(); }
};

enum class AllocatorKind { kPaged, kContiguous };
std::string_view allocator_name(AllocatorKind k);

// State at the end of one step.
struct Sample {
  double time_s = 0;
  uint32_t num_running = 0;
  uint32_t num_waiting = 0;
  bool saturated = false;    // memory refused an admission or forced a preemption this step
  double utilisation = 0;    // KV tokens held / capacity tokens
  double reserved = 0;       // capacity taken by allocations (blocks or reservations) / capacity
  double fragmentation = 0;  // (free - largest contiguous free run) / free
};

struct SimResult {
  AllocatorKind kind = AllocatorKind::kPaged;
  uint64_t capacity_tokens = 0;
  uint64_t num_requests = 0;
  uint64_t num_finished = 0;
  uint64_t num_rejected = 0;    // could never be served (too long for max_model_len or budget)
  uint64_t num_unfinished = 0;  // still queued or running when max_steps ran out
  uint64_t num_preemptions = 0;
  uint64_t num_steps = 0;
  uint64_t num_saturated_steps = 0;
  uint64_t computed_tokens = 0;  // prefill + decode tokens computed, recompute included
  uint32_t peak_running = 0;
  uint32_t peak_waiting = 0;
  double mean_running = 0;       // over all steps
  double sustained_running = 0;  // over saturated steps (all steps if none)
  double mean_utilisation = 0;
  double saturated_utilisation = 0;  // mean over saturated steps
  double min_saturated_utilisation = 0;
  double mean_fragmentation = 0;
  double mean_queue_wait_s = 0;  // first admission - arrival, over admitted requests
  double end_time_s = 0;
  uint64_t prefix_queried_tokens = 0;
  uint64_t prefix_hit_tokens = 0;
  double prefix_hit_rate = 0;  // hit tokens / queried tokens (0 when nothing queried)
  std::vector<Sample> samples;
};

SimResult simulate(const std::vector<SimRequest>& requests, const SimConfig& config,
                   AllocatorKind kind);

}  // namespace kvw::kvsim
