#include "model/seen_tokens.h"

#include <algorithm>

namespace kvw {

void SeenTokens::add(std::span<const int32_t> tokens) {
  if (tokens.size() == 1) return add(tokens[0]);
  // The new distinct ids, sorted, in per-thread scratch (at most a prompt's worth), then merged
  // from the back so that ids_ grows only by what is new.
  thread_local std::vector<int32_t> fresh;
  fresh.assign(tokens.begin(), tokens.end());
  std::sort(fresh.begin(), fresh.end());
  fresh.erase(std::unique(fresh.begin(), fresh.end()), fresh.end());
  fresh.erase(
      std::remove_if(fresh.begin(), fresh.end(),
                     [&](int32_t id) { return std::binary_search(ids_.begin(), ids_.end(), id); }),
      fresh.end());
  if (fresh.empty()) return;
  size_t a = ids_.size(), b = fresh.size();
  ids_.resize(a + b);
  for (size_t out = a + b; b > 0;) {
    ids_[--out] = a > 0 && ids_[a - 1] > fresh[b - 1] ? ids_[--a] : fresh[--b];
  }
}

void SeenTokens::add(int32_t id) {
  auto it = std::lower_bound(ids_.begin(), ids_.end(), id);
  if (it == ids_.end() || *it != id) ids_.insert(it, id);
}

}  // namespace kvw
