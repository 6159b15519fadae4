// grammar/grammar_constraint.h: one sequence's constrained decoding: which tokens the grammar
// allows next (mask), and the grammar state advanced by the sampled token (accept).
// mask() walks the shared TokenTrie with the Matcher, pruning a subtree at its first rejected
// byte, so the cost follows the allowed prefixes, not n_vocab separate token tests.
// End-of-generation tokens are allowed only where the grammar may end.
// Owner: one sequence (engine thread); not thread-safe. Grammar and TokenTrie are shared.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/token_trie.h"

namespace kvw::grammar {

class GrammarConstraint {
 public:
  // strip_leading_space: the first generated token's leading space is not part of the text
  // (SPM vocabularies with add_space_prefix: Tokenizer::strips_leading_space(), as the
  // server's StreamDecoder strips it), so the grammar does not see it.
  GrammarConstraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> trie,
                    bool strip_leading_space = false);

  // logits[n_vocab]: every token the grammar does not allow next becomes -inf. Never leaves
  // the row all -inf: if no token fits (a vocabulary that cannot spell the grammar) the EOS
  // stays allowed, and accept() of it then reports the error.
  void mask(float* logits);
  // Allowed tokens as a bitset: bit i of (*bits)[i / 64] (resized to n_vocab bits).
  void fill_allowed(std::vector<uint64_t>* bits);
  // Advances the grammar by `token`. Errors: a token the grammar does not allow here (the
  // grammar state is unchanged), an end-of-generation token before the grammar may end.
  Status accept(int32_t token);
  // The grammar has ended (an EOS was accepted) or can accept nothing more but its end.
  bool done() const { return ended_ || matcher_.is_finished(); }
  bool can_end() const { return matcher_.can_end(); }
  const Matcher& matcher() const { return matcher_; }

 private:
  std::shared_ptr<const TokenTrie> trie_;
  Matcher matcher_;
  bool strip_space_ = false;  // until the first token is accepted
  bool ended_ = false;
  std::vector<MatchState> states_;  // [max_depth + 1] walk scratch
  std::vector<Matcher::Mark> marks_;
  std::vector<uint64_t> bits_;
};

}  // namespace kvw::grammar
