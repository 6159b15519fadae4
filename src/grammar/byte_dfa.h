// grammar/byte_dfa.h: a regular grammar (regex, choice) as a deterministic automaton over
// bytes. A sequence's mask from a DFA state is one table lookup per trie node the walk reaches
// (token_walk.h: walk_trie_dfa), where the Matcher's pushdown step costs ~33 ns a byte; and a
// state is one id, so masks are cached per state by an integer (GrammarConstraint).
// Built eagerly by subset construction over byte_nfa.h's automaton, within a byte budget taken
// from the grammar's (max_grammar_bytes): a grammar that is not regular or whose automaton does
// not fit simply has no DFA and keeps the Matcher walk. Its language equals the Matcher's: a
// byte string reaches a live state exactly when the Matcher accepts it.
// Immutable once built; shared read-only by every sequence (thread-safe reads).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace kvw::grammar {

class ByteDfa {
 public:
  static constexpr uint32_t kDead = 0;   // no string leads on from here
  static constexpr uint32_t kStart = 1;  // the grammar's start

  // Null when the grammar is not regular (byte_nfa.h) or the automaton while built, or the
  // table once built, would take more than max_bytes.
  static std::shared_ptr<const ByteDfa> build(const Grammar& g, size_t max_bytes);

  uint32_t next(uint32_t state, uint8_t byte) const {
    return next_by_class(state, byte_class_[byte]);
  }
  uint32_t byte_class(uint8_t byte) const { return byte_class_[byte]; }
  // cls < num_classes(): the bytes of one class lead every state to the same place.
  uint32_t next_by_class(uint32_t state, uint32_t cls) const {
    return next_[(size_t)state * num_classes_ + cls];
  }
  // kDead as soon as a byte leaves the language.
  uint32_t walk(uint32_t state, std::string_view bytes) const {
    for (char c : bytes) {
      if (state == kDead) break;
      state = next(state, (uint8_t)c);
    }
    return state;
  }
  bool accepting(uint32_t state) const { return accepting_[state]; }
  uint32_t num_states() const { return (uint32_t)accepting_.size(); }
  uint32_t num_classes() const { return num_classes_; }
  size_t memory_bytes() const { return sizeof(*this) + next_.capacity() * 4 + accepting_.size(); }

 private:
  std::array<uint8_t, 256> byte_class_{};  // bytes no edge tells apart share a class
  uint32_t num_classes_ = 0;
  std::vector<uint32_t> next_;      // [num_states][num_classes] next state; row 0 = dead
  std::vector<uint8_t> accepting_;  // [num_states] the input so far is a whole sentence
};

// g with its ByteDfa attached when g is regular and the automaton fits in what max_bytes leaves
// after g itself; otherwise g as it is (the Matcher walk still gives the exact mask).
std::shared_ptr<const Grammar> with_dfa(std::shared_ptr<const Grammar> g, size_t max_bytes);

}  // namespace kvw::grammar
