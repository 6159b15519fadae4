#include "grammar/grammar_constraint.h"

#include <algorithm>
#include <limits>
#include <string>

namespace kvw::grammar {

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> g,
                                     std::shared_ptr<const TokenTrie> trie,
                                     bool strip_leading_space, size_t max_cached_masks)
    : trie_(std::move(trie)),
      matcher_(std::move(g)),
      strip_space_(strip_leading_space),
      max_cached_(max_cached_masks) {
  states_.resize(trie_->max_depth() + 1u);
  marks_.resize(trie_->max_depth() + 1u);
}

void GrammarConstraint::fill_allowed(std::vector<uint64_t>* bits) {
  if (max_cached_ == 0) return walk_trie(bits);
  std::string key;
  matcher_.state_key(&key);
  key.push_back(strip_space_ ? 'S' : '-');
  auto it = cache_.find(key);
  if (it != cache_.end()) {
    ++num_cache_hits_;
    *bits = it->second;
    return;
  }
  walk_trie(bits);
  if (cache_.size() >= max_cached_) {
    cache_.erase(cache_order_.front());
    cache_order_.pop_front();
  }
  cache_order_.push_back(key);
  cache_.emplace(std::move(key), *bits);
}

// Self-loops: inside a string (or a run of digits) most characters lead back to the very same
// state. Transitions from the root state are memoised per character as reject / self / other,
// so a trie node under a self-loop costs a table lookup instead of a matcher step (~33 ns).
// root_like[d]: states_[d] has the root's stacks (possibly with a partial UTF-8 character).
void GrammarConstraint::walk_trie(std::vector<uint64_t>* bits) {
  enum : uint8_t { kUnknown, kReject, kSelf, kOther };
  bits->assign(((size_t)trie_->n_vocab() + 63) / 64, 0);
  uint64_t* out = bits->data();
  const auto& nodes = trie_->nodes();
  const int32_t* ids = trie_->token_ids().data();
  const MatchState root = matcher_.state();
  states_[0] = root;
  marks_[0] = matcher_.mark();
  root_like_.assign(states_.size(), 0);
  root_like_[0] = 1;
  uint8_t ascii[128] = {};
  // Code-point memo: a flat table for the BMP (64 KiB per engine thread, cleared per walk:
  // a hash map lookup was 13% of a 152k-token walk), a map beyond it.
  thread_local std::vector<uint8_t> bmp_memo;
  bmp_memo.assign(0x10000, kUnknown);
  cp_memo_.clear();
  const uint32_t n = (uint32_t)nodes.size();
  const uint64_t steps_at_start = matcher_.num_expand_steps();
  for (uint32_t i = 0; i < n;) {
    // An ambiguous grammar can make every node costly: stop the walk (accept() then fails).
    if (matcher_.overflowed() || matcher_.num_expand_steps() - steps_at_start > kMaxWalkSteps) {
      matcher_.set_overflowed();
      break;
    }
    const TokenTrie::Node& nd = nodes[i];
    const uint16_t d = nd.depth;
    const MatchState& prev = states_[d - 1];
    matcher_.rollback(marks_[d - 1]);
    uint8_t* memo = nullptr;
    if (d == 1 && strip_space_ && nd.byte == ' ') {
      states_[1] = root;  // the stripped leading space: no grammar input
      root_like_[1] = 1;
      marks_[1] = marks_[0];
      goto allowed;
    }
    if (root_like_[d - 1]) {
      if (prev.need == 0 && nd.byte < 0x80) {
        memo = &ascii[nd.byte];
      } else if (prev.need == 1 && (nd.byte & 0xC0) == 0x80) {
        const uint32_t cp = (prev.cp << 6) | (nd.byte & 0x3F);
        memo = cp < 0x10000 ? &bmp_memo[cp] : &cp_memo_[cp];
      }
      if (memo && *memo == kReject) {
        i = nd.skip;
        continue;
      }
      if (memo && *memo == kSelf) {
        states_[d] = root;
        root_like_[d] = 1;
        marks_[d] = marks_[d - 1];
        goto allowed;
      }
    }
    if (!matcher_.advance(prev, nd.byte, &states_[d])) {
      if (memo) *memo = kReject;
      i = nd.skip;
      continue;
    }
    // A lead or middle byte keeps the stacks (only the partial character changes).
    root_like_[d] = root_like_[d - 1] && states_[d].need > 0;
    if (memo) {
      *memo = matcher_.same_content(states_[d], root) ? kSelf : kOther;
      if (*memo == kSelf) root_like_[d] = 1, states_[d] = root;
    }
    marks_[d] = matcher_.mark();
  allowed:
    for (uint32_t t = nd.tok_begin; t < nd.tok_end; ++t) {
      out[ids[t] >> 6] |= uint64_t{1} << (ids[t] & 63);
    }
    ++i;
  }
  matcher_.rollback(marks_[0]);
  if (matcher_.can_end()) {
    for (int32_t id : trie_->eog_ids()) out[id >> 6] |= uint64_t{1} << (id & 63);
  }
}

void GrammarConstraint::mask(float* logits) {
  fill_allowed(&bits_);
  bool any = false;
  const float ninf = -std::numeric_limits<float>::infinity();
  const int32_t n_vocab = trie_->n_vocab();
  for (int32_t w = 0; w * 64 < n_vocab; ++w) {
    const uint64_t word = bits_[w];
    if (word == ~uint64_t{0}) {
      any = true;
      continue;
    }
    const int32_t begin = w * 64, end = std::min(n_vocab, begin + 64);
    if (word == 0) {
      std::fill(logits + begin, logits + end, ninf);  // sparse masks: whole words, vectorised
      continue;
    }
    any = true;
    // Visit only the disallowed tokens (inside a string nearly every word is almost full).
    uint64_t off = ~word;
    if (end - begin < 64) off &= (uint64_t{1} << (end - begin)) - 1;
    for (; off; off &= off - 1) logits[begin + __builtin_ctzll(off)] = ninf;
  }
  if (!any && !trie_->eog_ids().empty()) logits[trie_->eog_ids()[0]] = 0.0f;
}

Error GrammarConstraint::overflow_error() {
  return Error{"the grammar is too ambiguous to follow (over " +
               std::to_string(Matcher::kMaxStacks) + " live alternatives, or over " +
               std::to_string(Matcher::kMaxExpandSteps) + " expansion steps per character or " +
               std::to_string(kMaxWalkSteps) + " per token mask)"};
}

size_t GrammarConstraint::memory_bytes() const {
  size_t n = sizeof(*this) + matcher_.arena_bytes() + mask_cache_bytes() + bits_.capacity() * 8;
  n += states_.capacity() * sizeof(MatchState) + marks_.capacity() * sizeof(Matcher::Mark);
  n += root_like_.capacity() + cp_memo_.size() * 16;
  for (const auto& k : cache_order_) n += 2 * k.capacity();  // key in the map and the FIFO
  return n;
}

Status GrammarConstraint::accept_text(std::string_view text) {
  if (ended_) return Error{"the grammar has already ended"};
  if (!matcher_.accept_bytes(text)) return Error{"text is not allowed by the grammar here"};
  if (!text.empty()) strip_space_ = false;
  return Status::ok_status();
}

Status GrammarConstraint::accept(int32_t token) {
  if (matcher_.overflowed()) return overflow_error();
  if (token < 0 || token >= trie_->n_vocab()) {
    return Error{"token " + std::to_string(token) + " is out of the vocabulary"};
  }
  if (ended_) return Error{"the grammar has already ended"};
  if (trie_->is_eog(token)) {
    if (!matcher_.can_end()) {
      return Error{"end of generation (token " + std::to_string(token) +
                   ") before the grammar is complete"};
    }
    ended_ = true;
    return Status::ok_status();
  }
  std::string_view bytes = trie_->token_bytes(token);
  if (bytes.empty())
    return Error{"token " + std::to_string(token) + " is never allowed by a grammar"};
  if (strip_space_ && bytes[0] == ' ') bytes.remove_prefix(1);
  if (!matcher_.accept_bytes(bytes)) {
    return Error{"token " + std::to_string(token) + " is not allowed by the grammar here"};
  }
  if (matcher_.overflowed()) return overflow_error();
  strip_space_ = false;
  return Status::ok_status();
}

}  // namespace kvw::grammar
