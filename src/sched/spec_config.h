// sched/spec_config.h: speculative decoding knobs (--spec-ngram, --spec-max-draft,
// --spec-ngram-max/-min, or vLLM's --speculative-config JSON) and the per-step counters that
// /metrics exports under vLLM's names. Plain aggregates; immutable after start-up.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace kvw {

// Longest draft a sequence may propose in one step (bounds the per-position counters).
inline constexpr int32_t kMaxSpecDraftTokens = 16;

// Prompt-lookup (n-gram) drafts: the sequence's own tokens propose the next ones, the target
// verifies them in the same forward pass (no draft model).
struct SpecConfig {
  bool enabled = false;                // --spec-ngram
  int32_t num_speculative_tokens = 4;  // --spec-max-draft: draft length k at most
  int32_t prompt_lookup_max = 4;       // --spec-ngram-max: longest n-gram matched
  int32_t prompt_lookup_min = 2;       // --spec-ngram-min: shortest n-gram matched
  // Sequences that may carry drafts in one step: bounds the extra logit rows the engine sizes
  // at start-up (max_seqs x num_speculative_tokens f32 rows of n_vocab, a budget row).
  int32_t max_seqs = 16;
  // --draft-model (or --speculative-config's "model"): a GGUF file with the target's vocabulary
  // that drafts instead of prompt lookup (engine/draft_model_proposer.h). Empty: prompt lookup.
  std::string draft_model;

  // Draft tokens one step may carry at most (0 when off): the engine's extra logit rows.
  int64_t max_draft_tokens_per_step() const {
    return enabled ? int64_t(max_seqs) * num_speculative_tokens : 0;
  }
  Status validate() const;  // messages name the flag
};

// Cumulative; vLLM's spec_decode_* counters.
struct SpecCounters {
  uint64_t num_drafts = 0;           // sequence-steps that carried drafts
  uint64_t num_draft_tokens = 0;     // tokens drafted
  uint64_t num_accepted_tokens = 0;  // drafted tokens the target accepted
  // [i]: drafts whose token at position i (0-based) was accepted.
  std::array<uint64_t, kMaxSpecDraftTokens> num_accepted_tokens_per_pos{};
};

}  // namespace kvw
