#include "grammar/context_mask_cache.h"

#include <algorithm>

#include "grammar/matcher.h"
#include "grammar/token_walk.h"

namespace kvw::grammar {

ContextMaskCache::ContextMaskCache(std::shared_ptr<const Grammar> g,
                                   std::shared_ptr<const TokenTrie> trie, size_t max_bytes)
    : g_(std::move(g)), trie_(std::move(trie)), max_bytes_(max_bytes) {}

std::shared_ptr<const ContextMaskCache::Entry> ContextMaskCache::compute(
    std::span<const uint32_t> key, bool whole) const {
  Matcher m(g_, key);
  auto e = std::make_shared<Entry>();
  e->accepted.assign(((size_t)trie_->n_vocab() + 63) / 64, 0);
  WalkScratch w;
  walk_trie(m, *trie_, m.state(), false, &w, e->accepted.data(), whole ? nullptr : &e->uncertain);
  if (m.overflowed()) return nullptr;
  // The walk visits tokens in byte order, so `uncertain` is sorted already.
  e->lcp.resize(e->uncertain.size());
  for (size_t j = 1; j < e->uncertain.size(); ++j) {
    const std::string_view a = trie_->token_bytes(e->uncertain[j - 1]);
    const std::string_view b = trie_->token_bytes(e->uncertain[j]);
    size_t l = 0;
    while (l < a.size() && l < b.size() && a[l] == b[l]) ++l;
    e->lcp[j] = (uint16_t)std::min<size_t>(l, UINT16_MAX);
  }
  return e;
}

std::shared_ptr<const ContextMaskCache::Entry> ContextMaskCache::get(std::span<const uint32_t> key,
                                                                     bool whole) {
  std::string k(reinterpret_cast<const char*>(key.data()), key.size() * 4);
  k.push_back(whole ? 'W' : 'T');
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(k);
    if (it != map_.end()) {
      ++num_hits_;
      return it->second;
    }
    // Keys met once are kept within 1/8 of the budget (then forgotten all at once).
    if (seen_.emplace(k, 0).second) {
      seen_bytes_ += 2 * k.size() + 32;
      if (seen_bytes_ > max_bytes_ / 8) seen_.clear(), seen_bytes_ = 0;
      return nullptr;
    }
    ++num_misses_;
  }
  auto e = compute(key, whole);
  if (!e || e->bytes() + 2 * k.size() > max_bytes_) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  if (map_.count(k)) return e;          // another thread computed it meanwhile
  bytes_ += e->bytes() + 2 * k.size();  // the key is in the map and the FIFO
  while (bytes_ + seen_bytes_ > max_bytes_ && !order_.empty()) {
    auto old = map_.find(order_.front());
    bytes_ -= old->second->bytes() + 2 * old->first.size();
    map_.erase(old);
    order_.pop_front();
  }
  order_.push_back(k);
  map_.emplace(std::move(k), e);
  return e;
}

size_t ContextMaskCache::memory_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_ + seen_bytes_ + sizeof(*this);
}

uint64_t ContextMaskCache::num_hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_hits_;
}

uint64_t ContextMaskCache::num_misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_misses_;
}

}  // namespace kvw::grammar
