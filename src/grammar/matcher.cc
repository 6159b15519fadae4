#include "grammar/matcher.h"

#include <algorithm>

namespace kvw::grammar {
namespace {

// Smallest code point a character with n continuation bytes may encode (shorter is overlong).
constexpr uint32_t kMinCodePoint[4] = {0, 0x80, 0x800, 0x10000};

// The code points [lo, hi] a partial character can still become, clipped to valid ones.
bool partial_range(uint32_t bits, uint8_t rem, uint8_t len, uint32_t* lo, uint32_t* hi) {
  *lo = std::max(bits << (6 * rem), kMinCodePoint[len]);
  *hi = std::min(((bits + 1) << (6 * rem)) - 1, 0x10FFFFu);
  // A prefix that can only end as a surrogate (ED A0..ED BF) is dead: reject it now.
  return *lo <= *hi && !(*lo >= 0xD800 && *hi <= 0xDFFF);
}

uint64_t mix(uint64_t h, uint32_t pos) {
  h ^= pos + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdULL;
}

}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)), elems_(g_->elems.data()) {
  nodes_.reserve(256);
  sets_.reserve(256);
  state_.begin = 0;
  for (uint32_t alt : g_->rules[g_->root].alts) expand(alt, kNone, 0);
  state_.end = (uint32_t)sets_.size();
}

Matcher::Matcher(std::shared_ptr<const Grammar> g, std::span<const uint32_t> stack_top_first)
    : g_(std::move(g)), elems_(g_->elems.data()) {
  nodes_.reserve(256);
  sets_.reserve(256);
  uint32_t parent = kNone;
  for (auto it = stack_top_first.rbegin(); it != stack_top_first.rend(); ++it) {
    nodes_.push_back({*it, parent, mix(parent == kNone ? 0 : nodes_[parent].hash, *it)});
    parent = (uint32_t)nodes_.size() - 1;
  }
  if (parent != kNone) sets_.push_back(parent);
  state_ = {0, (uint32_t)sets_.size(), 0, 0, 0};
}

bool Matcher::stack_positions(uint32_t i, size_t max_nodes, std::vector<uint32_t>* out,
                              bool* whole) const {
  out->clear();
  uint32_t id = sets_[state_.begin + i];
  if (id == kAccept) return false;
  for (; id != kNone && out->size() < max_nodes; id = nodes_[id].parent) {
    out->push_back(nodes_[id].pos);
  }
  *whole = id == kNone;
  return true;
}

MatchState Matcher::single_stack(uint32_t i) {
  MatchState s = state_;
  s.begin = (uint32_t)sets_.size();
  sets_.push_back(sets_[state_.begin + i]);
  s.end = s.begin + 1;
  return s;
}

bool Matcher::can_end(const MatchState& s) const {
  if (s.need != 0) return false;
  for (uint32_t i = s.begin; i < s.end; ++i) {
    if (sets_[i] == kAccept) return true;
  }
  return false;
}

bool Matcher::same_content(const MatchState& a, const MatchState& b) const {
  if (a.end - a.begin != b.end - b.begin || a.need != b.need || a.cp != b.cp) return false;
  for (uint32_t i = a.begin; i < a.end; ++i) {  // sets are de-duplicated: containment suffices
    const uint32_t x = sets_[i];
    bool found = false;
    for (uint32_t j = b.begin; j < b.end && !found; ++j) {
      const uint32_t y = sets_[j];
      if (x == kAccept || y == kAccept) {
        found = x == y;
      } else {
        found = nodes_[x].hash == nodes_[y].hash && nodes_[x].pos == nodes_[y].pos &&
                same_stack(nodes_[x].parent, nodes_[y].parent);
      }
    }
    if (!found) return false;
  }
  return true;
}

void Matcher::state_key(std::string* key) const {
  std::vector<std::string> stacks;
  for (uint32_t i = state_.begin; i < state_.end; ++i) {
    std::string s;
    for (uint32_t id = sets_[i]; id != kNone && id != kAccept; id = nodes_[id].parent) {
      s.append(reinterpret_cast<const char*>(&nodes_[id].pos), 4);
    }
    stacks.push_back(sets_[i] == kAccept ? std::string("A") : std::move(s));
  }
  std::sort(stacks.begin(), stacks.end());
  key->clear();
  for (const auto& s : stacks) key->append(s).push_back('|');
  key->append(reinterpret_cast<const char*>(&state_.cp), 4);
  key->push_back((char)state_.need);
  key->push_back((char)state_.len);
}

bool Matcher::is_finished() const {
  for (uint32_t i = state_.begin; i < state_.end; ++i) {
    if (sets_[i] != kAccept) return false;
  }
  return state_.need == 0;
}

bool Matcher::accept_bytes(std::string_view bytes) {
  const Mark start = mark();
  MatchState cur = state_;
  for (char c : bytes) {
    MatchState next;
    if (!advance(cur, (uint8_t)c, &next)) {
      rollback(start);
      return false;
    }
    cur = next;
  }
  compact(cur);
  return true;
}

bool Matcher::advance(const MatchState& in, uint8_t b, MatchState* out) {
  if (in.need == 0) {
    if (b < 0x80) return step_code_point(in, b, out);
    uint32_t v;
    uint8_t n;
    if (b >= 0xC2 && b < 0xE0)
      v = b & 0x1F, n = 1;
    else if (b >= 0xE0 && b < 0xF0)
      v = b & 0x0F, n = 2;
    else if (b >= 0xF0 && b < 0xF5)
      v = b & 0x07, n = 3;
    else
      return false;  // continuation byte, overlong lead or out of Unicode
    uint32_t lo, hi;
    if (!partial_range(v, n, n, &lo, &hi) || !any_top_intersects(in, lo, hi)) return false;
    *out = in;
    out->cp = v;
    out->need = out->len = n;
    return true;
  }
  if ((b & 0xC0) != 0x80) return false;
  const uint32_t v = (in.cp << 6) | (b & 0x3F);
  if (in.need == 1) {
    if (v < kMinCodePoint[in.len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return false;
    MatchState base = in;
    base.need = 0;
    return step_code_point(base, v, out);
  }
  const uint8_t rem = in.need - 1;
  uint32_t lo, hi;
  if (!partial_range(v, rem, in.len, &lo, &hi) || !any_top_intersects(in, lo, hi)) return false;
  *out = in;
  out->cp = v;
  out->need = rem;
  return true;
}

bool Matcher::any_top_intersects(const MatchState& s, uint32_t lo, uint32_t hi) const {
  for (uint32_t i = s.begin; i < s.end; ++i) {
    const uint32_t id = sets_[i];
    if (id == kAccept) continue;
    if (g_->char_classes[elems_[nodes_[id].pos].arg].intersects(lo, hi)) return true;
  }
  return false;
}

bool Matcher::step_code_point(const MatchState& in, uint32_t cp, MatchState* out) {
  budget_ = kMaxExpandSteps;
  const uint32_t begin = (uint32_t)sets_.size();
  const auto& classes = g_->char_classes;
  for (uint32_t i = in.begin; i < in.end; ++i) {
    const uint32_t id = sets_[i];
    if (id == kAccept) continue;
    const Node n = nodes_[id];  // by value: expand() may grow nodes_
    if (!classes[elems_[n.pos].arg].contains(cp)) continue;
    expand(n.pos + 1, n.parent, begin);
  }
  out->begin = begin;
  out->end = (uint32_t)sets_.size();
  out->cp = 0;
  out->need = out->len = 0;
  return out->end > out->begin;
}

// Pushes every stack reachable from `pos` (with `parent` below it) without consuming input,
// into the set that starts at set_begin. Terminates because validate() refused left recursion.
// An explicit work list, not recursion: a run of nullable rules (x?{4096} repeated) would
// otherwise nest a frame per rule; kMaxExpandSteps bounds the work of one step (all of its
// expansions together: (("a"?){64}){64} once cost 512 stacks x 4096 paths per byte).
void Matcher::expand(uint32_t pos, uint32_t parent, uint32_t set_begin) {
  work_.clear();
  work_.push_back({pos, parent});
  while (!work_.empty()) {
    if (budget_ == 0) {
      overflowed_ = true;
      return;
    }
    --budget_;
    ++num_expand_steps_;
    auto [p, par] = work_.back();
    work_.pop_back();
    const Elem e = elems_[p];
    if (e.op == Op::kChars) {
      add_stack(p, par, set_begin);
    } else if (e.op == Op::kEnd) {
      if (par != kNone) {
        work_.push_back({nodes_[par].pos, nodes_[par].parent});  // return to the caller
      } else if (std::find(sets_.begin() + set_begin, sets_.end(), kAccept) == sets_.end()) {
        sets_.push_back(kAccept);
      }
    } else {
      // A reference in tail position returns straight to our caller: no node, no stack growth.
      uint32_t ret = par;
      if (elems_[p + 1].op != Op::kEnd) {
        ret = (uint32_t)nodes_.size();
        nodes_.push_back({p + 1, par, mix(par == kNone ? 0 : nodes_[par].hash, p + 1)});
      }
      const auto& alts = g_->rules[e.arg].alts;
      for (auto it = alts.rbegin(); it != alts.rend(); ++it) work_.push_back({*it, ret});
    }
  }
}

void Matcher::add_stack(uint32_t pos, uint32_t parent, uint32_t set_begin) {
  const uint64_t h = mix(parent == kNone ? 0 : nodes_[parent].hash, pos);
  const uint32_t size = (uint32_t)sets_.size();
  for (uint32_t i = set_begin; i < size; ++i) {
    const uint32_t id = sets_[i];
    if (id == kAccept || nodes_[id].hash != h || nodes_[id].pos != pos) continue;
    if (same_stack(nodes_[id].parent, parent)) return;
  }
  if (size - set_begin >= kMaxStacks) {
    overflowed_ = true;
    return;
  }
  sets_.push_back((uint32_t)nodes_.size());
  nodes_.push_back({pos, parent, h});
}

bool Matcher::same_stack(uint32_t a, uint32_t b) const {
  while (a != b) {
    if (a == kNone || b == kNone || nodes_[a].pos != nodes_[b].pos) return false;
    a = nodes_[a].parent;
    b = nodes_[b].parent;
  }
  return true;
}

void Matcher::compact(const MatchState& s) {
  std::vector<Node> nodes;
  std::vector<uint32_t> sets;
  std::vector<uint32_t> remap(nodes_.size(), kNone);
  std::vector<uint32_t> chain;
  for (uint32_t i = s.begin; i < s.end; ++i) {
    uint32_t id = sets_[i];
    if (id == kAccept) {
      sets.push_back(kAccept);
      continue;
    }
    chain.clear();
    for (uint32_t c = id; c != kNone && remap[c] == kNone; c = nodes_[c].parent) chain.push_back(c);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      Node n = nodes_[*it];
      if (n.parent != kNone) n.parent = remap[n.parent];
      remap[*it] = (uint32_t)nodes.size();
      nodes.push_back(n);
    }
    sets.push_back(remap[id]);
  }
  nodes_ = std::move(nodes);
  sets_ = std::move(sets);
  nodes_.reserve(256);
  sets_.reserve(256);
  state_ = {0, (uint32_t)sets_.size(), s.cp, s.need, s.len};
}

}  // namespace kvw::grammar
