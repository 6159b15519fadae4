// tests/tokenizer/pre_tokenizer_test.cc: word splits of the llama.cpp pre-tokenizer families.
#include "tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "corpus.h"

namespace kvw {
namespace {

using Words = std::vector<std::string>;

Words split(std::string_view pre, std::string_view text) {
  Result<PreTokenizer> pt = PreTokenizer::create(pre);
  EXPECT_TRUE(pt.ok()) << pt.message();
  Words out;
  for (std::string_view w : pt->split(text)) out.emplace_back(w);
  return out;
}

TEST(PreTokenizer, Llama3SplitsContractionsCaseInsensitively) {
  EXPECT_EQ(split("llama3", "don't"), (Words{"don", "'t"}));
  EXPECT_EQ(split("llama3", "I'M YOU'LL we've"), (Words{"I", "'M", " YOU", "'LL", " we", "'ve"}));
}

TEST(PreTokenizer, Llama3GroupsDigitsByThree) {
  EXPECT_EQ(split("llama3", "12345678"), (Words{"123", "456", "78"}));
  EXPECT_EQ(split("llama3", "pi 3.14159"), (Words{"pi", " ", "3", ".", "141", "59"}));
  EXPECT_EQ(split("llama3", "$100"), (Words{"$", "100"}));
}

TEST(PreTokenizer, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(split("qwen2", "12345"), (Words{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(split("qwen2", "don't 42"), (Words{"don", "'t", " ", "4", "2"}));
}

// gpt-oss's o200k ("gpt-4o"): words split where case changes, contractions stay on their word,
// digits in threes, '/' and newlines kept after a punctuation run.
TEST(PreTokenizer, Gpt4oSplitsAtCaseChangesAndKeepsContractions) {
  EXPECT_EQ(split("gpt-4o", "HelloWorld don't 12345"),
            (Words{"Hello", "World", " don't", " ", "123", "45"}));
  EXPECT_EQ(split("gpt-4o", "I'M HTTPServer"), (Words{"I'M", " HTTPServer"}));
  EXPECT_EQ(split("gpt-4o", "a+/\nb"), (Words{"a", "+/\n", "b"}));
}

TEST(PreTokenizer, Llama3PunctuationAndNewlines) {
  EXPECT_EQ(split("llama3", "Hello, world!\n\nHow"),
            (Words{"Hello", ",", " world", "!\n\n", "How"}));
  EXPECT_EQ(split("llama3", "line1\nline2"), (Words{"line", "1", "\n", "line", "2"}));
  // Whitespace before a word keeps one space for the word; runs end in their own piece.
  EXPECT_EQ(split("llama3", "a   b"), (Words{"a", "  ", " b"}));
  EXPECT_EQ(split("llama3", "end  \n\n  "), (Words{"end", "  \n\n", "  "}));
  EXPECT_EQ(split("llama3", "\tx"), (Words{"\tx"}));
  EXPECT_EQ(split("qwen2", "hi \xF0\x9F\x91\x8B!"), (Words{"hi", " \xF0\x9F\x91\x8B!"}));
}

TEST(PreTokenizer, Gpt2ContractionsAreLowercaseOnly) {
  EXPECT_EQ(split("gpt2", "Hello world's 123"), (Words{"Hello", " world", "'s", " 123"}));
  EXPECT_EQ(split("gpt2", "IT'S"), (Words{"IT", "'", "S"}));
}

TEST(PreTokenizer, DeepseekV3AppliesRegexesInSequence) {
  // Digits are cut first (groups of 3), then CJK runs, then the main regex on what is left.
  EXPECT_EQ(split("deepseek-v3", "abc 12345"), (Words{"abc", " ", "123", "45"}));
  EXPECT_EQ(split("deepseek-v3", "x\xE6\xBC\xA2\xE5\xAD\x97y"),
            (Words{"x", "\xE6\xBC\xA2\xE5\xAD\x97", "y"}));
}

TEST(PreTokenizer, DeepseekLlmSplitsNewlinesAndLetters) {
  EXPECT_EQ(split("deepseek-llm", "Hi there\nok"), (Words{"Hi", " there", "\n", "ok"}));
}

TEST(PreTokenizer, SplitsConcatenateBackForEveryFamily) {
  const char* families[] = {"llama3",      "llama-bpe", "qwen2",   "deepseek-llm",
                            "deepseek-v3", "gpt2",      "default", "starcoder"};
  auto corpus = testing::torture_corpus();
  corpus.push_back("bad \xFF\xFE bytes \xE2\x82 and \xC0\xAF here");
  for (const char* fam : families) {
    for (const std::string& text : corpus) {
      std::string joined;
      for (const std::string& w : split(fam, text)) {
        EXPECT_FALSE(w.empty()) << fam;
        joined += w;
      }
      EXPECT_EQ(joined, text) << fam;
    }
  }
}

TEST(PreTokenizer, InvalidUtf8BytesAreKeptAsTheirOwnPieces) {
  EXPECT_EQ(split("llama3",
                  "ab\xFF"
                  "cd"),
            (Words{"ab", "\xFF", "cd"}));
}

TEST(PreTokenizer, VeryLongWhitespaceRunDoesNotOverflow) {
  const std::string text = "a" + std::string(200000, ' ') + "b";
  std::string joined;
  for (const std::string& w : split("llama3", text)) joined += w;
  EXPECT_EQ(joined, text);
}

TEST(PreTokenizer, UnknownFamilyAndBadRegexAreErrors) {
  Result<PreTokenizer> bad = PreTokenizer::create("no-such-family");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("llama3"), std::string::npos) << bad.message();
  EXPECT_FALSE(PreTokenizer::from_patterns({"(unclosed"}).ok());
}

}  // namespace
}  // namespace kvw
