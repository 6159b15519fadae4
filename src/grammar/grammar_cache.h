// grammar/grammar_cache.h: compiled grammars and their mask caches shared across requests, by
// the grammar's content. Every json_object request compiles the same grammar, and applications
// send one schema (or one tool set) request after request; with a cache per request each of
// them paid the first visit of every state again (a trie walk: ~0.5 ms through a DFA, 5-14 ms
// through the matcher at 152k tokens) and a regular grammar's class refinement (2-18 ms).
// Here a request whose grammar was seen gets the very Grammar object (the masks' positions
// refer to it) and mask cache the earlier requests filled.
// Bounded by max_bytes: an entry is charged its key, its grammar and its mask cache's limit
// (what the cache may grow to), least recently used evicted first; a request keeps what it
// holds after an eviction. Owner: ServerState; thread-safe (one mutex around the map; entries
// are built outside it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "grammar/context_mask_cache.h"
#include "grammar/dfa_mask_cache.h"
#include "grammar/grammar.h"
#include "grammar/token_trie.h"

namespace kvw::grammar {

class GrammarCache {
 public:
  // What a request's sequences use: the grammar and its mask cache (dfa_masks for a regular
  // grammar, context_masks otherwise).
  struct Entry {
    std::shared_ptr<const Grammar> grammar;
    std::shared_ptr<ContextMaskCache> context_masks;
    std::shared_ptr<DfaMaskCache> dfa_masks;
  };
  struct Stats {
    uint64_t num_hits = 0;       // requests whose grammar was cached
    uint64_t num_misses = 0;     // entries built
    uint64_t num_evicted = 0;    // entries dropped to make room
    uint64_t num_too_large = 0;  // entries larger than max_bytes (used once, not kept)
    size_t num_entries = 0;
    size_t bytes = 0;  // charged now, <= max_bytes
  };

  // max_bytes 0: nothing is kept (every request builds its own entry, as before this cache).
  GrammarCache(std::shared_ptr<const TokenTrie> trie, size_t max_bytes);

  // The entry for g's content whose mask cache holds at most mask_cache_bytes. Built on a miss
  // (on the caller's thread: the HTTP thread), with a regular grammar's start mask computed
  // there so that the engine thread's first step finds it. Empty for a null g.
  Entry get(std::shared_ptr<const Grammar> g, size_t mask_cache_bytes);

  Stats stats() const;
  size_t max_bytes() const { return max_bytes_; }
  const std::shared_ptr<const TokenTrie>& trie() const { return trie_; }

 private:
  struct Slot {
    Entry entry;
    size_t bytes = 0;                             // charged to this entry
    std::list<const std::string*>::iterator pos;  // in lru_
  };
  Entry build(std::shared_ptr<const Grammar> g, size_t mask_cache_bytes) const;

  std::shared_ptr<const TokenTrie> trie_;
  const size_t max_bytes_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Slot> map_;  // content key -> entry; guarded by mu_
  std::list<const std::string*> lru_;          // keys of map_, least recently used first
  Stats stats_;  // guarded by mu_ (entries and bytes filled in stats())
  size_t bytes_ = 0;
};

// The grammar's content as bytes: equal for grammars that match alike (rules, positions,
// character classes, root, and whether a DFA came with it). The cache's key.
std::string grammar_content_key(const Grammar& g);

}  // namespace kvw::grammar
