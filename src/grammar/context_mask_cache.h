// grammar/context_mask_cache.h: per grammar, the tokens a stack allows whatever lies below its
// top few nodes (xgrammar's adaptive token mask cache, own code). A matcher state is a set of
// stacks and its mask is the union of each stack's; a stack's mask is this cache's `accepted`
// bitset for its top kKeyNodes positions, plus whichever of the (few) `uncertain` tokens the
// full stack accepts. Inside a string the key repeats across properties, nesting levels and
// sequences, so a state seen for the first time costs a bitset OR and a short list walk instead
// of a walk of the whole trie (~5 ms at 152k tokens).
// Owner: shared by the sequences of one request (shared_ptr); thread-safe (one mutex around
// the map; entries are computed outside it). Bounded by max_bytes, oldest entries evicted.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/token_trie.h"

namespace kvw::grammar {

class ContextMaskCache {
 public:
  // Top nodes of a stack a key holds. 3 keeps a string's closing quote and what follows it
  // (`",` `"}`) decided inside the key; deeper keys would share less between properties.
  static constexpr size_t kKeyNodes = 3;

  struct Entry {
    std::vector<uint64_t> accepted;  // [n_vocab / 64] bitset: allowed whatever lies below
    std::vector<int32_t> uncertain;  // token ids, sorted by bytes: depend on the stack below
    std::vector<uint16_t> lcp;       // [uncertain] common prefix with the previous one
    size_t bytes() const { return accepted.size() * 8 + uncertain.size() * 6 + 64; }
  };

  ContextMaskCache(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> trie,
                   size_t max_bytes);

  // The entry for a stack whose top positions are `key` (top first; whole = nothing below, so
  // no token is uncertain). A key seen for the first time is only remembered (null): an entry
  // costs a trie walk, which pays only for keys that recur (in a JSON schema's output most
  // states are met once). From the second sighting it is computed. Null also when it cannot be
  // computed within the matcher's limits or is larger than max_bytes. On null the caller walks
  // the trie.
  // shared_ptr: a sequence keeps using an entry another thread has just evicted.
  std::shared_ptr<const Entry> get(std::span<const uint32_t> key, bool whole);

  size_t memory_bytes() const;  // entries and keys held now (<= max_bytes + one key)
  size_t max_bytes() const { return max_bytes_; }
  uint64_t num_hits() const;
  uint64_t num_misses() const;

 private:
  std::shared_ptr<const Entry> compute(std::span<const uint32_t> key, bool whole) const;

  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const TokenTrie> trie_;
  const size_t max_bytes_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const Entry>> map_;  // guarded by mu_
  std::deque<std::string> order_;                                      // FIFO eviction
  std::unordered_map<std::string, uint8_t> seen_;  // keys met once (bounded: cleared when full)
  size_t seen_bytes_ = 0;
  size_t bytes_ = 0;
  uint64_t num_hits_ = 0, num_misses_ = 0;
};

}  // namespace kvw::grammar
