// server/request_holdings.h: what one generation request holds from its submission to the
// last byte of its answer, as an upper bound computed from the parsed request before any
// engine work, so its request-memory lease (http::ByteLease) covers it for as long as it is
// held (issue 30). Also the bounds on the fields whose cost has no other limit.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "server/openai_request.h"

namespace kvw::server {

// Bounds refused with 400 naming the parameter before any work.
inline constexpr uint64_t kMaxStopBytes = 4096;          // all `stop` strings together
inline constexpr size_t kMaxLogitBiasEntries = 1024;     // distinct token ids in `logit_bias`
inline constexpr size_t kMaxStopTokenIds = 1024;         // distinct ids in `stop_token_ids`
inline constexpr uint64_t kMaxLogprobRecords = 1 << 20;  // n x max_tokens x (1 + top_logprobs)

// One prompt of the request as it will be submitted (n choices each).
struct PromptShape {
  int64_t num_tokens = 0;
  int64_t num_turn_starts = 0;
  int64_t max_tokens = 0;
};

// What the tokenizer adds to every request. What a stream queues for its socket (user space
// and the kernel's send buffer) is not here: the budget table's `request` row sets aside
// 2 x --stream-buffer-bytes per open stream (planner/engine_budget.h request_row_bytes).
struct HoldingLimits {
  int64_t max_token_bytes = 1;  // the most text bytes one token decodes to
  int64_t n_vocab = INT32_MAX;  // caps the distinct tokens a sequence can hold
};

// Per choice, beyond what scales with tokens: the runner, channel, decoder, the engine's
// request and sequence state (request_holdings_test checks the server's share against it).
inline constexpr uint64_t kChoiceFixedBytes = 2048;
// One logprob record held for a non-streamed answer (server/choice_runner.h TokenInfo) and each
// top alternative in it, heap chunk overhead included.
inline constexpr uint64_t kTokenRecordBytes = 56;
inline constexpr uint64_t kTopLogprobBytes = 8;

struct Holdings {
  uint64_t shared = 0;   // one copy for the request: stop strings, logit_bias, prompt ids, turns
  uint64_t choices = 0;  // every choice: engine output ids, runner
  uint64_t answer = 0;   // non-streamed: text and logprob records, and the part being written
  uint64_t total() const { return shared + choices + answer; }
};

Holdings request_holdings(const GenParams& p, std::span<const PromptShape> prompts,
                          const HoldingLimits& lim);

// n x max_tokens x (1 + top_logprobs) over the prompts; 0 without logprobs.
uint64_t num_logprob_records(const GenParams& p, std::span<const PromptShape> prompts);

struct ServerState;
// The limits of this server (its tokenizer).
HoldingLimits holding_limits(const ServerState& st);

// The bounds that need only the parsed fields: stop bytes, logit_bias entries, stop_token_ids,
// and logprob
// records when max_tokens is given (`num_prompts` prompts of n choices).
std::optional<ApiError> check_field_bounds(const GenParams& p, size_t num_prompts);
// The logprob-record bound once each prompt's max_tokens is known.
std::optional<ApiError> check_logprob_records(const GenParams& p,
                                              std::span<const PromptShape> prompts);

}  // namespace kvw::server
