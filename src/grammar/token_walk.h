// grammar/token_walk.h: the walks that decide which tokens a matcher state allows.
// walk_trie() scans the whole TokenTrie from a state, dropping a subtree at its first rejected
// byte; with `uncertain` it also classifies for ContextMaskCache (tokens whose fate depends on
// what lies below the walked stack). walk_token_list() checks a short, byte-sorted list of
// tokens, sharing the matcher work of common prefixes.
// Thread safety: a WalkScratch and the Matcher belong to the calling thread for the walk.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "grammar/byte_dfa.h"
#include "grammar/matcher.h"
#include "grammar/token_trie.h"

namespace kvw::grammar {

// Per-walk state, kept between walks so that a walk allocates nothing once warm.
struct WalkScratch {
  std::vector<MatchState> states;    // [max_depth + 1] state after each prefix
  std::vector<Matcher::Mark> marks;  // [max_depth + 1] arena marks to roll back to
  std::vector<uint8_t> root_like;    // [max_depth + 1] state equals the root's stacks
  std::vector<uint8_t> popped;       // [max_depth + 1] some prefix emptied the walked stack
  std::unordered_map<uint32_t, uint8_t> cp_memo;  // code point -> self-loop memo (astral)
  size_t memory_bytes() const;
};

// Matcher work one walk may do (~100 ms); past it the matcher is marked overflowed.
inline constexpr uint64_t kMaxWalkSteps = 1ull << 24;

// Sets bit id of `bits` ([n_vocab / 64], zeroed by the caller) for every trie token accepted
// from `root` (a state of `m`; the committed state is restored on return). strip_space: a
// leading space of the first byte is no grammar input. With `uncertain`, a token the walk
// rejects after some prefix emptied the stack (m.can_end) is appended to it instead.
void walk_trie(Matcher& m, const TokenTrie& trie, const MatchState& root, bool strip_space,
               WalkScratch* w, uint64_t* bits, std::vector<int32_t>* uncertain = nullptr);

// Sets bit id of `bits` ([n_vocab / 64], zeroed by the caller) for every trie token whose bytes
// lead `dfa` from `state` to a live state: walk_trie's mask for a regular grammar, at one table
// lookup per trie node reached. strip_space as walk_trie. states: scratch, resized here.
void walk_trie_dfa(const ByteDfa& dfa, const TokenTrie& trie, uint32_t state, bool strip_space,
                   std::vector<uint32_t>* states, uint64_t* bits);

// Sets the bits of the tokens of `ids` (sorted by bytes; lcp[j] = common prefix length of
// ids[j - 1] and ids[j]) accepted from `root`.
void walk_token_list(Matcher& m, const TokenTrie& trie, const MatchState& root,
                     std::span<const int32_t> ids, std::span<const uint16_t> lcp, WalkScratch* w,
                     uint64_t* bits);

}  // namespace kvw::grammar
