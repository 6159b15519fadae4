// grammar/token_mask_apply.h: a token bitset applied to a row of logits: every token whose bit
// is clear becomes -inf. One pass over the row, 16 logits per instruction on AVX-512 (a
// per-bit loop over ~90k disallowed tokens took ~0.1 ms at 152k), chosen once from CPUID.
// Pure function; thread-safe.
#pragma once

#include <cstdint>

namespace kvw::grammar {

// bits: [ceil(n_vocab / 64)] words, bit i of word i / 64 = token i allowed; bits past n_vocab
// are ignored. Returns whether any token in [0, n_vocab) is allowed.
bool apply_token_mask(const uint64_t* bits, int32_t n_vocab, float* logits);

}  // namespace kvw::grammar
