// grammar/grammar_constraint.h: one sequence's constrained decoding: which tokens the grammar
// allows next (mask), and the grammar state advanced by the sampled token (accept).
// mask() walks the shared TokenTrie with the Matcher, pruning a subtree at its first rejected
// byte, so the cost follows the allowed prefixes, not n_vocab separate token tests. A regular
// grammar (Grammar::dfa: regex, choice) walks it through the DFA's table instead, and its masks
// are cached by DFA state; the Matcher still follows every token (accept, can_end, done).
// End-of-generation tokens are allowed only where the grammar may end.
// Owner: one sequence (engine thread); not thread-safe. Grammar and TokenTrie are shared.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "grammar/byte_dfa.h"
#include "grammar/context_mask_cache.h"
#include "grammar/dfa_mask_cache.h"
#include "grammar/grammar.h"
#include "grammar/grammar_trigger.h"
#include "grammar/matcher.h"
#include "grammar/token_trie.h"
#include "grammar/token_walk.h"

namespace kvw::grammar {

class GrammarConstraint {
 public:
  // Matcher work one mask may do (~100 ms); a grammar that needs more is refused by accept().
  static constexpr uint64_t kMaxWalkSteps = grammar::kMaxWalkSteps;

  // strip_leading_space: the first generated token's leading space is not part of the text
  // (SPM vocabularies with add_space_prefix: Tokenizer::strips_leading_space(), as the
  // server's StreamDecoder strips it), so the grammar does not see it.
  // max_cached_masks: allowed-token bitsets kept per exact matcher state (n_vocab / 8 bytes
  // each; 0 = off). Inside a string or a number the state repeats token after token, so a hit
  // replaces the trie walk (~14 ms at 152k tokens) by a copy; mask_cache_bytes() reports it.
  // context_masks (optional, shared by the request's sequences): a state missing from the
  // exact cache is then assembled from per-stack entries (context_mask_cache.h) instead of a
  // whole-trie walk; the mask is the same.
  // dfa_masks (optional, shared by the request's sequences; for g->dfa): masks of a regular
  // grammar by class of DFA states, read in place (no copy) before the exact cache.
  GrammarConstraint(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> trie,
                    bool strip_leading_space = false, size_t max_cached_masks = 16,
                    std::shared_ptr<ContextMaskCache> context_masks = nullptr,
                    std::shared_ptr<DfaMaskCache> dfa_masks = nullptr);

  // Makes the constraint lazy (call before the first token): no mask until a trigger appears
  // in the output (as text, or as its control token), then the grammar starts at the
  // trigger's first byte. Output the grammar refuses right at the trigger leaves the
  // constraint off for good (the text then parses as plain content), never an error. No
  // firing trigger: constrained from the first token (the default). Every entry with a
  // token_id (firing or not) is a control token the grammar may write as its text.
  void set_triggers(std::vector<GrammarTrigger> triggers);
  bool waiting_for_trigger() const { return free_; }

  // logits[n_vocab]: every token the grammar does not allow next becomes -inf. Never leaves
  // the row all -inf: if no token fits (a vocabulary that cannot spell the grammar) the EOS
  // stays allowed, and accept() of it then reports the error.
  void mask(float* logits);
  // Allowed tokens as a bitset: bit i of (*bits)[i / 64] (resized to n_vocab bits).
  void fill_allowed(std::vector<uint64_t>* bits);
  // Advances the grammar by `token`. Errors: a token the grammar does not allow here (the
  // grammar state is unchanged), an end-of-generation token before the grammar may end, and a
  // grammar too ambiguous to follow within the work limits (Matcher::overflowed()).
  Status accept(int32_t token);
  // Advances by raw text (a forced prefix; benchmarks and tests that set up a state).
  Status accept_text(std::string_view text);
  // The grammar has ended (an EOS was accepted) or can accept nothing more but its end.
  bool done() const { return ended_ || (!free_ && matcher_.is_finished()); }
  bool can_end() const { return free_ || matcher_.can_end(); }
  const Matcher& matcher() const { return matcher_; }
  size_t mask_cache_bytes() const { return cache_.size() * num_words() * 8; }
  // Bytes this sequence holds now: matcher arenas, mask cache and walk scratch (the Grammar and
  // TokenTrie are shared and counted once by their owner). Upper bound to reserve per sequence:
  // (max_cached_masks + 1) * n_vocab / 8 + the arenas (a few KiB for JSON-schema grammars).
  size_t memory_bytes() const;
  uint64_t num_cache_hits() const { return num_cache_hits_; }
  uint64_t num_trie_walks() const { return num_trie_walks_; }  // masks that walked the trie
  uint64_t num_dfa_cache_hits() const { return num_dfa_cache_hits_; }
  bool uses_dfa() const { return dfa_ != nullptr; }
  // Uncertain tokens checked against full stacks (context-mask path), in all.
  uint64_t num_uncertain_checked() const { return num_uncertain_checked_; }

 private:
  std::shared_ptr<const TokenTrie> trie_;
  Matcher matcher_;
  bool strip_space_ = false;  // until the first token is accepted
  bool ended_ = false;
  // Lazy: the output is free (no trigger yet, or the grammar refused the trigger's text).
  bool free_ = false;
  std::vector<GrammarTrigger> triggers_;  // cleared once one fired or was refused
  // Control tokens that stand for grammar text (GrammarTrigger::token_id), by id.
  std::vector<std::pair<int32_t, std::string>> control_tokens_;
  std::string pending_;     // output tail a trigger may still complete (< longest trigger + token)
  bool start_open_ = true;  // the output's non-space text so far may begin an at_start trigger
  WalkScratch walk_;
  std::vector<uint32_t> key_;  // a stack's top positions (context-mask lookups)
  std::vector<uint64_t> bits_;
  // Exact-state mask cache: key = the committed state (sorted stacks, partial UTF-8, strip flag).
  size_t max_cached_ = 0;
  std::shared_ptr<ContextMaskCache> context_masks_;  // null = whole-trie walks only
  // Entries are shared so that a hit is read in place: copying 19 KB (152k tokens) per step
  // was a third of a hit's cost.
  std::unordered_map<std::string, std::shared_ptr<const std::vector<uint64_t>>> cache_;
  std::deque<std::string> cache_order_;                // FIFO eviction
  std::shared_ptr<DfaMaskCache> dfa_masks_;            // null: the exact cache alone
  std::shared_ptr<const std::vector<uint64_t>> held_;  // the mask being applied (keeps it alive)
  std::vector<std::pair<int32_t, float>> extras_;      // allowed ids outside the trie + logits
  uint64_t num_cache_hits_ = 0;
  uint64_t num_dfa_cache_hits_ = 0;
  uint64_t num_trie_walks_ = 0;
  uint64_t num_uncertain_checked_ = 0;
  std::shared_ptr<const ByteDfa> dfa_;  // Grammar::dfa; dropped if it ever disagrees
  uint32_t dfa_state_ = ByteDfa::kStart;
  std::vector<uint32_t> dfa_walk_;  // [max_depth + 1] walk_trie_dfa's scratch
  void follow_dfa(std::string_view bytes);
  // The text a token stands for: its trie bytes, or a control token's text.
  std::string_view token_text(int32_t token) const;
  bool accepts_text(std::string_view text);  // from the committed state; changes nothing
  size_t num_words() const { return ((size_t)trie_->n_vocab() + 63) / 64; }
  // The trie tokens allowed next: a cached mask or bits_, valid until the next call.
  const uint64_t* allowed_trie_bits();
  // Ids outside the trie allowed next: end of generation where the grammar may end, and
  // control tokens whose text fits (appended to extras_ with a 0 logit).
  void collect_extras();
  void compute_allowed(std::vector<uint64_t>* bits);  // trie tokens only
  bool fill_from_context_masks(std::vector<uint64_t>* bits);
  static Error overflow_error();
  Status watch(int32_t token);  // a token while free: looks for a trigger
};

}  // namespace kvw::grammar
