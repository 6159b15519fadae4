#include "grammar/dfa_mask_cache.h"

#include <cstring>
#include <unordered_set>

#include "grammar/token_walk.h"

namespace kvw::grammar {

DfaMaskCache::DfaMaskCache(std::shared_ptr<const ByteDfa> dfa,
                           std::shared_ptr<const TokenTrie> trie, size_t max_bytes)
    : dfa_(std::move(dfa)), trie_(std::move(trie)), max_bytes_(max_bytes) {
  refine(trie_->max_depth());
  classes_ = ClassTrie::build(*dfa_, *trie_, max_bytes_ / 4);
  fixed_bytes_ = class_.capacity() * 4 + (classes_ ? classes_->memory_bytes() : 0);
  bytes_ = fixed_bytes_;
}

// Moore's partition refinement, stopped after max_rounds: round r splits states that some
// string of r bytes leads one to a dead state and the other not. After max_depth rounds (or
// once no class splits) two states in one class allow exactly the same trie tokens.
void DfaMaskCache::refine(uint32_t max_rounds) {
  const uint32_t n = dfa_->num_states(), nc = dfa_->num_classes();
  const size_t width = nc + 1u;
  class_.assign(n, 1);
  class_[ByteDfa::kDead] = 0;
  num_classes_ = n > 1 ? 2 : 1;
  const uint64_t per_round = (uint64_t)n * width;
  if (per_round * max_rounds > kMaxRefineSteps) {
    // Too big to refine within the limit: one class per state.
    for (uint32_t s = 0; s < n; ++s) class_[s] = s;
    num_classes_ = n;
    return;
  }
  // sig[s] = (class of s, class after each byte class): equal rows stay together.
  std::vector<uint32_t> sig((size_t)n * width);
  std::vector<uint32_t> next(n);
  const uint32_t* rows = sig.data();
  auto hash = [&](uint32_t s) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < width; ++i) h = (h ^ rows[s * width + i]) * 1099511628211ull;
    return (size_t)h;
  };
  auto equal = [&](uint32_t a, uint32_t b) {
    return std::memcmp(rows + a * width, rows + b * width, width * 4) == 0;
  };
  for (uint32_t round = 0; round < max_rounds; ++round) {
    for (uint32_t s = 0; s < n; ++s) {
      uint32_t* row = sig.data() + (size_t)s * width;
      row[0] = class_[s];
      for (uint32_t c = 0; c < nc; ++c) row[1 + c] = class_[dfa_->next_by_class(s, c)];
    }
    std::unordered_set<uint32_t, decltype(hash), decltype(equal)> reps(2 * n, hash, equal);
    uint32_t count = 0;
    for (uint32_t s = 0; s < n; ++s) {  // the dead state comes first and keeps class 0
      auto [it, fresh] = reps.insert(s);
      next[s] = fresh ? count++ : next[*it];
    }
    const bool stable = count == num_classes_;
    class_.swap(next);
    num_classes_ = count;
    if (stable) break;  // no class split: further rounds change nothing
  }
}

std::shared_ptr<const DfaMaskCache::Mask> DfaMaskCache::get(uint32_t state) {
  if (state == ByteDfa::kDead || state >= class_.size()) return nullptr;
  const uint32_t c = class_[state];
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = masks_.find(c);
    if (it != masks_.end()) {
      ++num_hits_;
      return it->second;
    }
    ++num_misses_;
  }
  const size_t words = ((size_t)trie_->n_vocab() + 63) / 64;
  const size_t mask_bytes = words * 8 + 64;
  if (mask_bytes + fixed_bytes_ > max_bytes_) return nullptr;
  auto m = std::make_shared<Mask>(words, 0);
  thread_local std::vector<uint32_t> walk;
  if (classes_) {
    classes_->walk(*dfa_, state, &walk, m->data());
  } else {
    walk_trie_dfa(*dfa_, *trie_, state, /*strip_space=*/false, &walk, m->data());
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, fresh] = masks_.emplace(c, m);
  if (!fresh) return it->second;  // another thread computed it meanwhile
  bytes_ += mask_bytes;
  order_.push_back(c);
  while (bytes_ > max_bytes_ && order_.size() > 1) {
    masks_.erase(order_.front());
    order_.pop_front();
    bytes_ -= mask_bytes;
  }
  return m;
}

size_t DfaMaskCache::memory_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_ + sizeof(*this);
}

uint64_t DfaMaskCache::num_hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_hits_;
}

uint64_t DfaMaskCache::num_misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_misses_;
}

}  // namespace kvw::grammar
