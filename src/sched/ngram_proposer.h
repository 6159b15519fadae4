// sched/ngram_proposer.h: prompt-lookup drafts for speculative decoding. The sequence's own
// tokens (prompt + output) are the draft model: the last n tokens are looked up earlier in the
// sequence and the tokens that followed their most recent earlier occurrence are proposed.
// Pure function over token ids (no model); thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/token_span.h"

namespace kvw {

// For n from ngram_max down to ngram_min (longer matches predict better): finds the most recent
// i < size - n with tokens[i, i + n) == the last n tokens, and writes tokens[i + n, i + n + k)
// (fewer when the sequence ends first) to *draft. Returns the draft length; 0 (draft empty)
// when no n-gram recurs. O(size x ngram_max) compares at worst: ~0.1 ms at 32k tokens, small
// next to a decode step.
//   tokens  a b c d a b c   (n = 3: "a b c" recurs at 0) -> draft d a b c for k >= 4
int32_t propose_ngram_draft(TokenSpan tokens, int32_t ngram_min, int32_t ngram_max, int32_t k,
                            std::vector<int32_t>* draft);

}  // namespace kvw
