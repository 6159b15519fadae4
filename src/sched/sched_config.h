// sched/sched_config.h: the scheduler's knobs (--max-num-batched-tokens, --max-num-seqs,
// --max-model-len, --kv-reserve, --overflow, ...). Plain aggregate; validate() before use.
// Thread safety: immutable after construction.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/status.h"
#include "sched/context_overflow.h"
#include "sched/spec_config.h"

namespace kvw {

enum class KvReservePolicy { kNone, kP95 };
// kSwap: preempt to the swap tier when it has room, else recompute. kRecompute: always recompute.
enum class PreemptionMode { kSwap, kRecompute };

Result<KvReservePolicy> parse_kv_reserve_policy(std::string_view s);  // none|p95
Result<PreemptionMode> parse_preemption_mode(std::string_view s);     // swap|recompute
const char* to_string(KvReservePolicy p);

struct SchedConfig {
  int64_t max_num_batched_tokens = 2048;  // token budget of one step (decodes + prefill chunks)
  int32_t max_num_seqs = 256;             // running requests at most
  int64_t max_model_len = 4096;           // prompt + output tokens at most (clamped to pool size)
  // A prefill takes at most this many tokens per step (0 = only the budget limits it), so a 64k
  // prompt is split into chunks and other requests keep decoding in between.
  int64_t long_prefill_chunk_tokens = 512;
  // Blocks kept spare at admission in addition to KvManagerConfig::watermark_blocks.
  uint32_t watermark_blocks = 0;
  KvReservePolicy kv_reserve = KvReservePolicy::kNone;
  // p95: reserve for P95(observed total lengths) * (1 + margin) per running request.
  double kv_reserve_margin = 0.175;
  // p95 stays off until this many requests finished (no statistics yet).
  int32_t kv_reserve_min_samples = 16;
  PreemptionMode preemption_mode = PreemptionMode::kSwap;
  OverflowPolicy overflow = OverflowPolicy::kError;
  // A request preempted this many times is protected (limits thrashing): it is chosen as a
  // victim only when no unprotected request is left, it sorts ahead in the waiting queue, and it
  // is re-admitted only when the blocks to finish it (prompt + max_tokens) are free too.
  int32_t protect_after_preemptions = 2;
  // Speculative decoding with prompt-lookup drafts (off by default).
  SpecConfig spec;
  // Prompt logprobs (echo + logprobs, prompt_logprobs; --max-prompt-logprob-rows): logit rows
  // one step may give to the prompt positions of such prefills; their chunks are capped to it.
  // Every deployment pays for them in the reserve row. Why 16: 2 MiB of f32 rows at a 32k
  // vocabulary (64 rows, 8 MiB, cost a tight 135 MiB budget a third of its KV blocks), and a
  // 1k-token prompt still prefills in 63 steps.
  int64_t max_prompt_logit_rows = 16;

  // Logit rows a step may need beyond one per sequence: the drafts and the prompt rows.
  int64_t extra_logit_rows() const {
    return spec.max_draft_tokens_per_step() + max_prompt_logit_rows;
  }

  Status validate() const;
};

}  // namespace kvw
