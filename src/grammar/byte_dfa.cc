#include "grammar/byte_dfa.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "grammar/byte_nfa.h"

namespace kvw::grammar {
namespace {

// Bytes the NFA's vectors take per state while building (two empty vectors and a few edges).
constexpr size_t kNfaBytesPerState = 96;

// Subset construction. A DFA state is the sorted set of the NFA states it stands for, closed
// under epsilon moves and kept to the states that matter (with byte edges, or final).
class Determiniser {
 public:
  Determiniser(const ByteNfa& nfa, size_t max_bytes) : nfa_(nfa), max_bytes_(max_bytes) {
    stamp_.assign(nfa.num_states(), 0);
  }

  // False when the automaton outgrows max_bytes.
  bool run(std::array<uint8_t, 256>* byte_class, uint32_t* num_classes, std::vector<uint32_t>* next,
           std::vector<uint8_t>* accepting) {
    classes(byte_class, num_classes);
    nc_ = *num_classes;
    next_ = next;
    accepting_ = accepting;
    next->assign(nc_, ByteDfa::kDead);  // row 0: dead
    accepting->assign(1, 0);
    std::vector<uint32_t> seed = {nfa_.start};
    closure(&seed);
    if (intern(seed) != ByteDfa::kStart) return false;
    std::vector<std::vector<uint32_t>> targets(nc_);
    for (uint32_t s = ByteDfa::kStart; s < sets_.size(); ++s) {
      for (auto& t : targets) t.clear();
      for (uint32_t q : sets_[s]) {
        for (const ByteNfa::Edge& e : nfa_.edges[q]) {
          for (uint32_t c = (*byte_class)[e.lo]; c <= (*byte_class)[e.hi]; ++c) {
            targets[c].push_back(e.to);
          }
        }
      }
      for (uint32_t c = 0; c < nc_; ++c) {
        if (targets[c].empty()) continue;
        closure(&targets[c]);
        const uint32_t id = intern(targets[c]);
        if (id == ByteDfa::kDead && failed_) return false;
        (*next_)[(size_t)s * nc_ + c] = id;
      }
    }
    return !failed_;
  }

 private:
  // Cuts between bytes where some edge starts or ends; bytes between two cuts behave alike.
  void classes(std::array<uint8_t, 256>* byte_class, uint32_t* num_classes) const {
    std::array<bool, 257> cut{};
    for (const auto& edges : nfa_.edges) {
      for (const ByteNfa::Edge& e : edges) cut[e.lo] = cut[e.hi + 1] = true;
    }
    uint32_t c = 0;
    for (int b = 0; b < 256; ++b) {
      if (b > 0 && cut[b]) ++c;
      (*byte_class)[b] = (uint8_t)c;
    }
    *num_classes = c + 1;
  }

  // Replaces `set` (seeds) by its sorted epsilon closure of states that matter.
  void closure(std::vector<uint32_t>* set) {
    ++epoch_;
    stack_.assign(set->begin(), set->end());
    set->clear();
    while (!stack_.empty()) {
      const uint32_t q = stack_.back();
      stack_.pop_back();
      if (stamp_[q] == epoch_) continue;
      stamp_[q] = epoch_;
      if (!nfa_.edges[q].empty() || q == nfa_.accept) set->push_back(q);
      for (uint32_t t : nfa_.eps[q]) {
        if (stamp_[t] != epoch_) stack_.push_back(t);
      }
    }
    std::sort(set->begin(), set->end());
  }

  // The id of this set's state, added when new; kDead for the empty set or (failed_) when a
  // new state would not fit.
  uint32_t intern(const std::vector<uint32_t>& set) {
    if (set.empty()) return ByteDfa::kDead;
    std::string key(reinterpret_cast<const char*>(set.data()), set.size() * 4);
    auto it = ids_.find(key);
    if (it != ids_.end()) return it->second;
    // The table row, the set (kept for the construction) and its key in the map.
    build_bytes_ += nc_ * 4 + 1 + set.size() * 12 + 96;
    if (build_bytes_ > max_bytes_) {
      failed_ = true;
      return ByteDfa::kDead;
    }
    const uint32_t id = (uint32_t)sets_.size();
    ids_.emplace(std::move(key), id);
    sets_.push_back(set);
    next_->resize(next_->size() + nc_, ByteDfa::kDead);
    accepting_->push_back(std::binary_search(set.begin(), set.end(), nfa_.accept));
    return id;
  }

  const ByteNfa& nfa_;
  const size_t max_bytes_;
  uint32_t nc_ = 0;
  std::vector<uint32_t>* next_ = nullptr;
  std::vector<uint8_t>* accepting_ = nullptr;
  std::vector<std::vector<uint32_t>> sets_ = {{}};  // [dfa states] NFA states; 0 = dead
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<uint32_t> stamp_;  // [nfa states] epoch of the last closure that reached it
  uint32_t epoch_ = 0;
  std::vector<uint32_t> stack_;
  size_t build_bytes_ = 0;
  bool failed_ = false;
};

}  // namespace

std::shared_ptr<const ByteDfa> ByteDfa::build(const Grammar& g, size_t max_bytes) {
  auto nfa = build_byte_nfa(g, max_bytes / kNfaBytesPerState);
  if (!nfa) return nullptr;
  auto dfa = std::make_shared<ByteDfa>();
  Determiniser d(*nfa, max_bytes);
  if (!d.run(&dfa->byte_class_, &dfa->num_classes_, &dfa->next_, &dfa->accepting_)) return nullptr;
  dfa->next_.shrink_to_fit();
  if (dfa->memory_bytes() > max_bytes) return nullptr;
  return dfa;
}

std::shared_ptr<const Grammar> with_dfa(std::shared_ptr<const Grammar> g, size_t max_bytes) {
  // Callers without a limit (tests, benchmarks) still get a bounded build.
  constexpr size_t kMaxDfaBytes = size_t{64} << 20;
  const size_t used = g->size_bytes();
  if (used >= max_bytes) return g;
  auto dfa = ByteDfa::build(*g, std::min(max_bytes - used, kMaxDfaBytes));
  if (!dfa) return g;
  auto out = std::make_shared<Grammar>(*g);
  out->dfa = std::move(dfa);
  return out;
}

}  // namespace kvw::grammar
