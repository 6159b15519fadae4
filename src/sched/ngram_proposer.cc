#include "sched/ngram_proposer.h"

#include <algorithm>

namespace kvw {

int32_t propose_ngram_draft(TokenSpan tokens, int32_t ngram_min, int32_t ngram_max, int32_t k,
                            std::vector<int32_t>* draft) {
  draft->clear();
  const int64_t size = static_cast<int64_t>(tokens.size());
  if (k <= 0) return 0;
  auto at = [&](int64_t i) { return tokens[static_cast<size_t>(i)]; };
  for (int64_t n = std::min<int64_t>(ngram_max, size - 1); n >= std::max(1, ngram_min); --n) {
    const int64_t suffix = size - n;
    // Most recent first: the nearest context is the likeliest to continue the same way.
    for (int64_t i = size - n - 1; i >= 0; --i) {
      if (at(i + n - 1) != at(suffix + n - 1)) continue;  // cheap reject
      int64_t j = 0;
      while (j < n && at(i + j) == at(suffix + j)) ++j;
      if (j < n) continue;
      const int64_t from = i + n;
      const int64_t to = std::min<int64_t>(from + k, size);
      for (int64_t p = from; p < to; ++p) draft->push_back(at(p));
      return static_cast<int32_t>(draft->size());
    }
  }
  return 0;
}

}  // namespace kvw
