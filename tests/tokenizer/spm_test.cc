// tests/tokenizer/spm_test.cc: SentencePiece-style ("llama") tokenizer: exact ids on hand-built
// vocabularies, merge priority, byte fallback, special tokens, and round trips.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "corpus.h"
#include "tokenizer/tokenizer.h"

namespace kvw {
namespace {

using Ids = std::vector<int32_t>;
const std::string kSp = "\xE2\x96\x81";  // U+2581

// <unk> <s> </s>, then the 256 byte tokens at 3..258 (as Llama 2), then `pieces` from 259.
Vocab hand_vocab(const std::vector<std::pair<std::string, float>>& pieces, bool bytes = true) {
  Vocab v;
  v.model = "llama";
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_space_prefix = false;
  auto add = [&](std::string t, float s, TokenType ty) {
    v.tokens.push_back(std::move(t));
    v.scores.push_back(s);
    v.types.push_back(ty);
  };
  add("<unk>", 0, TokenType::kUnknown);
  add("<s>", 0, TokenType::kControl);
  add("</s>", 0, TokenType::kControl);
  for (int b = 0; b < 256 && bytes; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    add(buf, 0, TokenType::kByte);
  }
  for (const auto& [t, s] : pieces) add(t, s, TokenType::kNormal);
  return v;
}

std::unique_ptr<Tokenizer> make(Vocab v) {
  auto tok = Tokenizer::create(std::move(v));
  EXPECT_TRUE(tok.ok()) << tok.message();
  return std::move(tok).value();
}

constexpr int32_t kP = 259;  // first hand piece

TEST(Spm, MergesHighestScoringPairFirst) {
  // a=259 b=260 c=261 ab=262 bc=263
  auto ab_first = make(hand_vocab({{"a", 0}, {"b", 0}, {"c", 0}, {"ab", -1}, {"bc", -2}}));
  EXPECT_EQ(ab_first->encode("abc", false, false), (Ids{kP + 3, kP + 2}));
  auto bc_first = make(hand_vocab({{"a", 0}, {"b", 0}, {"c", 0}, {"ab", -2}, {"bc", -1}}));
  EXPECT_EQ(bc_first->encode("abc", false, false), (Ids{kP, kP + 4}));
  // Equal scores: the leftmost pair wins.
  auto tie = make(hand_vocab({{"a", 0}, {"b", 0}, {"c", 0}, {"ab", -1}, {"bc", -1}}));
  EXPECT_EQ(tie->encode("abc", false, false), (Ids{kP + 3, kP + 2}));
}

TEST(Spm, MergesChainThroughIntermediatePieces) {
  // "abcd" needs ab, then abc, then abcd; "cd" scores lower than "abc".
  auto tok = make(hand_vocab(
      {{"a", 0}, {"b", 0}, {"c", 0}, {"d", 0}, {"ab", -1}, {"abc", -2}, {"cd", -3}, {"abcd", -4}}));
  EXPECT_EQ(tok->encode("abcd", false, false), (Ids{kP + 7}));
  EXPECT_EQ(tok->encode("cdab", false, false), (Ids{kP + 6, kP + 4}));
}

TEST(Spm, UnknownCharactersFallBackToBytesThenUnk) {
  auto tok = make(hand_vocab({{"a", 0}}));
  // e-acute is C3 A9: byte tokens 3 + 0xC3, 3 + 0xA9.
  EXPECT_EQ(tok->encode("a\xC3\xA9", false, false), (Ids{kP, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok->decode(Ids{kP, 3 + 0xC3, 3 + 0xA9}), "a\xC3\xA9");
  auto no_bytes = make(hand_vocab({{"a", 0}}, /*bytes=*/false));
  EXPECT_EQ(no_bytes->encode("a\xC3\xA9", false, false), (Ids{3, 0, 0}));
  EXPECT_EQ(no_bytes->token_bytes(0), "\xE2\x96\x85");  // <unk> renders as U+2585
}

TEST(Spm, SpacePrefixAndBosEos) {
  Vocab v = hand_vocab({{kSp, 0}, {"h", 0}, {"i", 0}, {kSp + "h", -1}, {kSp + "hi", -2}});
  v.add_space_prefix = true;
  v.add_eos = true;
  auto tok = make(v);
  EXPECT_EQ(tok->encode("hi hi", true, false), (Ids{1, kP + 4, kP + 4, 2}));
  EXPECT_EQ(tok->encode("hi", false, false), (Ids{kP + 4}));
  EXPECT_EQ(tok->encode("", true, false), (Ids{1, 2}));
  EXPECT_EQ(tok->encode("", false, false), (Ids{}));
  // Decoding strips the one space the prefix added, after BOS; later spaces stay.
  EXPECT_EQ(tok->decode(Ids{1, kP + 4, kP + 4, 2}), "hi hi");
  EXPECT_EQ(tok->decode(Ids{1, kP + 4}, /*render_special=*/true), "<s>hi");
  EXPECT_EQ(tok->decode(Ids{kP + 4, kP + 4}), "hi hi");
  EXPECT_EQ(tok->decode(Ids{kP, kP + 4}), " hi");  // only one space is stripped
}

TEST(Spm, SpecialTokensMatchedOnlyWhenParsingSpecials) {
  Vocab v = hand_vocab({{"a", 0}, {"b", 0}});
  v.tokens.push_back("<|user|>");  // 261, user-defined: always matched
  v.scores.push_back(0);
  v.types.push_back(TokenType::kUserDefined);
  auto tok = make(v);
  EXPECT_EQ(tok->encode("a</s>b", false, true), (Ids{kP, 2, kP + 1}));
  const Ids plain = tok->encode("a</s>b", false, false);
  EXPECT_EQ(plain.size(), 6u);  // a, then '<' '/' 's' '>' as bytes, then b
  EXPECT_EQ(plain[1], 3 + '<');
  EXPECT_EQ(tok->decode(plain), "a</s>b");
  EXPECT_EQ(tok->encode("a<|user|>b", false, false), (Ids{kP, 261, kP + 1}));
  // Control tokens render as "" unless asked; user-defined ones always as text.
  EXPECT_EQ(tok->decode(Ids{kP, 2, 261, kP + 1}), "a<|user|>b");
  EXPECT_EQ(tok->decode(Ids{kP, 2, 261, kP + 1}, true), "a</s><|user|>b");
}

TEST(Spm, SpaceIsPrefixedAfterEachSpecialTokenAsLlamaCpp) {
  Vocab v = hand_vocab({{kSp, 0}, {"a", 0}, {kSp + "a", -1}});
  v.add_space_prefix = true;
  auto tok = make(v);
  EXPECT_EQ(tok->encode("a</s>a", false, true), (Ids{kP + 2, 2, kP + 2}));
}

TEST(Spm, BuiltVocabEncodesWordsAsSingleTokens) {
  auto tok = make(build_spm_vocab(testing::test_words()));
  const Vocab& v = tok->vocab();
  auto id_of = [&](const std::string& t) {
    return (int32_t)(std::find(v.tokens.begin(), v.tokens.end(), t) - v.tokens.begin());
  };
  EXPECT_EQ(tok->encode("the cat sat", true, false),
            (Ids{1, id_of(kSp + "the"), id_of(kSp + "cat"), id_of(kSp + "sat")}));
  EXPECT_EQ(tok->encode("café", false, false), (Ids{id_of(kSp + "café")}));
  EXPECT_EQ(v.tokens[3], "<0x00>");
  EXPECT_EQ(v.types[0], TokenType::kUnknown);
}

TEST(Spm, BuiltVocabPadsToTargetDeterministically) {
  const Vocab a = build_spm_vocab(testing::test_words(), 32000);
  const Vocab b = build_spm_vocab(testing::test_words(), 32000);
  EXPECT_EQ(a.tokens.size(), 32000u);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.scores, b.scores);
  EXPECT_EQ(a.types.back(), TokenType::kUnused);
  EXPECT_EQ(build_spm_vocab({"x"}, 10).tokens.size(), 262u);  // never truncates
}

TEST(Spm, TortureCorpusRoundTrips) {
  auto tok = make(build_spm_vocab(testing::test_words(), 1000));
  for (const std::string& text : testing::torture_corpus()) {
    for (bool add_special : {false, true}) {
      const Ids ids = tok->encode(text, add_special, false);
      EXPECT_EQ(tok->decode(ids), text) << "add_special=" << add_special;
      for (int32_t id : ids) EXPECT_NE(id, 0) << "no <unk> with byte fallback";
    }
  }
}

TEST(Spm, InvalidUtf8InputRoundTripsAsBytes) {
  auto tok = make(build_spm_vocab(testing::test_words()));
  const std::string text = "ok \xFF\xE2\x82 cat \xC0";
  EXPECT_EQ(tok->decode(tok->encode(text, true, false)), text);
}

TEST(Spm, CreateRejectsBadVocabularies) {
  Vocab v = hand_vocab({{"a", 0}});
  v.scores.pop_back();
  EXPECT_FALSE(Tokenizer::create(v).ok());
  v = hand_vocab({{"a", 0}});
  v.bos_id = 9999;
  EXPECT_FALSE(Tokenizer::create(v).ok());
  v = hand_vocab({{"a", 0}});
  v.model = "wordpiece";
  EXPECT_FALSE(Tokenizer::create(v).ok());
}

}  // namespace
}  // namespace kvw
