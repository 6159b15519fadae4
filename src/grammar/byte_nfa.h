// grammar/byte_nfa.h: a regular Grammar as a nondeterministic automaton over bytes, the first
// half of ByteDfa's construction. Rules are inlined at each use; a reference back to a rule
// that is being inlined is followed only where it continues to the same place as that rule
// (tail recursion: `star ::= item star | ""`, what `*` and `+` lower to), which keeps the
// automaton finite. Any other recursion (JSON's nested values) is not regular: no automaton.
// Code points become their UTF-8 byte sequences (RE2's UTF-8 ranges, own code), with the same
// validity as Matcher: no overlong forms, no surrogates, nothing above U+10FFFF.
// Pure function; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace kvw::grammar {

struct ByteNfa {
  struct Edge {
    uint8_t lo = 0, hi = 0;  // inclusive byte range
    uint32_t to = 0;
  };
  std::vector<std::vector<Edge>> edges;    // [num_states] byte transitions
  std::vector<std::vector<uint32_t>> eps;  // [num_states] transitions on no input
  uint32_t start = 0;
  uint32_t accept = 0;  // the one final state (no outgoing edges)

  size_t num_states() const { return edges.size(); }
};

// nullopt when the grammar is not regular in the sense above, when inlining nests more than
// kMaxInlineDepth rules, or when the automaton would exceed max_states states.
inline constexpr uint32_t kMaxInlineDepth = 2048;
std::optional<ByteNfa> build_byte_nfa(const Grammar& g, size_t max_states);

// The UTF-8 encodings of the code points [lo, hi] (surrogates left out) as runs of byte ranges:
// each inner vector is one sequence of 1-4 inclusive byte ranges. Exposed for tests.
std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_sequences(uint32_t lo, uint32_t hi);

}  // namespace kvw::grammar
