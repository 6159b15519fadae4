// engine/engine_config.h: the engine's start-up knobs (model, threads, --memory-budget, KV
// layout, swap tier, scheduler policies) and the memory-budget parser. Plain aggregate;
// validate() before use. Thread safety: immutable after construction.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/kv_dtype.h"
#include "core/status.h"
#include "kv/kv_events.h"
#include "model/model.h"
#include "sched/sched_config.h"

namespace kvw {
struct StepObservation;
}

namespace kvw {

struct EngineConfig {
  std::string model_path;  // GGUF file
  int n_threads = 0;       // forward worker threads; 0 = all cores
  // --memory-budget, resolved to bytes (parse_memory_budget). 0: no budget; the KV pool is then
  // sized for sched.max_num_seqs sequences of sched.max_model_len tokens.
  uint64_t memory_budget_bytes = 0;
  uint64_t reserve_bytes = uint64_t{64} << 20;  // tokenizer, norms, stacks, allocator slack
  uint64_t request_bytes =
      0;                    // the HTTP front door's row (planner::request_row_bytes); serve sets it
  int32_t block_size = 16;  // tokens per KV block
  KvDtype kv_dtype = KvDtype::kF16;  // any but fp8 (kv_dtype_on_cpu)
  bool enable_prefix_caching = true;
  uint32_t watermark_blocks = 0;  // KvManagerConfig::watermark_blocks
  uint64_t swap_bytes = 0;        // --swap-space; 0 = no swap tier
  std::string swap_path;          // swap file location (needed when swap_bytes > 0)
  // --swa-full: hybrid window models keep full KV in their windowed layers (no window slots).
  bool swa_full = false;
  // --mlock: after the start-up allocations, lock every mapped page (weights included) in RAM.
  bool mlock = false;
  // Memory the start-up allocations may take; 0 = read it (available_memory_bytes()). The
  // engine refuses to start when the KV pool, workspace and buffers it touches exceed it.
  uint64_t available_memory_bytes = 0;
  // --max-num-batched-tokens (also the forward workspace size), --max-num-seqs,
  // --max-model-len, --kv-reserve, --overflow, preemption mode.
  SchedConfig sched;
  float activation_clamp = 0.0f;    // --activation-clamp (ModelOptions); 0 = off
  bool attention_bf16_dot = false;  // --attention-dot bf16 (ModelOptions)
  RopeOverride rope;                // --rope-scaling & co. (ModelOptions)
  // Defragmenter: when the KV pool's fragmentation (free blocks outside the largest free run,
  // as a fraction of free blocks) is above defrag_threshold, move at most defrag_max_moves
  // blocks between steps. 0 = off.
  double defrag_threshold = 0.5;
  uint32_t defrag_max_moves = 64;
  // How often the O(blocks) layout statistics (and so the defragmenter's trigger) refresh.
  int kv_stats_interval_ms = 100;
  size_t request_queue_capacity = 1024;      // submissions waiting for the engine thread
  bool check_invariants_every_step = false;  // tests: KvManager + Scheduler CHECKs each step
  // Called on the engine thread after every step (metrics, traces); empty = none.
  std::function<void(const StepObservation&)> step_observer;
  // Called on the engine thread after a step (or idle tick) with the prefix cache's KV cache
  // events since the last call (kv/kv_events.h), oldest first; never with none. Must not block
  // (src/kv_events queues them for its publisher thread). Empty = events are not recorded.
  std::function<void(std::vector<KvCacheEvent>&&)> kv_event_sink;
  // Tests only (fault injection, issue 30): called on a kernel thread before each request's
  // token is sampled, with its id and max_tokens; what it throws ends that request as a fault
  // would. Empty (the default) costs one branch per sampled row.
  std::function<void(uint64_t request_id, int32_t max_tokens)> sample_fault_hook;
  // Tests only: called on the engine thread before each forward pass once per sequence in it,
  // and before each token event is queued for a request's channel; what it throws fails that
  // pass or that request as a fault in the model or the emission would.
  std::function<void(uint64_t request_id, int32_t max_tokens)> forward_fault_hook;
  std::function<void(uint64_t request_id, int32_t max_tokens)> emit_fault_hook;
  // Tests only: called on the kernel worker threads (not the engine thread) at the start of
  // every phase of a forward pass, once per sequence in the pass; what it throws is a fault in
  // a kernel task (ThreadPool carries it to the engine thread). Needs n_threads > 1.
  std::function<void(uint64_t request_id, int32_t max_tokens)> kernel_fault_hook;
  // Tests only: called on the engine thread before each pass of the draft model (--draft-model)
  // once per sequence in it; what it throws is a fault in the draft's forward pass.
  std::function<void(uint64_t request_id, int32_t max_tokens)> draft_fault_hook;
  // Tests only: called on the engine thread while admitting each request, after the scheduler
  // took it and before the engine's own state for it is made; what it throws is a fault (an
  // allocation failure) in admitting that request.
  std::function<void(uint64_t request_id, int32_t max_tokens)> admit_fault_hook;

  Status validate() const;  // messages name the flag
};

// Parses vLLM's --speculative-config JSON ({"method": "ngram", "num_speculative_tokens": k,
// "prompt_lookup_max": n, "prompt_lookup_min": m}) over `base` (fields not given keep their
// values) and turns speculation on. Errors name the flag: not JSON, another method (draft
// models), unknown keys, values out of range.
Result<SpecConfig> parse_speculative_config(std::string_view text, SpecConfig base = {});

// Parses --memory-budget: bytes ("8589934592"), with a binary suffix ("8G", "512MiB", "1.5GB"
// = GiB), or a percentage ("75%") of min(machine memory, cgroup limit) given as
// `machine_limit_bytes`. Errors name the flag and the text.
Result<uint64_t> parse_memory_budget(std::string_view text, uint64_t machine_limit_bytes);
// The same for the size given to `flag`, whose 0 means "off" ("0", "0MiB"): 0, else as
// parse_memory_budget, its errors naming `flag`.
Result<uint64_t> parse_size_or_off(std::string_view flag, std::string_view text,
                                   uint64_t machine_limit_bytes);

// min(MemTotal of /proc/meminfo, /sys/fs/cgroup/memory.max when it is a number). 0 when neither
// can be read.
uint64_t machine_memory_limit_bytes();

// Pure parts of the above, for tests: MemTotal in bytes from /proc/meminfo text (0 if absent),
// and a cgroup v2 memory.max value (0 for "max" or garbage).
uint64_t parse_meminfo_total(std::string_view meminfo);
// MemAvailable of /proc/meminfo (0 if absent).
uint64_t parse_meminfo_available(std::string_view meminfo);

// What this process may still touch: min(MemAvailable, cgroup memory.max - memory.current when
// limited). 0 when nothing can be read.
uint64_t available_memory_bytes();
uint64_t parse_cgroup_memory_max(std::string_view text);

}  // namespace kvw
