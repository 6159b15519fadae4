// grammar/grammar.h: a compiled context-free grammar over Unicode code points.
// Every rule is a list of alternatives; each alternative is a run of elements in one flat array
// ending with kEnd, so a matcher position is one uint32 index (the llama.cpp idea, own code).
// Repetition and groups are lowered to helper rules by the builders (gbnf_parser.cc).
// Immutable once built; shared read-only by every sequence that uses it (thread-safe reads).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kvw::grammar {

enum class Op : uint8_t {
  kEnd,    // end of an alternative: return to the caller
  kChars,  // one code point from char_classes[arg]
  kRef,    // rule rules[arg]
};

struct Elem {
  Op op = Op::kEnd;
  uint32_t arg = 0;
};

// A set of code points: sorted, merged [lo, hi] ranges, optionally negated, with an ASCII
// bitmap so the common case is one bit test.
struct CharClass {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive, sorted, disjoint
  bool negated = false;
  std::array<uint64_t, 2> ascii = {0, 0};  // membership of code points 0..127 (after negation)

  bool contains(uint32_t cp) const;
  // True when some code point in [lo, hi] is a member (prunes partial UTF-8 sequences).
  bool intersects(uint32_t lo, uint32_t hi) const;
  void finish();  // sorts/merges ranges and fills `ascii`
};

class ByteDfa;

struct Rule {
  std::string name;
  std::vector<uint32_t> alts;  // start index of each alternative in Grammar::elems
};

struct Grammar {
  // Longest chain of rules entered without consuming input: bounds Matcher::expand's recursion.
  static constexpr uint32_t kMaxLeftDepth = 512;

  std::vector<Elem> elems;  // [all alternatives], each terminated by kEnd
  std::vector<Rule> rules;
  std::vector<CharClass> char_classes;
  uint32_t root = 0;  // rule id of "root"
  // The same language as a byte automaton, for regular grammars (regex, choice: byte_dfa.h's
  // with_dfa); null otherwise. Masks then walk the trie through its table.
  std::shared_ptr<const ByteDfa> dfa;

  // Bytes the compiled form occupies, its DFA included (what the memory limit is checked against).
  size_t size_bytes() const;
  // Refuses left recursion (a rule that can reach itself without consuming input), rules that
  // can never finish, and chains of rules nested deeper than kMaxLeftDepth without consuming
  // input. Errors name the rule.
  Status validate() const;
};

}  // namespace kvw::grammar
