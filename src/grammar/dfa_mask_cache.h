// grammar/dfa_mask_cache.h: token masks of a regular grammar (ByteDfa), computed once per
// class of DFA states and shared by the request's sequences. A mask depends only on which
// strings of at most max_depth bytes (the longest token) stay live from a state, so states that
// agree on those (bounded Moore refinement, computed at construction) share one mask: the
// positions of a counted repetition (`(...){1,50}`) fold onto a few classes, and a step whose
// class was seen costs a pointer, not a walk of the whole trie (~0.5 ms at 152k tokens).
// A first visit walks the trie folded by the DFA's byte classes (class_trie.h) when it folds.
// Owner: shared by the sequences of one request (shared_ptr); thread-safe (one mutex around
// the map; masks are computed outside it). Bounded by max_bytes, oldest masks evicted.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "grammar/byte_dfa.h"
#include "grammar/class_trie.h"
#include "grammar/token_trie.h"

namespace kvw::grammar {

class DfaMaskCache {
 public:
  using Mask = std::vector<uint64_t>;  // [n_vocab / 64] bitset of the trie tokens allowed

  // Refinement work is capped at kMaxRefineSteps (state x class x round visits, ~50 ms);
  // past it each state is its own class (still cached, only less shared).
  static constexpr uint64_t kMaxRefineSteps = 1ull << 25;

  // Runs the refinement and folds the trie (within max_bytes / 4), on the caller's thread: the
  // HTTP thread that compiled the grammar.
  DfaMaskCache(std::shared_ptr<const ByteDfa> dfa, std::shared_ptr<const TokenTrie> trie,
               size_t max_bytes);

  // The trie tokens allowed from `state` (no stripped leading space; end-of-generation and
  // control tokens are the caller's). Computed on first use; null for the dead state or when
  // one mask would not fit in max_bytes (the caller then walks the trie itself).
  // shared_ptr: a sequence keeps using a mask another thread has just evicted.
  std::shared_ptr<const Mask> get(uint32_t state);

  // Classes of states with equal masks (== num_states when refinement was cut short).
  uint32_t num_classes() const { return num_classes_; }
  uint32_t class_of(uint32_t state) const { return class_[state]; }
  size_t memory_bytes() const;  // masks held now plus the class table and folded trie
  bool folded() const { return classes_ != nullptr; }  // masks walk the class trie
  uint64_t num_hits() const;
  uint64_t num_misses() const;

 private:
  void refine(uint32_t max_rounds);

  std::shared_ptr<const ByteDfa> dfa_;
  std::shared_ptr<const TokenTrie> trie_;
  const size_t max_bytes_;
  std::vector<uint32_t> class_;               // [num_states] mask class; the dead state is class 0
  std::unique_ptr<const ClassTrie> classes_;  // null: masks walk the byte trie
  size_t fixed_bytes_ = 0;                    // class_ and classes_
  uint32_t num_classes_ = 0;
  mutable std::mutex mu_;
  std::unordered_map<uint32_t, std::shared_ptr<const Mask>> masks_;  // by class; guarded by mu_
  std::deque<uint32_t> order_;                                       // FIFO eviction
  size_t bytes_ = 0;
  uint64_t num_hits_ = 0, num_misses_ = 0;
};

}  // namespace kvw::grammar
