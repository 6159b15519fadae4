#include "grammar/grammar.h"

#include <algorithm>

#include "grammar/byte_dfa.h"

namespace kvw::grammar {

bool CharClass::contains(uint32_t cp) const {
  if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1;
  // First range whose hi >= cp.
  auto it = std::lower_bound(ranges.begin(), ranges.end(), cp,
                             [](const auto& r, uint32_t c) { return r.second < c; });
  const bool in = it != ranges.end() && it->first <= cp;
  return in != negated;
}

bool CharClass::intersects(uint32_t lo, uint32_t hi) const {
  if (!negated) {
    auto it = std::lower_bound(ranges.begin(), ranges.end(), lo,
                               [](const auto& r, uint32_t c) { return r.second < c; });
    return it != ranges.end() && it->first <= hi;
  }
  // Negated: misses only when one excluded range covers all of [lo, hi].
  auto it = std::lower_bound(ranges.begin(), ranges.end(), lo,
                             [](const auto& r, uint32_t c) { return r.second < c; });
  return !(it != ranges.end() && it->first <= lo && it->second >= hi);
}

void CharClass::finish() {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  ranges = std::move(merged);
  ascii = {0, 0};
  for (uint32_t c = 0; c < 128; ++c) {
    auto it = std::lower_bound(ranges.begin(), ranges.end(), c,
                               [](const auto& r, uint32_t x) { return r.second < x; });
    const bool in = (it != ranges.end() && it->first <= c) != negated;
    if (in) ascii[c >> 6] |= uint64_t{1} << (c & 63);
  }
}

size_t Grammar::size_bytes() const {
  size_t n = sizeof(Grammar) + elems.size() * sizeof(Elem);
  for (const auto& r : rules) n += sizeof(Rule) + r.name.size() + r.alts.size() * 4;
  for (const auto& c : char_classes) n += sizeof(CharClass) + c.ranges.size() * 8;
  return n + (dfa ? dfa->memory_bytes() : 0);
}

namespace {

// Fixed point: a rule is nullable when some alternative is all nullable refs.
std::vector<bool> nullable_rules(const Grammar& g) {
  std::vector<bool> nullable(g.rules.size(), false);
  bool forward = false;
  for (bool changed = true; changed;) {
    changed = false;
    // Sweeps alternate direction: rule chains (as the lowering writes them) settle in one or
    // two sweeps whichever way they point.
    forward = !forward;
    for (size_t k = 0; k < g.rules.size(); ++k) {
      const size_t r = forward ? k : g.rules.size() - 1 - k;
      if (nullable[r]) continue;
      for (uint32_t a : g.rules[r].alts) {
        uint32_t p = a;
        while (g.elems[p].op == Op::kRef && nullable[g.elems[p].arg]) ++p;
        if (g.elems[p].op == Op::kEnd) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  return nullable;
}

// Fixed point: a rule is productive when some alternative derives a finite string.
std::vector<bool> productive_rules(const Grammar& g) {
  std::vector<bool> prod(g.rules.size(), false);
  bool forward = false;
  for (bool changed = true; changed;) {
    changed = false;
    forward = !forward;
    for (size_t k = 0; k < g.rules.size(); ++k) {
      const size_t r = forward ? k : g.rules.size() - 1 - k;
      if (prod[r]) continue;
      for (uint32_t a : g.rules[r].alts) {
        uint32_t p = a;
        while (g.elems[p].op == Op::kChars || (g.elems[p].op == Op::kRef && prod[g.elems[p].arg]))
          ++p;
        if (g.elems[p].op == Op::kEnd) {
          prod[r] = changed = true;
          break;
        }
      }
    }
  }
  return prod;
}

}  // namespace

Status Grammar::validate() const {
  if (root >= rules.size()) return Error{"grammar has no root rule"};
  const auto prod = productive_rules(*this);
  for (size_t r = 0; r < rules.size(); ++r) {
    if (!prod[r]) return Error{"grammar rule '" + rules[r].name + "' can never finish"};
  }
  // left[r] = rules reachable from r without consuming input; left recursion = r in left*(r).
  const auto nullable = nullable_rules(*this);
  std::vector<std::vector<uint32_t>> left(rules.size());
  for (size_t r = 0; r < rules.size(); ++r) {
    for (uint32_t a : rules[r].alts) {
      for (uint32_t p = a; elems[p].op == Op::kRef; ++p) {
        left[r].push_back(elems[p].arg);
        if (!nullable[elems[p].arg]) break;
      }
    }
  }
  // DFS with colours finds a cycle in the left graph.
  std::vector<uint8_t> colour(rules.size(), 0);  // 0 new, 1 on stack, 2 done
  std::vector<uint32_t> left_depth(rules.size(), 1);
  std::vector<std::pair<uint32_t, size_t>> stack;
  for (uint32_t s = 0; s < rules.size(); ++s) {
    if (colour[s]) continue;
    stack.push_back({s, 0});
    colour[s] = 1;
    while (!stack.empty()) {
      auto& [r, i] = stack.back();
      if (i == left[r].size()) {
        colour[r] = 2;
        for (uint32_t c : left[r]) left_depth[r] = std::max(left_depth[r], left_depth[c] + 1);
        if (left_depth[r] > kMaxLeftDepth) {
          return Error{"grammar rule '" + rules[r].name + "' nests more than " +
                       std::to_string(kMaxLeftDepth) + " rules deep without consuming input"};
        }
        stack.pop_back();
        continue;
      }
      const uint32_t next = left[r][i++];
      if (colour[next] == 1) {
        return Error{"grammar rule '" + rules[next].name +
                     "' is left-recursive (it can reach itself without consuming input); "
                     "rewrite it with repetition, e.g. x ::= y (\",\" y)*"};
      }
      if (colour[next] == 0) {
        colour[next] = 1;
        stack.push_back({next, 0});
      }
    }
  }
  return Status::ok_status();
}

}  // namespace kvw::grammar
