#include "grammar/grammar_cache.h"

#include "grammar/byte_dfa.h"

namespace kvw::grammar {
namespace {

void put(std::string* out, uint32_t v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// Map node, list node and the Entry's control blocks: what an entry holds beyond its parts.
constexpr size_t kEntryOverhead = 256;

}  // namespace

std::string grammar_content_key(const Grammar& g) {
  std::string k;
  k.reserve(g.elems.size() * 5 + g.rules.size() * 16 + g.char_classes.size() * 24 + 16);
  k.push_back(g.dfa ? 'D' : 'M');
  put(&k, g.root);
  put(&k, (uint32_t)g.elems.size());
  for (const Elem& e : g.elems) {
    k.push_back((char)e.op);
    put(&k, e.arg);
  }
  put(&k, (uint32_t)g.rules.size());
  for (const Rule& r : g.rules) {
    put(&k, (uint32_t)r.name.size());
    k += r.name;
    put(&k, (uint32_t)r.alts.size());
    for (uint32_t a : r.alts) put(&k, a);
  }
  put(&k, (uint32_t)g.char_classes.size());
  for (const CharClass& c : g.char_classes) {
    k.push_back(c.negated ? 'N' : 'P');
    put(&k, (uint32_t)c.ranges.size());
    for (const auto& [lo, hi] : c.ranges) put(&k, lo), put(&k, hi);
  }
  return k;
}

GrammarCache::GrammarCache(std::shared_ptr<const TokenTrie> trie, size_t max_bytes)
    : trie_(std::move(trie)), max_bytes_(max_bytes) {}

GrammarCache::Entry GrammarCache::build(std::shared_ptr<const Grammar> g,
                                        size_t mask_cache_bytes) const {
  Entry e;
  if (g->dfa) {
    e.dfa_masks = std::make_shared<DfaMaskCache>(g->dfa, trie_, mask_cache_bytes);
    // The first step of every request starts here: one walk (~0.5 ms at 152k) off the engine.
    (void)e.dfa_masks->get(ByteDfa::kStart);
  } else {
    // Entries still from a key's second sighting: computing at the first (keys recur across
    // requests) made a lone request's first tokens 2-4x slower (states of several stacks).
    e.context_masks = std::make_shared<ContextMaskCache>(g, trie_, mask_cache_bytes);
  }
  e.grammar = std::move(g);
  return e;
}

GrammarCache::Entry GrammarCache::get(std::shared_ptr<const Grammar> g, size_t mask_cache_bytes) {
  if (!g) return {};
  if (max_bytes_ == 0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.num_misses;
    }
    return build(std::move(g), mask_cache_bytes);
  }
  std::string key = grammar_content_key(*g);
  put(&key, (uint32_t)(mask_cache_bytes >> 10));  // caches of another size are other entries
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      ++stats_.num_hits;
      lru_.splice(lru_.end(), lru_, it->second.pos);
      return it->second.entry;
    }
    ++stats_.num_misses;
  }
  const size_t charge = key.size() + g->size_bytes() + mask_cache_bytes + kEntryOverhead;
  Entry e = build(std::move(g), mask_cache_bytes);  // refinement, start mask: unlocked
  std::lock_guard<std::mutex> lock(mu_);
  if (charge > max_bytes_) {
    ++stats_.num_too_large;
    return e;
  }
  auto [it, fresh] = map_.try_emplace(std::move(key));
  if (!fresh) return it->second.entry;  // another request built it meanwhile
  while (bytes_ + charge > max_bytes_ && !lru_.empty()) {
    auto old = map_.find(*lru_.front());
    bytes_ -= old->second.bytes;
    lru_.pop_front();
    map_.erase(old);
    ++stats_.num_evicted;
  }
  it->second = Slot{.entry = e, .bytes = charge, .pos = lru_.insert(lru_.end(), &it->first)};
  bytes_ += charge;
  return e;
}

GrammarCache::Stats GrammarCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.num_entries = map_.size();
  s.bytes = bytes_;
  return s;
}

}  // namespace kvw::grammar
