// tests/tokenizer/bpe_test.cc: byte-level BPE ("gpt2") tokenizer: exact ids on hand-built
// vocabularies, merge ranks, special tokens, and round trips for each pre-tokenizer family.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "corpus.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/tokenizer.h"

namespace kvw {
namespace {

using Ids = std::vector<int32_t>;

// 256 byte tokens (id = byte), then `extra` normal tokens from 256, with `merges`.
Vocab hand_vocab(const std::vector<std::string>& extra, const std::vector<std::string>& merges,
                 const std::string& pre = "gpt2") {
  Vocab v;
  v.model = "gpt2";
  v.pre = pre;
  v.add_bos = false;
  v.add_space_prefix = false;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_to_unicode(b));
  for (const std::string& t : extra) v.tokens.push_back(t);
  v.types.assign(v.tokens.size(), TokenType::kNormal);
  v.merges = merges;
  return v;
}

std::unique_ptr<Tokenizer> make(Vocab v) {
  auto tok = Tokenizer::create(std::move(v));
  EXPECT_TRUE(tok.ok()) << tok.message();
  return std::move(tok).value();
}

int32_t id_of(const Tokenizer& tok, const std::string& text) {
  const auto& t = tok.vocab().tokens;
  auto it = std::find(t.begin(), t.end(), text);
  EXPECT_NE(it, t.end()) << text;
  return (int32_t)(it - t.begin());
}

TEST(Bpe, MergesByRankLowestFirst) {
  // ab=256 abc=257 bc=258
  auto ab_first = make(hand_vocab({"ab", "abc", "bc"}, {"a b", "ab c", "b c"}));
  EXPECT_EQ(ab_first->encode("abc", false, false), (Ids{257}));
  auto bc_first = make(hand_vocab({"ab", "abc", "bc"}, {"b c", "a b"}));
  EXPECT_EQ(bc_first->encode("abc", false, false), (Ids{'a', 258}));
  EXPECT_EQ(bc_first->encode("abab", false, false), (Ids{256, 256}));
}

TEST(Bpe, EqualPairsMergeLeftmostFirst) {
  auto tok = make(hand_vocab({"aa"}, {"a a"}));
  EXPECT_EQ(tok->encode("aaa", false, false), (Ids{256, 'a'}));
}

TEST(Bpe, SpacesAreByteLevelAndBelongToTheNextWord) {
  // "Ġa" = space + a; "Ġab".
  const std::string g = byte_to_unicode(' ');
  auto tok = make(hand_vocab({g + "a", g + "ab"}, {g + " a", g + "a b"}));
  EXPECT_EQ(tok->encode("b ab", false, false), (Ids{'b', 257}));
  EXPECT_EQ(tok->token_bytes(257), " ab");
  EXPECT_EQ(tok->encode("\n", false, false), (Ids{'\n'}));
  EXPECT_EQ(tok->vocab().tokens['\n'], "\xC4\x8A");  // 'Ċ'
}

TEST(Bpe, SpecialTokensMatchedOnlyWhenParsingSpecials) {
  Vocab v = hand_vocab({"ab"}, {"a b"});
  v.tokens.push_back("<|eot|>");  // 257, control
  v.types.push_back(TokenType::kControl);
  v.tokens.push_back("<x>");  // 258, user-defined: always matched
  v.types.push_back(TokenType::kUserDefined);
  v.eot_id = 257;
  auto tok = make(v);
  EXPECT_EQ(tok->encode("ab<|eot|>ab", false, true), (Ids{256, 257, 256}));
  const Ids plain = tok->encode("ab<|eot|>ab", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 257), 0);
  EXPECT_EQ(tok->decode(plain), "ab<|eot|>ab");
  EXPECT_EQ(tok->encode("ab<x>", false, false), (Ids{256, 258}));
  EXPECT_EQ(tok->decode(Ids{256, 257, 258}), "ab<x>");
  EXPECT_EQ(tok->decode(Ids{256, 257, 258}, true), "ab<|eot|><x>");
  EXPECT_TRUE(tok->is_end_of_generation(257));
  EXPECT_FALSE(tok->is_end_of_generation(256));
}

TEST(Bpe, LongerSpecialTokenWins) {
  Vocab v = hand_vocab({}, {});
  for (const char* s : {"<|a|>", "<|a|><|b|>"}) {
    v.tokens.push_back(s);
    v.types.push_back(TokenType::kControl);
  }
  auto tok = make(v);
  EXPECT_EQ(tok->encode("<|a|><|b|><|a|>", false, true), (Ids{257, 256}));
}

TEST(Bpe, CreateRejectsBadMergesAndUnknownPre) {
  EXPECT_FALSE(Tokenizer::create(hand_vocab({"ab"}, {"ab"})).ok());    // no separator
  EXPECT_FALSE(Tokenizer::create(hand_vocab({"ab"}, {"a zz"})).ok());  // unknown part
  EXPECT_FALSE(Tokenizer::create(hand_vocab({}, {}, "no-such-pre")).ok());
}

TEST(Bpe, BuiltVocabIsDeterministicAndHasFamilySpecials) {
  const Vocab a = build_bpe_vocab(testing::test_words(), "llama3", 2000);
  const Vocab b = build_bpe_vocab(testing::test_words(), "llama3", 2000);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.merges, b.merges);
  ASSERT_EQ(a.tokens.size(), 2000u);
  EXPECT_EQ(a.tokens[a.bos_id], "<|begin_of_text|>");
  EXPECT_EQ(a.tokens[a.eot_id], "<|eot_id|>");
  EXPECT_TRUE(a.add_bos);
  const Vocab q = build_bpe_vocab(testing::test_words(), "qwen2");
  EXPECT_EQ(q.tokens[q.eot_id], "<|im_end|>");
  EXPECT_FALSE(q.add_bos);
}

TEST(Bpe, BuiltVocabEncodesWordsAsSingleTokens) {
  auto tok = make(build_bpe_vocab(testing::test_words(), "llama3"));
  const std::string g = byte_to_unicode(' ');
  EXPECT_EQ(
      tok->encode("the cat sat", true, false),
      (Ids{tok->bos_id(), id_of(*tok, "the"), id_of(*tok, g + "cat"), id_of(*tok, g + "sat")}));
  EXPECT_EQ(tok->encode("<|eot_id|>", false, true), (Ids{tok->vocab().eot_id}));
  EXPECT_TRUE(tok->is_end_of_generation(tok->vocab().eot_id));
  EXPECT_TRUE(tok->is_end_of_generation(tok->eos_id()));
}

// gpt-oss stops at <|call|> to wait for the tool's answer (issue 31), as at <|return|>; a
// harmony message's <|channel|> does not end anything, nor does its <|end|>: it closes the
// analysis message and the final answer follows (the builder's vocabulary names it eot, as
// a file may).
TEST(Bpe, HarmonyCallMarkerEndsGenerationAndEndOfMessageDoesNot) {
  auto tok = make(build_bpe_vocab(testing::test_words(), "gpt-4o"));
  EXPECT_TRUE(tok->is_end_of_generation(id_of(*tok, "<|call|>")));
  EXPECT_TRUE(tok->is_end_of_generation(id_of(*tok, "<|return|>")));
  EXPECT_FALSE(tok->is_end_of_generation(id_of(*tok, "<|channel|>")));
  ASSERT_EQ(tok->vocab().eot_id, id_of(*tok, "<|end|>"));
  EXPECT_FALSE(tok->is_end_of_generation(id_of(*tok, "<|end|>")));
}

// Outside harmony (no <|return|> and <|call|> control tokens) <|end|> ends a turn, as Phi-3's.
TEST(Bpe, EndOfMessageEndsGenerationOutsideHarmony) {
  for (bool with_call : {false, true}) {
    Vocab v = hand_vocab({}, {});
    for (const char* t : {"<|end|>", "<|return|>", "<|call|>"}) {
      if (std::string(t) == "<|call|>" && !with_call) continue;
      v.tokens.push_back(t);
      v.types.push_back(TokenType::kControl);
    }
    auto tok = make(std::move(v));
    EXPECT_EQ(tok->is_end_of_generation(id_of(*tok, "<|end|>")), !with_call) << with_call;
    EXPECT_TRUE(tok->is_end_of_generation(id_of(*tok, "<|return|>")));
  }
}

TEST(Bpe, Llama3NumbersUseGroupsOfThreeAndQwen2SingleDigits) {
  auto llama3 = make(build_bpe_vocab({"123", "456"}, "llama3"));
  EXPECT_EQ(llama3->encode("123456", false, false),
            (Ids{id_of(*llama3, "123"), id_of(*llama3, "456")}));
  auto qwen2 = make(build_bpe_vocab({"123"}, "qwen2"));
  EXPECT_EQ(qwen2->encode("123", false, false), (Ids{'1', '2', '3'}));
}

TEST(Bpe, TortureCorpusRoundTripsForEveryFamily) {
  for (const char* pre : {"llama3", "qwen2", "deepseek-llm", "deepseek-v3", "gpt2", "default"}) {
    auto tok = make(build_bpe_vocab(testing::test_words(), pre));
    for (const std::string& text : testing::torture_corpus()) {
      for (bool add_special : {false, true}) {
        EXPECT_EQ(tok->decode(tok->encode(text, add_special, false)), text) << pre;
      }
    }
  }
}

TEST(Bpe, InvalidUtf8InputRoundTripsAsBytes) {
  auto tok = make(build_bpe_vocab(testing::test_words(), "llama3"));
  const std::string text = "ok \xFF\xE2\x82 cat \xC0";
  EXPECT_EQ(tok->decode(tok->encode(text, false, false)), text);
}

}  // namespace
}  // namespace kvw
