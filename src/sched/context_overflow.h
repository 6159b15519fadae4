// sched/context_overflow.h: what add_request does with a prompt longer than the context limit
// (issue 4, section 4). Pure functions over token ids and turn offsets; no state.
// Thread safety: none needed (pure).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvw {

enum class OverflowPolicy { kError, kTruncateLeft, kSlidingWindow };

Result<OverflowPolicy> parse_overflow_policy(
    std::string_view s);  // error|truncate-left|sliding-window
const char* to_string(OverflowPolicy p);

struct FittedPrompt {
  std::vector<int32_t> tokens;
  std::vector<int64_t> turn_starts;  // offsets into `tokens` (empty when none were given)
  int64_t num_dropped_tokens = 0;
};

// Returns the prompt unchanged when prompt.size() <= max_prompt_tokens. Otherwise:
//   kError:         Error "prompt has 9000 tokens, limit 8191 (max_model_len 8192); ..."
//   kTruncateLeft:  the newest max_prompt_tokens tokens (turn offsets shifted, cut ones dropped)
//   kSlidingWindow: turn 0 (the system prompt) plus the newest whole turns that fit, never a
//                   partial turn; Error when turn_starts is empty/invalid or turn 0 plus the last
//                   turn does not fit.
// max_model_len appears only in messages.
Result<FittedPrompt> fit_prompt(std::span<const int32_t> prompt,
                                std::span<const int64_t> turn_starts, int64_t max_prompt_tokens,
                                int64_t max_model_len, OverflowPolicy policy);

}  // namespace kvw
