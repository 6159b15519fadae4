#include "sched/context_overflow.h"

#include <string>

namespace kvw {

Result<OverflowPolicy> parse_overflow_policy(std::string_view s) {
  if (s == "error") return OverflowPolicy::kError;
  if (s == "truncate-left") return OverflowPolicy::kTruncateLeft;
  if (s == "sliding-window") return OverflowPolicy::kSlidingWindow;
  return Error{"--overflow: unknown policy '" + std::string(s) +
               "' (expected error, truncate-left or sliding-window)"};
}

const char* to_string(OverflowPolicy p) {
  switch (p) {
    case OverflowPolicy::kError:
      return "error";
    case OverflowPolicy::kTruncateLeft:
      return "truncate-left";
    case OverflowPolicy::kSlidingWindow:
      return "sliding-window";
  }
  return "?";
}

namespace {

std::string too_long(size_t n, int64_t limit, int64_t max_model_len) {
  return "prompt has " + std::to_string(n) + " tokens, limit " + std::to_string(limit) +
         " (max_model_len " + std::to_string(max_model_len) + " leaves room for >= 1 output token)";
}

Status check_turns(std::span<const int64_t> turn_starts, size_t n) {
  if (turn_starts.empty()) {
    return Error{"--overflow sliding-window needs the chat turn boundaries; none were given"};
  }
  if (turn_starts[0] != 0) return Error{"turn_starts must begin at 0"};
  for (size_t i = 1; i < turn_starts.size(); ++i) {
    if (turn_starts[i] <= turn_starts[i - 1] || turn_starts[i] >= static_cast<int64_t>(n)) {
      return Error{"turn_starts must be strictly increasing offsets inside the prompt"};
    }
  }
  return Status::ok_status();
}

// Keeps turn 0 plus the newest whole turns that fit in `limit` tokens.
Result<FittedPrompt> slide(std::span<const int32_t> prompt, std::span<const int64_t> turns,
                           int64_t limit, int64_t max_model_len) {
  KVW_RETURN_IF_ERROR(check_turns(turns, prompt.size()));
  const int64_t n = static_cast<int64_t>(prompt.size());
  auto turn_end = [&](size_t i) { return i + 1 < turns.size() ? turns[i + 1] : n; };
  const int64_t system_len = turn_end(0);
  int64_t used = system_len;
  size_t first_kept = turns.size();  // newest turns [first_kept, turns.size()) are kept
  while (first_kept > 1) {
    const int64_t len = turn_end(first_kept - 1) - turns[first_kept - 1];
    if (used + len > limit) break;
    used += len;
    --first_kept;
  }
  if (first_kept == turns.size()) {
    return Error{too_long(prompt.size(), limit, max_model_len) +
                     "; sliding-window: the system prompt plus the last turn do not fit",
                 ErrorKind::kContextOverflow};
  }
  FittedPrompt f;
  f.tokens.assign(prompt.begin(), prompt.begin() + system_len);
  f.turn_starts.push_back(0);
  for (size_t i = first_kept; i < turns.size(); ++i) {
    f.turn_starts.push_back(static_cast<int64_t>(f.tokens.size()));
    f.tokens.insert(f.tokens.end(), prompt.begin() + turns[i], prompt.begin() + turn_end(i));
  }
  f.num_dropped_tokens = n - static_cast<int64_t>(f.tokens.size());
  return f;
}

}  // namespace

Result<FittedPrompt> fit_prompt(std::span<const int32_t> prompt,
                                std::span<const int64_t> turn_starts, int64_t max_prompt_tokens,
                                int64_t max_model_len, OverflowPolicy policy) {
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n <= max_prompt_tokens) {
    return FittedPrompt{.tokens = {prompt.begin(), prompt.end()},
                        .turn_starts = {turn_starts.begin(), turn_starts.end()}};
  }
  switch (policy) {
    case OverflowPolicy::kError:
      return Error{too_long(prompt.size(), max_prompt_tokens, max_model_len) +
                       "; use --overflow truncate-left or sliding-window to shorten it",
                   ErrorKind::kContextOverflow};
    case OverflowPolicy::kTruncateLeft: {
      const int64_t cut = n - max_prompt_tokens;
      FittedPrompt f{.tokens = {prompt.begin() + cut, prompt.end()},
                     .turn_starts = {},
                     .num_dropped_tokens = cut};
      for (int64_t t : turn_starts) {
        if (t >= cut) f.turn_starts.push_back(t - cut);
      }
      return f;
    }
    case OverflowPolicy::kSlidingWindow:
      return slide(prompt, turn_starts, max_prompt_tokens, max_model_len);
  }
  return Error{"unknown overflow policy"};
}

}  // namespace kvw
