#include "sched/sched_config.h"

#include <string>

#include "sched/request.h"

namespace kvw {

Result<KvReservePolicy> parse_kv_reserve_policy(std::string_view s) {
  if (s == "none") return KvReservePolicy::kNone;
  if (s == "p95") return KvReservePolicy::kP95;
  return Error{"--kv-reserve: unknown policy '" + std::string(s) + "' (expected none or p95)"};
}

Result<PreemptionMode> parse_preemption_mode(std::string_view s) {
  if (s == "swap") return PreemptionMode::kSwap;
  if (s == "recompute") return PreemptionMode::kRecompute;
  return Error{"--preemption-mode '" + std::string(s) + "': use swap or recompute"};
}

const char* to_string(KvReservePolicy p) {
  return p == KvReservePolicy::kP95 ? "p95" : "none";
}

Status SchedConfig::validate() const {
  if (max_num_batched_tokens < 1) return Error{"max_num_batched_tokens must be >= 1"};
  if (max_num_seqs < 1) return Error{"max_num_seqs must be >= 1"};
  if (max_model_len < 2) return Error{"max_model_len must be >= 2"};
  if (long_prefill_chunk_tokens < 0) return Error{"long_prefill_chunk_tokens must be >= 0"};
  if (kv_reserve_margin < 0.0 || kv_reserve_margin > 1.0) {
    return Error{"kv_reserve_margin must be in [0, 1]"};
  }
  if (kv_reserve_min_samples < 1) return Error{"kv_reserve_min_samples must be >= 1"};
  if (protect_after_preemptions < 1) return Error{"protect_after_preemptions must be >= 1"};
  if (max_prompt_logit_rows < 1) return Error{"max_prompt_logit_rows must be >= 1"};
  return spec.validate();
}

Status SpecConfig::validate() const {
  if (!enabled) return Status::ok_status();
  if (num_speculative_tokens < 1 || num_speculative_tokens > kMaxSpecDraftTokens) {
    return Error{"--spec-max-draft (num_speculative_tokens) must be in [1, " +
                 std::to_string(kMaxSpecDraftTokens) + "]"};
  }
  if (prompt_lookup_min < 1 || prompt_lookup_max < prompt_lookup_min) {
    return Error{"--spec-ngram-min (prompt_lookup_min) must be >= 1 and <= --spec-ngram-max"};
  }
  if (max_seqs < 1) return Error{"spec max_seqs must be >= 1"};
  return Status::ok_status();
}

const char* to_string(RequestState s) {
  switch (s) {
    case RequestState::kWaiting:
      return "waiting";
    case RequestState::kRunning:
      return "running";
    case RequestState::kPreemptedSwapped:
      return "preempted-swapped";
    case RequestState::kSwappingIn:
      return "swapping-in";
    case RequestState::kPreemptedRecompute:
      return "preempted-recompute";
    case RequestState::kFinished:
      return "finished";
  }
  return "?";
}

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "?";
}

}  // namespace kvw
