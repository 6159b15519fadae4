#include "grammar/byte_nfa.h"

#include <algorithm>

namespace kvw::grammar {
namespace {

using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;

constexpr uint32_t kNone = UINT32_MAX;

int encode_utf8(uint32_t cp, uint8_t* out) {
  if (cp < 0x80) return out[0] = (uint8_t)cp, 1;
  if (cp < 0x800) {
    out[0] = (uint8_t)(0xC0 | (cp >> 6));
    out[1] = (uint8_t)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (uint8_t)(0xE0 | (cp >> 12));
    out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (uint8_t)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (uint8_t)(0xF0 | (cp >> 18));
  out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (uint8_t)(0x80 | (cp & 0x3F));
  return 4;
}

// Splits [lo, hi] (no surrogates) until both ends encode to the same length and every
// continuation position spans whole 64-value blocks; then each byte position is one range.
void split_utf8(uint32_t lo, uint32_t hi, std::vector<ByteRanges>* out) {
  for (uint32_t last : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= last && hi > last) {
      split_utf8(lo, last, out);
      split_utf8(last + 1, hi, out);
      return;
    }
  }
  if (hi < 0x80) {
    out->push_back({{(uint8_t)lo, (uint8_t)hi}});
    return;
  }
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      split_utf8(lo, lo | m, out);
      split_utf8((lo | m) + 1, hi, out);
      return;
    }
    if ((hi & m) != m) {
      split_utf8(lo, (hi & ~m) - 1, out);
      split_utf8(hi & ~m, hi, out);
      return;
    }
  }
  uint8_t a[4], b[4];
  const int n = encode_utf8(lo, a);
  encode_utf8(hi, b);
  ByteRanges seq;
  for (int k = 0; k < n; ++k) seq.push_back({a[k], b[k]});
  out->push_back(std::move(seq));
}

// [lo, hi] without the surrogates, which are not characters (Matcher refuses ED A0..ED BF).
void add_utf8(uint32_t lo, uint32_t hi, std::vector<ByteRanges>* out) {
  if (lo < 0xD800) split_utf8(lo, std::min(hi, 0xD7FFu), out);
  if (hi > 0xDFFF) split_utf8(std::max(lo, 0xE000u), hi, out);
}

// The code points a class matches, as sorted disjoint ranges.
std::vector<std::pair<uint32_t, uint32_t>> positive_ranges(const CharClass& c) {
  if (!c.negated) return c.ranges;
  std::vector<std::pair<uint32_t, uint32_t>> out;
  uint32_t next = 0;
  for (auto [lo, hi] : c.ranges) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

class NfaBuilder {
 public:
  NfaBuilder(const Grammar& g, size_t max_states)
      : g_(g),
        max_states_(max_states),
        entry_(g.rules.size(), kNone),
        exit_(g.rules.size(), kNone) {
    sequences_.resize(g.char_classes.size());
  }

  std::optional<ByteNfa> run() {
    nfa_.start = add_state();
    nfa_.accept = add_state();
    if (!failed_) rule(g_.root, nfa_.start, nfa_.accept, 0);
    if (failed_) return std::nullopt;
    return std::move(nfa_);
  }

 private:
  uint32_t add_state() {
    if (nfa_.edges.size() >= max_states_) {
      failed_ = true;
      return 0;
    }
    nfa_.edges.emplace_back();
    nfa_.eps.emplace_back();
    return (uint32_t)nfa_.edges.size() - 1;
  }

  // Paths from `from` to `to` that spell exactly the strings of rule r.
  void rule(uint32_t r, uint32_t from, uint32_t to, uint32_t depth) {
    if (entry_[r] != kNone) {
      // r is being inlined on this path: the same continuation is a loop back to its entry.
      if (exit_[r] == to) {
        nfa_.eps[from].push_back(entry_[r]);
      } else {
        failed_ = true;  // recursion that is not a tail call: not regular
      }
      return;
    }
    if (depth > kMaxInlineDepth) {
      failed_ = true;
      return;
    }
    // A fresh entry: `from` may have other edges, which a loop back must not take.
    const uint32_t entry = add_state();
    if (failed_) return;
    nfa_.eps[from].push_back(entry);
    entry_[r] = entry;
    exit_[r] = to;
    for (uint32_t alt : g_.rules[r].alts) {
      uint32_t cur = entry;
      for (uint32_t p = alt;; ++p) {
        const Elem e = g_.elems[p];
        if (e.op == Op::kEnd) {
          nfa_.eps[cur].push_back(to);
          break;
        }
        const bool last = g_.elems[p + 1].op == Op::kEnd;
        const uint32_t next = last ? to : add_state();
        if (failed_) return;
        if (e.op == Op::kChars) {
          chars(e.arg, cur, next);
        } else {
          rule(e.arg, cur, next, depth + 1);
        }
        if (failed_) return;
        if (last) break;
        cur = next;
      }
    }
    entry_[r] = exit_[r] = kNone;
  }

  void chars(uint32_t cls, uint32_t from, uint32_t to) {
    auto& seqs = sequences_[cls];
    if (seqs.empty()) {
      for (auto [lo, hi] : positive_ranges(g_.char_classes[cls])) add_utf8(lo, hi, &seqs);
    }
    for (const ByteRanges& seq : seqs) {
      uint32_t cur = from;
      for (size_t k = 0; k < seq.size(); ++k) {
        const uint32_t next = k + 1 == seq.size() ? to : add_state();
        if (failed_) return;
        nfa_.edges[cur].push_back({seq[k].first, seq[k].second, next});
        cur = next;
      }
    }
  }

  const Grammar& g_;
  const size_t max_states_;
  ByteNfa nfa_;
  bool failed_ = false;
  std::vector<uint32_t> entry_, exit_;  // [rules] of the rules being inlined, else kNone
  std::vector<std::vector<ByteRanges>> sequences_;  // [char_classes] UTF-8 forms, built on use
};

}  // namespace

std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_sequences(uint32_t lo, uint32_t hi) {
  std::vector<ByteRanges> out;
  add_utf8(lo, hi, &out);
  return out;
}

std::optional<ByteNfa> build_byte_nfa(const Grammar& g, size_t max_states) {
  if (g.root >= g.rules.size()) return std::nullopt;
  return NfaBuilder(g, max_states).run();
}

}  // namespace kvw::grammar
