#include "grammar/grammar_constraint.h"

#include <limits>
#include <string>

namespace kvw::grammar {

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> g,
                                     std::shared_ptr<const TokenTrie> trie,
                                     bool strip_leading_space)
    : trie_(std::move(trie)), matcher_(std::move(g)), strip_space_(strip_leading_space) {
  states_.resize(trie_->max_depth() + 1u);
  marks_.resize(trie_->max_depth() + 1u);
}

void GrammarConstraint::fill_allowed(std::vector<uint64_t>* bits) {
  bits->assign(((size_t)trie_->n_vocab() + 63) / 64, 0);
  uint64_t* out = bits->data();
  const auto& nodes = trie_->nodes();
  const int32_t* ids = trie_->token_ids().data();
  states_[0] = matcher_.state();
  marks_[0] = matcher_.mark();
  const uint32_t n = (uint32_t)nodes.size();
  for (uint32_t i = 0; i < n;) {
    const TokenTrie::Node& nd = nodes[i];
    const uint16_t d = nd.depth;
    matcher_.rollback(marks_[d - 1]);
    if (d == 1 && strip_space_ && nd.byte == ' ') {
      states_[1] = states_[0];  // the stripped leading space: no grammar input
    } else if (!matcher_.advance(states_[d - 1], nd.byte, &states_[d])) {
      i = nd.skip;
      continue;
    }
    marks_[d] = matcher_.mark();
    for (uint32_t t = nd.tok_begin; t < nd.tok_end; ++t)
      out[ids[t] >> 6] |= uint64_t{1} << (ids[t] & 63);
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
    any |= word != 0;
    if (word == ~uint64_t{0}) continue;
    const int32_t end = std::min(n_vocab, (w + 1) * 64);
    for (int32_t i = w * 64; i < end; ++i) {
      if (!((word >> (i & 63)) & 1)) logits[i] = ninf;
    }
  }
  if (!any && !trie_->eog_ids().empty()) logits[trie_->eog_ids()[0]] = 0.0f;
}

Status GrammarConstraint::accept(int32_t token) {
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
  strip_space_ = false;
  return Status::ok_status();
}

}  // namespace kvw::grammar
