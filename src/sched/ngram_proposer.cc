#include "sched/ngram_proposer.h"

#include <algorithm>

namespace kvw {

int32_t propose_ngram_draft(std::span<const int32_t> tokens, int32_t ngram_min, int32_t ngram_max,
                            int32_t k, std::vector<int32_t>* draft) {
  draft->clear();
  const int64_t size = static_cast<int64_t>(tokens.size());
  if (k <= 0) return 0;
  for (int64_t n = std::min<int64_t>(ngram_max, size - 1); n >= std::max(1, ngram_min); --n) {
    const int32_t* suffix = tokens.data() + size - n;
    // Most recent first: the nearest context is the likeliest to continue the same way.
    for (int64_t i = size - n - 1; i >= 0; --i) {
      if (tokens[(size_t)i + (size_t)n - 1] != suffix[n - 1]) continue;  // cheap reject
      if (!std::equal(suffix, suffix + n, tokens.data() + i)) continue;
      const int64_t from = i + n;
      const int64_t to = std::min<int64_t>(from + k, size);
      draft->assign(tokens.begin() + from, tokens.begin() + to);
      return static_cast<int32_t>(draft->size());
    }
  }
  return 0;
}

}  // namespace kvw
