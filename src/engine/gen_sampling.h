// engine/gen_sampling.h: a request's sampling knobs as the engine API takes them.
// Kept apart from queues.h so that seq_sampler.cc needs nothing else of the engine. Plain value
// type; the scheduler never sees sampling (it works with token counts only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "grammar/grammar_trigger.h"
#include "model/logit_bias.h"

namespace kvw {

namespace grammar {
struct Grammar;
class TokenTrie;
class ContextMaskCache;
class DfaMaskCache;
}  // namespace grammar

// Constrained decoding (issue 31): the grammar every sampled token must follow; null = off.
// shared_ptr: both parts are immutable and shared (the grammar by the request's n choices, the
// trie by every request on this tokenizer); each sequence keeps its own matcher in SeqSampler.
struct GenConstraint {
  std::shared_ptr<const grammar::Grammar> grammar;
  std::shared_ptr<const grammar::TokenTrie> trie;  // TokenTrie::from_tokenizer, n_vocab tokens
  bool strip_leading_space = false;                // Tokenizer::strips_leading_space()
  size_t max_cached_masks = 16;                    // mask cache entries, n_vocab / 8 B each
  // Per-stack masks shared by the request's sequences (thread-safe, bounded by its own byte
  // limit, charged to the request's memory); null = every new state walks the trie.
  std::shared_ptr<grammar::ContextMaskCache> context_masks;
  // For a regular grammar (Grammar::dfa) instead: masks by class of DFA states, shared alike.
  std::shared_ptr<grammar::DfaMaskCache> dfa_masks;
  // Non-empty: lazy, the output is free until one of these appears (tool_choice "auto").
  std::vector<grammar::GrammarTrigger> triggers;
};

inline constexpr int32_t kMaxLogprobs = 20;  // OpenAI's top_logprobs limit

// Sampling knobs of one request (the engine maps them onto model/sampling.h's Sampler).
struct GenSampling {
  float temperature = 0.0f;  // 0 = greedy (argmax, lowest id on ties)
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  // vLLM's repetition_penalty over every distinct token of the prompt (as the engine runs it,
  // after overflow handling) and the output so far: positive logits / it, negative x it.
  // 1 = off; > 0.
  float repetition_penalty = 1.0f;
  // OpenAI-style penalties over the generated tokens only: logit -= presence * [count > 0]
  // + frequency * count. 0 = off; each in [-2, 2].
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  // Log-probabilities to return with each token: -1 = none; k >= 0 = the sampled token's
  // log-probability (of the model's raw distribution, before penalties and temperature, as
  // vLLM reports) plus the k most likely alternatives (k <= 20).
  int32_t logprobs = -1;
  // OpenAI logit_bias: (token id, bias in [-100, 100]) added to that token's logit before
  // penalties and sampling. Ids must be in [0, n_vocab).
  LogitBias logit_bias = {};  // shared by the request's choices
  GenConstraint constraint = {};
  // vLLM's min_tokens: until this many tokens are generated, end-of-generation tokens and
  // stop_token_ids cannot be sampled (the server also ignores stop strings until then).
  int32_t min_tokens = 0;
  // vLLM's stop_token_ids: sampling one ends the request (FinishReason::kStop; it is the last
  // output token). Sorted, distinct, each in [0, n_vocab); shared by the request's choices.
  std::shared_ptr<const std::vector<int32_t>> stop_token_ids = {};
};

}  // namespace kvw
