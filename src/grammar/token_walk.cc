#include "grammar/token_walk.h"

#include <algorithm>

namespace kvw::grammar {
namespace {

void prepare(const TokenTrie& trie, WalkScratch* w) {
  const size_t n = trie.max_depth() + 2u;
  if (w->states.size() < n) {
    w->states.resize(n);
    w->marks.resize(n);
  }
  w->root_like.assign(n, 0);
  w->popped.assign(n, 0);
}

void set_bit(uint64_t* bits, int32_t id) {
  bits[id >> 6] |= uint64_t{1} << (id & 63);
}

}  // namespace

size_t WalkScratch::memory_bytes() const {
  return states.capacity() * sizeof(MatchState) + marks.capacity() * sizeof(Matcher::Mark) +
         root_like.capacity() + popped.capacity() + cp_memo.size() * 16;
}

// Self-loops: inside a string (or a run of digits) most characters lead back to the very same
// state. Transitions from the root state are memoised per character as reject / self / other,
// so a trie node under a self-loop costs a table lookup instead of a matcher step (~33 ns).
// root_like[d]: states[d] has the root's stacks (possibly with a partial UTF-8 character).
void walk_trie(Matcher& m, const TokenTrie& trie, const MatchState& root, bool strip_space,
               WalkScratch* w, uint64_t* out, std::vector<int32_t>* uncertain) {
  enum : uint8_t { kUnknown, kReject, kSelf, kOther };
  prepare(trie, w);
  const auto& nodes = trie.nodes();
  const int32_t* ids = trie.token_ids().data();
  MatchState* states = w->states.data();
  Matcher::Mark* marks = w->marks.data();
  uint8_t* root_like = w->root_like.data();
  uint8_t* popped = w->popped.data();
  states[0] = root;
  marks[0] = m.mark();
  root_like[0] = 1;
  popped[0] = uncertain && m.can_end(root);
  uint8_t ascii[128] = {};
  // Code-point memo: a flat table for the BMP (64 KiB per engine thread, cleared per walk:
  // a hash map lookup was 13% of a 152k-token walk), a map beyond it.
  thread_local std::vector<uint8_t> bmp_memo;
  bmp_memo.assign(0x10000, kUnknown);
  w->cp_memo.clear();
  const uint32_t n = (uint32_t)nodes.size();
  const uint64_t steps_at_start = m.num_expand_steps();
  for (uint32_t i = 0; i < n;) {
    // An ambiguous grammar can make every node costly: stop the walk (accept() then fails).
    if (m.overflowed() || m.num_expand_steps() - steps_at_start > kMaxWalkSteps) {
      m.set_overflowed();
      break;
    }
    const TokenTrie::Node& nd = nodes[i];
    const uint16_t d = nd.depth;
    const MatchState& prev = states[d - 1];
    m.rollback(marks[d - 1]);
    uint8_t* memo = nullptr;
    bool rejected = false;
    if (d == 1 && strip_space && nd.byte == ' ') {
      states[1] = root;  // the stripped leading space: no grammar input
      root_like[1] = 1;
      marks[1] = marks[0];
      popped[1] = popped[0];
      goto allowed;
    }
    if (root_like[d - 1]) {
      if (prev.need == 0 && nd.byte < 0x80) {
        memo = &ascii[nd.byte];
      } else if (prev.need == 1 && (nd.byte & 0xC0) == 0x80) {
        const uint32_t cp = (prev.cp << 6) | (nd.byte & 0x3F);
        memo = cp < 0x10000 ? &bmp_memo[cp] : &w->cp_memo[cp];
      }
      if (memo && *memo == kReject) {
        rejected = true;
      } else if (memo && *memo == kSelf) {
        states[d] = root;
        root_like[d] = 1;
        marks[d] = marks[d - 1];
        popped[d] = popped[d - 1];
        goto allowed;
      }
    }
    if (!rejected && !m.advance(prev, nd.byte, &states[d])) {
      if (memo) *memo = kReject;
      rejected = true;
    }
    if (rejected) {
      // Past a point where the walked stack could end, what follows depends on the stack
      // below: every token of the subtree is undecided here.
      if (popped[d - 1]) {
        for (uint32_t j = i; j < nd.skip; ++j) {
          uncertain->insert(uncertain->end(), ids + nodes[j].tok_begin, ids + nodes[j].tok_end);
        }
      }
      i = nd.skip;
      continue;
    }
    // A lead or middle byte keeps the stacks (only the partial character changes).
    root_like[d] = root_like[d - 1] && states[d].need > 0;
    if (memo) {
      *memo = m.same_content(states[d], root) ? kSelf : kOther;
      if (*memo == kSelf) root_like[d] = 1, states[d] = root;
    }
    marks[d] = m.mark();
    popped[d] = popped[d - 1] || (uncertain && m.can_end(states[d]));
  allowed:
    for (uint32_t t = nd.tok_begin; t < nd.tok_end; ++t) set_bit(out, ids[t]);
    ++i;
  }
  m.rollback(marks[0]);
}

void walk_trie_dfa(const ByteDfa& dfa, const TokenTrie& trie, uint32_t state, bool strip_space,
                   std::vector<uint32_t>* states, uint64_t* bits) {
  const TokenTrie::Node* nodes = trie.nodes().data();
  const int32_t* ids = trie.token_ids().data();
  const uint32_t n = (uint32_t)trie.nodes().size();
  states->resize(trie.max_depth() + 1u);
  uint32_t* at = states->data();  // at[d] = state after the current node's first d bytes
  at[0] = state;
  for (uint32_t i = 0; i < n;) {
    const TokenTrie::Node& nd = nodes[i];
    const uint32_t next = nd.depth == 1 && strip_space && nd.byte == ' '
                              ? state  // the stripped leading space: no grammar input
                              : dfa.next(at[nd.depth - 1], nd.byte);
    if (next == ByteDfa::kDead) {
      i = nd.skip;  // no token below continues the language
      continue;
    }
    at[nd.depth] = next;
    for (uint32_t t = nd.tok_begin; t < nd.tok_end; ++t) set_bit(bits, ids[t]);
    ++i;
  }
}

void walk_token_list(Matcher& m, const TokenTrie& trie, const MatchState& root,
                     std::span<const int32_t> ids, std::span<const uint16_t> lcp, WalkScratch* w,
                     uint64_t* bits) {
  constexpr size_t kNoFail = SIZE_MAX;
  prepare(trie, w);
  MatchState* states = w->states.data();
  Matcher::Mark* marks = w->marks.data();
  states[0] = root;
  marks[0] = m.mark();
  const uint64_t steps_at_start = m.num_expand_steps();
  size_t ok = 0;          // states[0..ok] hold the previous token's prefixes
  size_t fail = kNoFail;  // the previous token's byte `fail` was rejected
  for (size_t j = 0; j < ids.size(); ++j) {
    if (m.overflowed() || m.num_expand_steps() - steps_at_start > kMaxWalkSteps) {
      m.set_overflowed();
      break;
    }
    const std::string_view bytes = trie.token_bytes(ids[j]);
    const size_t l = j == 0 ? 0 : lcp[j];
    if (fail != kNoFail && l > fail) continue;  // shares the rejected prefix
    if (bytes.size() > trie.max_depth()) continue;
    size_t d = std::min(l, ok);
    m.rollback(marks[d]);
    fail = kNoFail;
    for (; d < bytes.size(); ++d) {
      if (!m.advance(states[d], (uint8_t)bytes[d], &states[d + 1])) {
        fail = d;
        break;
      }
      marks[d + 1] = m.mark();
    }
    ok = d;
    if (fail == kNoFail) set_bit(bits, ids[j]);
  }
  m.rollback(marks[0]);
}

}  // namespace kvw::grammar
