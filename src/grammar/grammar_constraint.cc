#include "grammar/grammar_constraint.h"

#include <algorithm>
#include <limits>
#include <string>

#include "grammar/token_mask_apply.h"

namespace kvw::grammar {

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> g,
                                     std::shared_ptr<const TokenTrie> trie,
                                     bool strip_leading_space, size_t max_cached_masks,
                                     std::shared_ptr<ContextMaskCache> context_masks,
                                     std::shared_ptr<DfaMaskCache> dfa_masks)
    : trie_(std::move(trie)),
      matcher_(std::move(g)),
      strip_space_(strip_leading_space),
      max_cached_(max_cached_masks),
      context_masks_(std::move(context_masks)),
      dfa_masks_(std::move(dfa_masks)),
      dfa_(matcher_.grammar().dfa) {}

void GrammarConstraint::follow_dfa(std::string_view bytes) {
  if (!dfa_) return;
  dfa_state_ = dfa_->walk(dfa_state_, bytes);
  // Both recognise the same language, so the Matcher's acceptance keeps the DFA live; should
  // they ever differ, the Matcher (what accept() checks) decides alone from here on.
  if (dfa_state_ == ByteDfa::kDead) dfa_.reset();
}

void GrammarConstraint::fill_allowed(std::vector<uint64_t>* bits) {
  if (free_) {
    bits->assign(num_words(), ~uint64_t{0});
    if (trie_->n_vocab() % 64) bits->back() = (uint64_t{1} << (trie_->n_vocab() % 64)) - 1;
    return;
  }
  const uint64_t* allowed = allowed_trie_bits();
  if (allowed != bits->data()) bits->assign(allowed, allowed + num_words());
  held_.reset();
  collect_extras();
  for (const auto& [id, logit] : extras_) (*bits)[id >> 6] |= uint64_t{1} << (id & 63);
}

const uint64_t* GrammarConstraint::allowed_trie_bits() {
  if (dfa_ && dfa_masks_ && !strip_space_) {
    held_ = dfa_masks_->get(dfa_state_);
    if (held_) {
      ++num_dfa_cache_hits_;
      return held_->data();
    }
  }
  if (max_cached_ == 0) {
    compute_allowed(&bits_);
    return bits_.data();
  }
  std::string key;
  if (dfa_) {
    key.assign(1, 'D').append(reinterpret_cast<const char*>(&dfa_state_), 4);
  } else {
    matcher_.state_key(&key);
  }
  key.push_back(strip_space_ ? 'S' : '-');
  auto it = cache_.find(key);
  if (it != cache_.end()) {
    ++num_cache_hits_;
    held_ = it->second;
    return held_->data();
  }
  auto bits = std::make_shared<std::vector<uint64_t>>();
  compute_allowed(bits.get());
  if (cache_.size() >= max_cached_) {
    cache_.erase(cache_order_.front());
    cache_order_.pop_front();
  }
  cache_order_.push_back(key);
  cache_.emplace(std::move(key), bits);
  held_ = std::move(bits);
  return held_->data();
}

void GrammarConstraint::compute_allowed(std::vector<uint64_t>* bits) {
  if (dfa_) {
    // ~1 table lookup per reached trie node: cheaper than assembling context-mask entries.
    ++num_trie_walks_;
    bits->assign(num_words(), 0);
    walk_trie_dfa(*dfa_, *trie_, dfa_state_, strip_space_, &dfa_walk_, bits->data());
  } else if (!fill_from_context_masks(bits)) {
    ++num_trie_walks_;
    bits->assign(num_words(), 0);
    walk_trie(matcher_, *trie_, matcher_.state(), strip_space_, &walk_, bits->data());
  }
}

void GrammarConstraint::collect_extras() {
  extras_.clear();
  if (matcher_.can_end()) {
    for (int32_t id : trie_->eog_ids()) extras_.push_back({id, 0.0f});
  }
  for (const auto& [id, text] : control_tokens_) {
    if (accepts_text(text)) extras_.push_back({id, 0.0f});
  }
}

std::string_view GrammarConstraint::token_text(int32_t token) const {
  const std::string_view bytes = trie_->token_bytes(token);
  if (!bytes.empty()) return bytes;
  for (const auto& [id, text] : control_tokens_) {
    if (id == token) return text;
  }
  return {};
}

bool GrammarConstraint::accepts_text(std::string_view text) {
  if (dfa_) return dfa_->walk(dfa_state_, text) != ByteDfa::kDead;
  const Matcher::Mark before = matcher_.mark();
  MatchState at = matcher_.state();
  bool ok = true;
  for (size_t i = 0; ok && i < text.size(); ++i) {
    MatchState next;
    ok = matcher_.advance(at, (uint8_t)text[i], &next);
    at = next;
  }
  matcher_.rollback(before);
  return ok;
}

// The union over the state's stacks of (tokens allowed whatever lies below the stack's top
// nodes) and (its uncertain tokens the whole stack accepts). Not taken for the first token of
// a space-stripping vocabulary, in the middle of a UTF-8 character, or once overflowed.
bool GrammarConstraint::fill_from_context_masks(std::vector<uint64_t>* bits) {
  const MatchState& st = matcher_.state();
  if (!context_masks_ || strip_space_ || st.need != 0 || matcher_.overflowed()) return false;
  thread_local std::vector<std::shared_ptr<const ContextMaskCache::Entry>> entries;
  entries.clear();
  bool missing = false;
  for (uint32_t i = 0; i < matcher_.num_stacks(); ++i) {
    bool whole = false;
    if (!matcher_.stack_positions(i, ContextMaskCache::kKeyNodes, &key_, &whole)) {
      entries.push_back(nullptr);  // the finished stack allows only the end
      continue;
    }
    // Every stack's key is looked up (a first sighting is remembered) before giving up.
    entries.push_back(context_masks_->get(key_, whole));
    if (!entries.back()) missing = true;
  }
  if (missing) {
    entries.clear();
    return false;
  }
  const size_t num_words = ((size_t)trie_->n_vocab() + 63) / 64;
  bits->assign(num_words, 0);
  uint64_t* out = bits->data();
  for (uint32_t i = 0; i < entries.size(); ++i) {
    if (!entries[i]) continue;
    const uint64_t* in = entries[i]->accepted.data();
    for (size_t w = 0; w < num_words; ++w) out[w] |= in[w];  // vectorised: 2.4k words at 152k
    if (entries[i]->uncertain.empty()) continue;
    num_uncertain_checked_ += entries[i]->uncertain.size();
    const Matcher::Mark before = matcher_.mark();
    const MatchState one = matcher_.single_stack(i);
    walk_token_list(matcher_, *trie_, one, entries[i]->uncertain, entries[i]->lcp, &walk_, out);
    matcher_.rollback(before);
  }
  entries.clear();  // the entries may be evicted: hold them no longer than this mask
  return true;
}

void GrammarConstraint::mask(float* logits) {
  if (free_) return;
  const uint64_t* allowed = allowed_trie_bits();
  collect_extras();
  for (auto& [id, logit] : extras_) logit = logits[id];
  bool any = apply_token_mask(allowed, trie_->n_vocab(), logits);
  held_.reset();
  for (const auto& [id, logit] : extras_) logits[id] = logit;  // allowed outside the trie
  any = any || !extras_.empty();
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
  n += extras_.capacity() * sizeof(extras_[0]);
  n += walk_.memory_bytes() + key_.capacity() * 4 + pending_.capacity() + dfa_walk_.capacity() * 4;
  for (const auto& t : triggers_) n += sizeof(t) + t.text.capacity();
  for (const auto& c : control_tokens_) n += sizeof(c) + c.second.capacity();
  for (const auto& k : cache_order_) n += 2 * k.capacity();  // key in the map and the FIFO
  return n;
}

Status GrammarConstraint::accept_text(std::string_view text) {
  if (ended_) return Error{"the grammar has already ended"};
  if (!matcher_.accept_bytes(text)) return Error{"text is not allowed by the grammar here"};
  follow_dfa(text);
  if (!text.empty()) strip_space_ = false;
  return Status::ok_status();
}

Status GrammarConstraint::accept(int32_t token) {
  if (matcher_.overflowed()) return overflow_error();
  if (token < 0 || token >= trie_->n_vocab()) {
    return Error{"token " + std::to_string(token) + " is out of the vocabulary"};
  }
  if (ended_) return Error{"the grammar has already ended"};
  if (free_) return watch(token);
  if (trie_->is_eog(token)) {
    if (!matcher_.can_end()) {
      return Error{"end of generation (token " + std::to_string(token) +
                   ") before the grammar is complete"};
    }
    ended_ = true;
    return Status::ok_status();
  }
  std::string_view bytes = token_text(token);
  if (bytes.empty())
    return Error{"token " + std::to_string(token) + " is never allowed by a grammar"};
  if (strip_space_ && bytes[0] == ' ') bytes.remove_prefix(1);
  if (!matcher_.accept_bytes(bytes)) {
    return Error{"token " + std::to_string(token) + " is not allowed by the grammar here"};
  }
  follow_dfa(bytes);
  if (matcher_.overflowed()) return overflow_error();
  strip_space_ = false;
  return Status::ok_status();
}

void GrammarConstraint::set_triggers(std::vector<GrammarTrigger> triggers) {
  triggers_.clear();
  control_tokens_.clear();
  for (GrammarTrigger& t : triggers) {
    if (t.token_id >= 0 && t.token_id < trie_->n_vocab() && !t.text.empty()) {
      control_tokens_.push_back({t.token_id, t.text});
    }
    if (t.fires) triggers_.push_back(std::move(t));
  }
  free_ = !triggers_.empty();
}

Status GrammarConstraint::watch(int32_t token) {
  if (trie_->is_eog(token)) {
    ended_ = true;
    return Status::ok_status();
  }
  if (triggers_.empty()) return Status::ok_status();  // refused once: free for good
  // Empty for other control tokens: they write no text the grammar could see.
  pending_ += token_text(token);
  constexpr std::string_view kSpace = " \t\r\n";
  const size_t first = pending_.find_first_not_of(kSpace);
  const std::string_view text =
      first == std::string::npos ? std::string_view() : std::string_view(pending_).substr(first);
  size_t at = std::string::npos;
  bool open = false;
  for (const GrammarTrigger& t : triggers_) {
    if (!t.at_start) {
      at = std::min(at, pending_.find(t.text));
    } else if (start_open_ && text.starts_with(t.text)) {
      at = std::min(at, first);
    } else if (start_open_ && std::string_view(t.text).starts_with(text)) {
      open = true;  // the output so far may still become this trigger
    }
  }
  if (at == std::string::npos) {
    start_open_ = open;
    size_t keep = 0;  // a tail that may be the start of a trigger
    for (const GrammarTrigger& t : triggers_) keep = std::max(keep, t.text.size() - 1);
    if (first == std::string::npos) {
      pending_.clear();  // only spaces: they neither start nor end a trigger
    } else if (!start_open_ && pending_.size() > keep) {
      pending_.erase(0, pending_.size() - keep);
    }
    return Status::ok_status();
  }
  // Triggered: the grammar starts at the trigger's first byte.
  const std::string from_trigger = pending_.substr(at);
  pending_.clear();
  pending_.shrink_to_fit();
  triggers_.clear();
  if (!matcher_.accept_bytes(from_trigger)) return Status::ok_status();  // stays free
  follow_dfa(from_trigger);
  free_ = false;
  strip_space_ = false;
  if (matcher_.overflowed()) return overflow_error();
  return Status::ok_status();
}

}  // namespace kvw::grammar
