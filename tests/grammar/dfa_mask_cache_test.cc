// Masks of regular grammars by class of DFA states (dfa_mask_cache.h): a class's mask equals
// the trie walk's from every state in it, a counted repetition folds onto few classes, the
// cache stays within its bytes (falling back to a walk when a mask cannot fit), and a
// constraint that reads it gives the same masks as one that walks. Also the SIMD mask
// application (token_mask_apply.h) against a per-token reference, and the trie folded by byte
// classes (class_trie.h) against the byte trie's walk.
#include "grammar/dfa_mask_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "grammar/class_trie.h"
#include "grammar/grammar_constraint.h"
#include "grammar/regex.h"
#include "grammar/token_mask_apply.h"
#include "grammar/token_walk.h"
#include "test_vocab.h"

namespace kvw::grammar {
namespace {

// Single bytes, then pieces over the regexes' alphabet (up to 6 bytes). Id 0 = EOS.
std::shared_ptr<const TokenTrie> piece_trie() {
  static const auto trie = [] {
    const std::string alphabet = "abcz09-. \nXY";
    std::mt19937 rng(3);
    std::vector<std::string> tokens = {""};
    for (int b = 1; b < 128; ++b) tokens.push_back(std::string(1, (char)b));
    std::set<std::string> seen(tokens.begin(), tokens.end());
    while (tokens.size() < 2000) {
      std::string t;
      const int len = 1 + (int)(rng() % 6);
      for (int i = 0; i < len; ++i) t += alphabet[rng() % alphabet.size()];
      if (seen.insert(t).second) tokens.push_back(t);
    }
    return std::make_shared<const TokenTrie>(std::move(tokens), std::vector<int32_t>{0});
  }();
  return trie;
}

std::vector<uint64_t> walked(const ByteDfa& dfa, const TokenTrie& trie, uint32_t state) {
  std::vector<uint64_t> bits(((size_t)trie.n_vocab() + 63) / 64, 0);
  std::vector<uint32_t> scratch;
  walk_trie_dfa(dfa, trie, state, false, &scratch, bits.data());
  return bits;
}

TEST(DfaMaskCache, EveryStateGetsItsWalkedMaskAndRepetitionsShareClasses) {
  auto trie = piece_trie();
  for (const char* re :
       {R"((\d{2}-[a-c]{1,3}\.){1,30})", R"((ab|cz){5,40}X?)", R"([a-c]*9\d{0,20})"}) {
    SCOPED_TRACE(re);
    auto g = compile_regex(re).value();
    ASSERT_NE(g->dfa, nullptr);
    DfaMaskCache cache(g->dfa, trie, 64u << 20);
    for (uint32_t s = ByteDfa::kStart; s < g->dfa->num_states(); ++s) {
      auto m = cache.get(s);
      ASSERT_NE(m, nullptr);
      ASSERT_EQ(*m, walked(*g->dfa, *trie, s)) << "state " << s;
    }
    EXPECT_EQ(cache.get(ByteDfa::kDead), nullptr);
    // The walk ran once per class, not once per state.
    EXPECT_EQ(cache.num_misses(), cache.num_classes() - 1);
  }
  // Thirty repetitions of a 7-byte unit, tokens of at most 6 bytes: all but the states within
  // a token's reach of either end fold onto the unit's positions.
  auto g = compile_regex(R"((\d{2}-[a-c]{1,3}\.){1,30})").value();
  DfaMaskCache cache(g->dfa, trie, 64u << 20);
  EXPECT_LT(cache.num_classes() * 4, g->dfa->num_states())
      << cache.num_classes() << " classes of " << g->dfa->num_states() << " states";
}

TEST(DfaMaskCache, StaysWithinItsBytesAndRefusesAMaskThatCannotFit) {
  auto trie = piece_trie();
  auto g = compile_regex(R"(([a-c]{1,3}[0-9]{2}){1,30})").value();
  const size_t mask_bytes = ((size_t)trie->n_vocab() + 63) / 64 * 8 + 64;
  const size_t limit = 3 * mask_bytes + g->dfa->num_states() * 4;
  DfaMaskCache cache(g->dfa, trie, limit);
  for (uint32_t s = ByteDfa::kStart; s < g->dfa->num_states(); ++s) {
    auto m = cache.get(s);
    ASSERT_NE(m, nullptr);
    ASSERT_EQ(*m, walked(*g->dfa, *trie, s));
    ASSERT_LE(cache.memory_bytes(), limit + sizeof(DfaMaskCache));
  }
  DfaMaskCache tiny(g->dfa, trie, mask_bytes / 2);
  EXPECT_EQ(tiny.get(ByteDfa::kStart), nullptr);
  // A constraint over the tiny cache walks instead, and its masks are still right.
  auto small = std::make_shared<DfaMaskCache>(g->dfa, trie, mask_bytes / 2);
  GrammarConstraint c(g, trie, false, 0, nullptr, small);
  std::vector<uint64_t> bits;
  c.fill_allowed(&bits);
  EXPECT_EQ(bits, walked(*g->dfa, *trie, ByteDfa::kStart));
  EXPECT_EQ(c.num_trie_walks(), 1u);
}

// Random sequences: the cached masks (and the logits mask() leaves) equal a walking
// constraint's at every step, EOS only where the regex may end; no constraint walks the trie
// itself, and each class is walked once for all the sequences.
TEST(DfaMaskCache, ConstraintsReadingItMaskLikeWalkingOnes) {
  auto trie = piece_trie();
  auto g = compile_regex(R"((\d{2}-[a-c]{1,3}\. ?){2,12})").value();
  auto shared = std::make_shared<DfaMaskCache>(g->dfa, trie, 64u << 20);
  std::mt19937 rng(21);
  const int32_t n = trie->n_vocab();
  uint64_t walks = 0, hits = 0;
  for (int seq = 0; seq < 6; ++seq) {
    GrammarConstraint fast(g, trie, false, 16, nullptr, shared);
    GrammarConstraint slow(g, trie, false, 0);
    std::vector<uint64_t> a, b;
    for (int step = 0; step < 40 && !fast.done(); ++step) {
      fast.fill_allowed(&a);
      slow.fill_allowed(&b);
      ASSERT_EQ(a, b) << "seq " << seq << " step " << step;
      std::vector<float> la(n), lb(n);
      for (int32_t i = 0; i < n; ++i) la[i] = lb[i] = (float)(rng() % 1000) / 100.0f;
      fast.mask(la.data());
      slow.mask(lb.data());
      ASSERT_EQ(la, lb);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < n; ++id) {
        if ((a[id >> 6] >> (id & 63)) & 1) allowed.push_back(id);
        ASSERT_EQ(std::isinf(la[id]), !((a[id >> 6] >> (id & 63)) & 1)) << id;
      }
      ASSERT_FALSE(allowed.empty());
      const int32_t tok = allowed[rng() % allowed.size()];
      ASSERT_TRUE(fast.accept(tok).ok());
      ASSERT_TRUE(slow.accept(tok).ok());
      if (trie->is_eog(tok)) break;
    }
    walks += fast.num_trie_walks();
    hits += fast.num_dfa_cache_hits();
  }
  EXPECT_EQ(walks, 0u);
  EXPECT_GT(hits, 0u);
  EXPECT_LE(shared->num_misses(), shared->num_classes());
}

// Single bytes, then 3,000 lowercase words (some with a leading space): a grammar that does not
// tell letters apart folds them onto a few class paths. Id 0 = EOS.
std::shared_ptr<const TokenTrie> word_trie() {
  static const auto trie = [] {
    std::mt19937 rng(5);
    std::vector<std::string> tokens = {""};
    for (int b = 1; b < 128; ++b) tokens.push_back(std::string(1, (char)b));
    std::set<std::string> seen(tokens.begin(), tokens.end());
    while (tokens.size() < 3000) {
      std::string t = rng() % 2 ? " " : "";
      const int len = 1 + (int)(rng() % 8);
      for (int i = 0; i < len; ++i) t += (char)('a' + rng() % 26);
      if (seen.insert(t).second) tokens.push_back(t);
    }
    return std::make_shared<const TokenTrie>(std::move(tokens), std::vector<int32_t>{0});
  }();
  return trie;
}

// The trie folded by byte classes gives every DFA state the byte trie's mask, in far fewer
// nodes where the grammar does not tell letters apart; and the cache walks it.
TEST(ClassTrie, FoldedWalkEqualsTheByteWalkFromEveryState) {
  for (auto trie : {word_trie(), piece_trie()}) {
    for (const char* re : {R"([a-z ]{1,40}\.)", R"((the|cat|[a-z]{3,5} ){1,9})", R"([a-m]+[n-z]*)",
                           R"((\d{2}-[a-c]{1,3}\.){1,30})"}) {
      SCOPED_TRACE(re);
      auto g = compile_regex(re).value();
      ASSERT_NE(g->dfa, nullptr);
      auto ct = ClassTrie::build(*g->dfa, *trie, 64u << 20);
      if (trie == word_trie() && std::string_view(re).starts_with("[a-z ]")) {
        ASSERT_NE(ct, nullptr);
        EXPECT_LT(ct->num_nodes() * 10, trie->nodes().size()) << ct->num_nodes();
        DfaMaskCache cache(g->dfa, trie, 64u << 20);
        EXPECT_TRUE(cache.folded());
        EXPECT_EQ(*cache.get(ByteDfa::kStart), walked(*g->dfa, *trie, ByteDfa::kStart));
        EXPECT_EQ(ClassTrie::build(*g->dfa, *trie, ct->num_nodes() * sizeof(ClassTrie::Node)),
                  nullptr);
      }
      if (!ct) continue;
      std::vector<uint32_t> scratch;
      for (uint32_t s = ByteDfa::kStart; s < g->dfa->num_states(); ++s) {
        std::vector<uint64_t> bits(((size_t)trie->n_vocab() + 63) / 64, 0);
        ct->walk(*g->dfa, s, &scratch, bits.data());
        ASSERT_EQ(bits, walked(*g->dfa, *trie, s)) << "state " << s;
      }
    }
  }
}

// Reference: token by token.
bool apply_reference(const std::vector<uint64_t>& bits, int32_t n, float* x) {
  bool any = false;
  for (int32_t i = 0; i < n; ++i) {
    const bool on = (bits[i >> 6] >> (i & 63)) & 1;
    any |= on;
    if (!on) x[i] = -std::numeric_limits<float>::infinity();
  }
  return any;
}

TEST(TokenMaskApply, MatchesThePerTokenReferenceAtEverySizeAndDensity) {
  std::mt19937_64 rng(9);
  for (int32_t n : {1, 15, 63, 64, 65, 130, 1000, 4097, 151936}) {
    for (int density : {0, 1, 50, 99, 100}) {
      std::vector<uint64_t> bits((n + 63) / 64 + 1, 0);  // + a word of garbage past n
      for (int32_t i = 0; i < (int32_t)bits.size() * 64; ++i) {
        if ((int)(rng() % 100) < density || i >= n) bits[i >> 6] |= uint64_t{1} << (i & 63);
      }
      std::vector<float> a(n), b(n);
      for (int32_t i = 0; i < n; ++i) a[i] = b[i] = (float)(rng() % 2000) - 1000.0f;
      const bool any_a = apply_token_mask(bits.data(), n, a.data());
      const bool any_b = apply_reference(bits, n, b.data());
      ASSERT_EQ(a, b) << n << " " << density;
      ASSERT_EQ(any_a, any_b) << n << " " << density;
    }
  }
}

}  // namespace
}  // namespace kvw::grammar
