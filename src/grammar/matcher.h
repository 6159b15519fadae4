// grammar/matcher.h: incremental recogniser of a Grammar over bytes.
// The state is a set of stacks of grammar positions (a pushdown automaton run breadth-first, as
// llama.cpp does); each stack's top is a character class. Bytes are decoded as UTF-8; a partial
// code point keeps the stacks and narrows the possible code points, so a lead byte no stack can
// continue is rejected at once. Stacks are persistent linked nodes in one arena, so a token-trie
// walk (token_mask.cc) advances by appending and backs out by truncating (mark/rollback).
// Owner: one sequence; not thread-safe. The Grammar is shared read-only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace kvw::grammar {

// Where a matcher is: stacks [begin, end) of the set arena, plus a partial UTF-8 character.
struct MatchState {
  uint32_t begin = 0, end = 0;
  uint32_t cp = 0;   // bits of the partial code point so far
  uint8_t need = 0;  // continuation bytes still expected (0 = on a character boundary)
  uint8_t len = 0;   // continuation bytes of the whole character (overlong checks)
};

class Matcher {
 public:
  // Above this many live stacks (an ambiguous grammar) further alternatives are dropped and
  // overflowed() turns true; JSON-schema grammars stay under ~10.
  static constexpr uint32_t kMaxStacks = 512;
  // Work one step (one code point) may do, in grammar positions visited; past it the step is
  // cut short and overflowed() turns true. JSON-schema grammars take tens.
  static constexpr uint32_t kMaxExpandSteps = 1u << 14;

  explicit Matcher(std::shared_ptr<const Grammar> g);
  // A matcher whose state is one stack of the given positions (top first) over an empty
  // bottom: what ContextMaskCache walks to classify tokens for a stack's top nodes.
  Matcher(std::shared_ptr<const Grammar> g, std::span<const uint32_t> stack_top_first);

  // Consumes all of `bytes` or nothing: false (state unchanged) when the grammar rejects them.
  bool accept_bytes(std::string_view bytes);
  // The input so far is a complete sentence of the grammar.
  bool can_end() const { return can_end(state_); }
  bool can_end(const MatchState& s) const;
  // No more bytes can be accepted (only the end remains).
  bool is_finished() const;
  uint32_t num_stacks() const { return state_.end - state_.begin; }
  // Same stacks (as a set) and the same partial character: equal futures.
  bool same_content(const MatchState& a, const MatchState& b) const;
  // The committed state's content (stacks sorted), equal for equal states: a cache key.
  void state_key(std::string* key) const;
  // Stack `i` of the committed state (0 <= i < num_stacks()): false for the finished stack.
  // Otherwise its positions top first, at most max_nodes of them, and *whole = the stack has
  // no more nodes below.
  bool stack_positions(uint32_t i, size_t max_nodes, std::vector<uint32_t>* out, bool* whole) const;
  // A state made of stack `i` of the committed state alone (appended to the arena: undo with
  // rollback). From a set of stacks the allowed continuations are the union of each stack's.
  MatchState single_stack(uint32_t i);
  bool overflowed() const { return overflowed_; }
  void set_overflowed() { overflowed_ = true; }
  uint64_t num_expand_steps() const { return num_expand_steps_; }  // since construction
  const Grammar& grammar() const { return *g_; }

  // Trie-walk interface: advance any state by one byte (appending to the arenas), and undo
  // everything appended since a mark. The committed state() is never rolled back.
  const MatchState& state() const { return state_; }
  bool advance(const MatchState& in, uint8_t byte, MatchState* out);
  struct Mark {
    uint32_t nodes = 0, sets = 0;
  };
  Mark mark() const { return {(uint32_t)nodes_.size(), (uint32_t)sets_.size()}; }
  void rollback(Mark m) {
    nodes_.resize(m.nodes);
    sets_.resize(m.sets);
  }
  // Bytes held by the arenas (grows with grammar nesting depth, not with output length).
  size_t arena_bytes() const { return nodes_.capacity() * sizeof(Node) + sets_.capacity() * 4; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;        // no parent: bottom of a stack
  static constexpr uint32_t kAccept = UINT32_MAX - 1;  // the empty stack: root finished

  struct Node {
    uint32_t pos;     // index into Grammar::elems
    uint32_t parent;  // node below, or kNone
    uint64_t hash;    // of the whole stack, for de-duplication
  };

  bool step_code_point(const MatchState& in, uint32_t cp, MatchState* out);
  bool any_top_intersects(const MatchState& s, uint32_t lo, uint32_t hi) const;
  void expand(uint32_t pos, uint32_t parent, uint32_t set_begin);
  void add_stack(uint32_t pos, uint32_t parent, uint32_t set_begin);
  bool same_stack(uint32_t a, uint32_t b) const;
  void compact(const MatchState& s);  // makes s the committed state, dropping dead nodes

  std::shared_ptr<const Grammar> g_;
  const Elem* elems_ = nullptr;
  std::vector<Node> nodes_;     // [nodes] stack arena
  std::vector<uint32_t> sets_;  // [stacks] node ids (or kAccept) of every state's set
  MatchState state_;
  bool overflowed_ = false;
  uint32_t budget_ = kMaxExpandSteps;  // left for the current step
  uint64_t num_expand_steps_ = 0;
  std::vector<std::pair<uint32_t, uint32_t>> work_;  // expand()'s (pos, parent) work list
};

}  // namespace kvw::grammar
