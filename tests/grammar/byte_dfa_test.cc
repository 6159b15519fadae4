// The byte DFA of regular grammars (byte_dfa.h) must recognise exactly the Matcher's language,
// and a DFA mask must equal the Matcher walk's mask bit for bit, on the default model's 4k SPM
// vocabulary (leading-space stripping too) and on a byte-level vocabulary with multi-byte
// characters and lone UTF-8 bytes.
#include "grammar/byte_dfa.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "grammar/byte_nfa.h"
#include "grammar/gbnf_parser.h"
#include "grammar/grammar_constraint.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "test_vocab.h"

namespace kvw::grammar {
namespace {

const std::vector<std::string> kRegexes = {
    R"(\d{4}-\d{2}-\d{2} [A-Z][a-z]{2,12}( [a-z]{2,12}){0,6}\.\n)",
    R"([a-z]{2,6}@(ab|ba)\.(com|org)|\d{3}-\d{4})",
    R"(("[^"]*",)*"[^"]*")",
    R"((é|中文|[α-ω]+|\u00e8)+!?)",
    R"(.{0,8}x)",
    R"([^a-z\n]*(yes|no))",
};

// The grammar without its DFA: masks come from the Matcher walk.
std::shared_ptr<const Grammar> without_dfa(const std::shared_ptr<const Grammar>& g) {
  auto copy = std::make_shared<Grammar>(*g);
  copy->dfa = nullptr;
  return copy;
}

// Byte-level vocabulary: every single byte (lone continuation and lead bytes included), then
// pieces over the regexes' alphabets, some with a leading space. Id 0 = EOS.
std::shared_ptr<const TokenTrie> byte_trie() {
  static const auto trie = [] {
    const std::vector<std::string> alphabet = {
        "a", "b",  "z",  "A", "Q", "0", "7", "-", "@",    ".",    "\"", ",",  " ", "\n",
        "é", "中", "文", "α", "ω", "è", "!", "x", "\xE4", "\xB8", "y",  "es", "no"};
    std::mt19937 rng(5);
    std::vector<std::string> tokens = {""};
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, (char)b));
    std::set<std::string> seen(tokens.begin(), tokens.end());
    while (tokens.size() < 3000) {
      std::string t = rng() % 4 == 0 ? " " : "";
      const int len = 1 + (int)(rng() % 5);
      for (int i = 0; i < len; ++i) t += alphabet[rng() % alphabet.size()];
      if (seen.insert(t).second) tokens.push_back(t);
    }
    return std::make_shared<const TokenTrie>(std::move(tokens), std::vector<int32_t>{0});
  }();
  return trie;
}

TEST(Utf8Sequences, CoverEveryScalarValueOnceAndNoSurrogate) {
  const auto seqs = utf8_sequences(0, 0x10FFFF);
  auto matches = [&](const std::string& enc) {
    int n = 0;
    for (const auto& seq : seqs) {
      if (seq.size() != enc.size()) continue;
      bool all = true;
      for (size_t k = 0; k < seq.size(); ++k) {
        all = all && (uint8_t)enc[k] >= seq[k].first && (uint8_t)enc[k] <= seq[k].second;
      }
      n += all;
    }
    return n;
  };
  auto encode = [](uint32_t cp) {
    std::string s;
    if (cp < 0x80) return std::string(1, (char)cp);
    if (cp < 0x800) return s + char(0xC0 | (cp >> 6)) + char(0x80 | (cp & 0x3F));
    if (cp < 0x10000)
      return s + char(0xE0 | (cp >> 12)) + char(0x80 | ((cp >> 6) & 0x3F)) +
             char(0x80 | (cp & 0x3F));
    return s + char(0xF0 | (cp >> 18)) + char(0x80 | ((cp >> 12) & 0x3F)) +
           char(0x80 | ((cp >> 6) & 0x3F)) + char(0x80 | (cp & 0x3F));
  };
  for (uint32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x11000 ? 1 : 61)) {
    const bool surrogate = cp >= 0xD800 && cp <= 0xDFFF;
    ASSERT_EQ(matches(encode(cp)), surrogate ? 0 : 1) << std::hex << cp;
  }
  // Overlong forms of '/' and of U+07FF are no sequence's.
  EXPECT_EQ(matches("\xC0\xAF"), 0);
  EXPECT_EQ(matches("\xE0\x9F\xBF"), 0);
  EXPECT_EQ(utf8_sequences(0xD800, 0xDFFF).size(), 0u);
}

TEST(ByteDfa, RegularGrammarsGetOneAndRecursiveOnesDoNot) {
  for (const auto& re : kRegexes) EXPECT_TRUE(compile_regex(re).value()->dfa) << re;
  EXPECT_TRUE(compile_choice({"yes", "no", "maybe"}).value()->dfa);
  // Right recursion (what x* lowers to) is a loop; nested values are not regular.
  EXPECT_TRUE(with_dfa(parse_gbnf("root ::= \"a\" root | \"b\"").value(), 1 << 20)->dfa);
  EXPECT_FALSE(with_dfa(parse_gbnf("root ::= \"(\" root \")\" | \"x\"").value(), 1 << 20)->dfa);
  EXPECT_FALSE(with_dfa(compile_json_object().value(), 1 << 20)->dfa);
}

TEST(ByteDfa, StaysWithinTheGrammarBudgetOrIsLeftOut) {
  // (a|b)*a(a|b){11}: the DFA must remember the last 12 letters, 2^12 states.
  const std::string re = "(a|b)*a(a|b){11}";
  auto big = compile_regex(re, 4 << 20);
  ASSERT_TRUE(big.ok());
  ASSERT_TRUE(big.value()->dfa);
  EXPECT_GE(big.value()->dfa->num_states(), 1u << 12);
  EXPECT_LE(big.value()->size_bytes(), size_t{4} << 20);
  // With a budget the table cannot fit in, the regex still compiles, without a DFA.
  auto small = compile_regex(re, 64 << 10);
  ASSERT_TRUE(small.ok()) << small.message();
  EXPECT_FALSE(small.value()->dfa);
  EXPECT_LE(small.value()->size_bytes(), size_t{64} << 10);
}

// Random byte strings from the regexes' pieces: the DFA is live exactly where the Matcher
// accepts the bytes so far, and accepting exactly where the Matcher can end.
TEST(ByteDfa, RecognisesTheMatchersLanguage) {
  const std::vector<std::string> pieces = {
      "a", "z", "Q", "0", "-", " ",  ".",   "\n",  "\"", ",",    "é",    "中",   "文",
      "α", "è", "!", "x", "@", "ab", "com", "yes", "no", "\xE4", "\xB8", "\x80", "\xFF"};
  std::mt19937 rng(9);
  for (const auto& re : kRegexes) {
    auto g = compile_regex(re).value();
    ASSERT_TRUE(g->dfa);
    for (int trial = 0; trial < 200; ++trial) {
      Matcher m(g);
      uint32_t s = ByteDfa::kStart;
      const int len = 1 + (int)(rng() % 24);
      for (int i = 0; i < len; ++i) {
        const std::string& p = pieces[rng() % pieces.size()];
        for (char c : p) {
          const bool ok = m.accept_bytes(std::string_view(&c, 1));
          const uint32_t next = g->dfa->next(s, (uint8_t)c);
          ASSERT_EQ(ok, next != ByteDfa::kDead) << re;
          if (!ok) break;
          s = next;
          ASSERT_EQ(m.can_end(), g->dfa->accepting(s)) << re;
        }
      }
    }
  }
}

// Sequences follow random allowed tokens; at every step the DFA mask equals the Matcher's.
void check_masks_equal(std::shared_ptr<const TokenTrie> trie, bool strip_space) {
  std::vector<std::shared_ptr<const Grammar>> gs;
  for (const auto& re : kRegexes) gs.push_back(compile_regex(re).value());
  gs.push_back(compile_choice({"positive", "negative", " neutral", "中文"}).value());
  std::mt19937 rng(13);
  for (const auto& g : gs) {
    for (int seq = 0; seq < 4; ++seq) {
      GrammarConstraint fast(g, trie, strip_space, 0);
      GrammarConstraint slow(without_dfa(g), trie, strip_space, 0);
      ASSERT_TRUE(fast.uses_dfa());
      std::vector<uint64_t> a, b;
      for (int step = 0; step < 24 && !fast.done(); ++step) {
        fast.fill_allowed(&a);
        slow.fill_allowed(&b);
        ASSERT_EQ(a, b) << "step " << step;
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < trie->n_vocab(); ++id) {
          if ((a[id >> 6] >> (id & 63)) & 1) allowed.push_back(id);
        }
        ASSERT_FALSE(allowed.empty());
        const int32_t tok = allowed[rng() % allowed.size()];
        ASSERT_TRUE(fast.accept(tok).ok());
        ASSERT_TRUE(slow.accept(tok).ok());
        if (trie->is_eog(tok)) break;
      }
      EXPECT_TRUE(fast.uses_dfa());  // the two never disagreed
    }
  }
}

TEST(ByteDfa, MasksEqualTheMatcherWalkOnAByteLevelVocabulary) {
  check_masks_equal(byte_trie(), false);
}

TEST(ByteDfa, MasksEqualTheMatcherWalkOnTheDefaultVocabulary) {
  check_masks_equal(default_trie(), false);
  check_masks_equal(default_trie(), true);
}

// A repeated state's mask comes from the cache keyed by the DFA state, not a new walk.
TEST(ByteDfa, RepeatedStatesReuseTheirMask) {
  auto g = compile_regex("(ab)+").value();
  auto trie = std::make_shared<const TokenTrie>(std::vector<std::string>{"", "a", "b", "ab"},
                                                std::vector<int32_t>{0});
  GrammarConstraint c(g, trie);
  std::vector<uint64_t> bits;
  for (int i = 0; i < 6; ++i) {
    c.fill_allowed(&bits);
    ASSERT_TRUE(c.accept(3).ok());  // "ab": back to the same DFA state (accepting)
  }
  EXPECT_LE(c.num_trie_walks(), 2u);
  EXPECT_GE(c.num_cache_hits(), 4u);
}

}  // namespace
}  // namespace kvw::grammar
