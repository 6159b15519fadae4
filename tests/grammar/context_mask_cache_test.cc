// The context-mask fast path (context_mask_cache.h) must give exactly the mask of a whole-trie
// walk: for random reachable states of every suite schema, json_object, regexes and GBNF, over
// the default model's 4k vocabulary and a punctuation-heavy synthetic one (tokens like `"},`
// that leave a string and close objects: the uncertain tokens a key cannot decide).
#include "grammar/context_mask_cache.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "grammar/gbnf_parser.h"
#include "grammar/grammar_constraint.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "schema_suite.h"
#include "test_vocab.h"

namespace kvw::grammar {
namespace {

// 2,000 distinct tokens over JSON's characters (and two non-ASCII letters), id 0 = EOS.
std::shared_ptr<const TokenTrie> punctuation_trie() {
  static const auto trie = [] {
    const std::vector<std::string> alphabet = {"{", "}", "[", "]", "\"", ",", ":", " ",  "\n",
                                               "a", "b", "e", "1", "0",  "-", ".", "\\", "n",
                                               "t", "r", "u", "l", "f",  "s", "é", "中"};
    std::mt19937 rng(3);
    std::vector<std::string> tokens = {""};
    std::set<std::string> seen;
    for (const auto& a : alphabet) tokens.push_back(a), seen.insert(a);
    while (tokens.size() < 2000) {
      std::string t;
      const int len = 2 + (int)(rng() % 5);
      for (int i = 0; i < len; ++i) t += alphabet[rng() % alphabet.size()];
      if (seen.insert(t).second) tokens.push_back(t);
    }
    return std::make_shared<const TokenTrie>(std::move(tokens), std::vector<int32_t>{0});
  }();
  return trie;
}

std::vector<std::shared_ptr<const Grammar>> grammars() {
  std::vector<std::shared_ptr<const Grammar>> out;
  for (const char* s : schema_suite())
    out.push_back(compile_json_schema(std::string_view(s)).value());
  out.push_back(compile_json_object().value());
  out.push_back(compile_regex(R"([a-z]{2,6}@(ab|ba)\.(com|org)|\d{3}-\d{4})").value());
  out.push_back(compile_regex(R"(("[^"]*",)*"[^"]*")").value());
  out.push_back(parse_gbnf(R"(root ::= item ("," item)*
item ::= "\"" [a-z]* "\"" | "[" root? "]" | [0-9]+)")
                    .value());
  return out;
}

// Drives `num_seqs` random walks per grammar; at every step the fast constraint (shared
// context cache, no exact cache) and the slow one (whole-trie walks) must agree bit for bit.
void check_equal_masks(std::shared_ptr<const TokenTrie> trie, int num_seqs, int num_steps,
                       int* fast_steps) {
  auto gs = grammars();
  for (size_t gi = 0; gi < gs.size(); ++gi) {
    auto cache = std::make_shared<ContextMaskCache>(gs[gi], trie, size_t{64} << 20);
    for (int seq = 0; seq < num_seqs; ++seq) {
      GrammarConstraint slow(gs[gi], trie, false, 0);
      GrammarConstraint fast(gs[gi], trie, false, 0, cache);
      std::mt19937 rng((uint32_t)(gi * 100 + seq));
      std::vector<uint64_t> a, b;
      for (int step = 0; step < num_steps && !slow.done(); ++step) {
        slow.fill_allowed(&a);
        const uint64_t walks = fast.num_trie_walks();
        fast.fill_allowed(&b);
        *fast_steps += fast.num_trie_walks() == walks;
        ASSERT_EQ(a, b) << "grammar " << gi << " seq " << seq << " step " << step;
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < trie->n_vocab(); ++id) {
          if (a[id >> 6] >> (id & 63) & 1) allowed.push_back(id);
        }
        if (allowed.empty()) break;  // the vocabulary cannot spell what the grammar needs
        // Prefer tokens that leave the current state (short or punctuation ones) half the time,
        // so walks visit many states rather than staying inside one string.
        int32_t t = allowed[rng() % allowed.size()];
        if (rng() % 2) {
          for (int tries = 0; tries < 8 && trie->token_bytes(t).size() > 2; ++tries) {
            t = allowed[rng() % allowed.size()];
          }
        }
        if (trie->is_eog(t)) break;
        ASSERT_TRUE(slow.accept(t).ok());
        ASSERT_TRUE(fast.accept(t).ok());
      }
    }
  }
}

TEST(ContextMaskCache, FastMaskEqualsTrieWalkOnRandomStatesDefaultVocab) {
  int fast_steps = 0;
  check_equal_masks(default_trie(), 3, 40, &fast_steps);
  EXPECT_GT(fast_steps, 1000);  // the fast path was taken, not the fallback
}

TEST(ContextMaskCache, FastMaskEqualsTrieWalkOnRandomStatesPunctuationVocab) {
  int fast_steps = 0;
  check_equal_masks(punctuation_trie(), 3, 40, &fast_steps);
  EXPECT_GT(fast_steps, 300);
}

TEST(ContextMaskCache, EntriesAreSharedAcrossSequencesAndBoundedByMaxBytes) {
  auto trie = default_trie();
  auto g = compile_json_object().value();
  auto cache = std::make_shared<ContextMaskCache>(g, trie, size_t{1} << 20);
  std::vector<uint64_t> bits;
  auto masks_in_string = [&](const char* prefix) {
    GrammarConstraint c(g, trie, false, 0, cache);
    EXPECT_TRUE(c.accept_text(prefix).ok());
    c.fill_allowed(&bits);
    return c.num_trie_walks();
  };
  EXPECT_EQ(masks_in_string(R"({"key": "va)"), 1u);  // first sighting of the keys: a walk
  const std::vector<uint64_t> in_string = bits;
  EXPECT_EQ(cache->num_misses(), 0u);
  EXPECT_EQ(masks_in_string(R"({"other": "x)"), 0u);  // second: the entries are computed
  const uint64_t misses = cache->num_misses();
  EXPECT_GT(misses, 0u);
  EXPECT_EQ(masks_in_string(R"({"q": "zz)"), 0u);  // a third sequence: hits
  EXPECT_EQ(cache->num_misses(), misses);
  EXPECT_GE(cache->num_hits(), misses);
  EXPECT_LE(cache->memory_bytes(), cache->max_bytes() + sizeof(ContextMaskCache));

  // An entry larger than the budget is not kept: the constraint walks the trie instead.
  auto tiny = std::make_shared<ContextMaskCache>(g, trie, 64);
  std::vector<uint64_t> walked;
  for (int i = 0; i < 2; ++i) {
    GrammarConstraint c(g, trie, false, 0, tiny);
    ASSERT_TRUE(c.accept_text(R"({"key": "va)").ok());
    c.fill_allowed(&walked);
    EXPECT_EQ(c.num_trie_walks(), 1u);
  }
  EXPECT_EQ(walked, in_string);
}

}  // namespace
}  // namespace kvw::grammar
