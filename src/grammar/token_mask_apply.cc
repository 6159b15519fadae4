#include "grammar/token_mask_apply.h"

#include <algorithm>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvw::grammar {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Words [begin, end): whole words skip (all allowed) or fill (none); mixed ones clear bit by bit.
bool apply_scalar(const uint64_t* bits, int32_t begin_word, int32_t n_vocab, float* logits) {
  bool any = false;
  for (int32_t w = begin_word; w * 64 < n_vocab; ++w) {
    const int32_t begin = w * 64, end = std::min(n_vocab, begin + 64);
    uint64_t word = bits[w];
    if (end - begin < 64) word &= (uint64_t{1} << (end - begin)) - 1;
    any |= word != 0;
    if (word == 0) {
      std::fill(logits + begin, logits + end, kNegInf);
      continue;
    }
    uint64_t off = ~word;
    if (end - begin < 64) off &= (uint64_t{1} << (end - begin)) - 1;
    for (; off; off &= off - 1) logits[begin + __builtin_ctzll(off)] = kNegInf;
  }
  return any;
}

#if defined(__x86_64__)
// Whole 64-token words with masked moves; the last partial word goes to the scalar loop.
__attribute__((target("avx512f"))) bool apply_avx512(const uint64_t* bits, int32_t n_vocab,
                                                     float* logits) {
  const __m512 ninf = _mm512_set1_ps(kNegInf);
  const int32_t whole = n_vocab / 64;
  uint64_t seen = 0;
  for (int32_t w = 0; w < whole; ++w) {
    const uint64_t word = bits[w];
    seen |= word;
    if (word == ~uint64_t{0}) continue;
    float* x = logits + (size_t)w * 64;
    for (int k = 0; k < 4; ++k) {
      const __mmask16 keep = (__mmask16)(word >> (16 * k));
      // keep ? x : -inf (a masked load of -inf's complement would read the row anyway)
      _mm512_storeu_ps(x + 16 * k, _mm512_mask_loadu_ps(ninf, keep, x + 16 * k));
    }
  }
  const bool tail = apply_scalar(bits, whole, n_vocab, logits);
  return seen != 0 || tail;
}

bool has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}
#endif

}  // namespace

bool apply_token_mask(const uint64_t* bits, int32_t n_vocab, float* logits) {
#if defined(__x86_64__)
  if (has_avx512()) return apply_avx512(bits, n_vocab, logits);
#endif
  return apply_scalar(bits, 0, n_vocab, logits);
}

}  // namespace kvw::grammar
