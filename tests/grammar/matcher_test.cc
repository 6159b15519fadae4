#include "grammar/matcher.h"

#include <gtest/gtest.h>

#include "grammar/gbnf_parser.h"

namespace kvw::grammar {
namespace {

// Whole-string match: every byte accepted and the grammar may end there.
bool matches(const char* gbnf, std::string_view text) {
  auto g = parse_gbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.message();
  Matcher m(g.value());
  return m.accept_bytes(text) && m.can_end();
}

TEST(Matcher, LiteralsAlternationAndRepetition) {
  const char* g = "root ::= \"ab\" (\"c\" | \"de\")* \"!\"?";
  EXPECT_TRUE(matches(g, "ab"));
  EXPECT_TRUE(matches(g, "abcdec!"));
  EXPECT_FALSE(matches(g, "abd"));
  EXPECT_FALSE(matches(g, "ab!!"));
  EXPECT_FALSE(matches(g, "a"));
}

TEST(Matcher, BoundedRepetition) {
  const char* g = "root ::= [0-9]{2,4}";
  EXPECT_FALSE(matches(g, "1"));
  EXPECT_TRUE(matches(g, "12"));
  EXPECT_TRUE(matches(g, "1234"));
  EXPECT_FALSE(matches(g, "12345"));
  EXPECT_TRUE(matches("root ::= \"x\"{3}", "xxx"));
  EXPECT_FALSE(matches("root ::= \"x\"{3}", "xx"));
  EXPECT_TRUE(matches("root ::= \"x\"{1,}", "xxxxxxx"));
}

TEST(Matcher, CharClassesRangesNegationAndUtf8) {
  const char* g = "root ::= [^a-c\\n]+";
  EXPECT_TRUE(matches(g, "xyz"));
  EXPECT_TRUE(matches(g, "d\xC3\xA9\xE4\xB8\xAD"));  // dé中
  EXPECT_FALSE(matches(g, "xbz"));
  EXPECT_FALSE(matches(g, "x\n"));
  EXPECT_TRUE(matches("root ::= [\\u00e0-\\u00ff]", "\xC3\xA9"));
  EXPECT_FALSE(matches("root ::= [\\u00e0-\\u00ff]", "\xE4\xB8\xAD"));
  EXPECT_TRUE(matches("root ::= .", "\xF0\x9F\x98\x80"));  // one 4-byte code point
}

TEST(Matcher, RejectsInvalidUtf8AndPrunesLeadBytes) {
  auto g = parse_gbnf("root ::= [a-z\\u00e0-\\u00ff]*");
  ASSERT_TRUE(g.ok());
  Matcher m(g.value());
  EXPECT_FALSE(m.accept_bytes("\x80"));  // lone continuation byte
  EXPECT_FALSE(m.accept_bytes("\xE4"));  // 3-byte lead: no code point >= U+0800 allowed
  EXPECT_TRUE(m.accept_bytes("\xC3"));   // partial é
  EXPECT_FALSE(m.can_end());             // mid-character
  EXPECT_TRUE(m.accept_bytes("\xA9"));
  EXPECT_TRUE(m.can_end());
  // Overlong encodings of ASCII and surrogates are never characters.
  EXPECT_FALSE(m.accept_bytes("\xF0\x80\x80\xB9"));
  EXPECT_FALSE(m.accept_bytes("\xE0\x81\xA1"));
  EXPECT_FALSE(m.accept_bytes("\xC1\xA1"));
  Matcher any(parse_gbnf("root ::= .*").value());
  EXPECT_FALSE(any.accept_bytes("\xED\xA0\x80"));      // U+D800
  EXPECT_FALSE(any.accept_bytes("\xED\xA0"));          // can only become a surrogate: dead now
  EXPECT_FALSE(any.accept_bytes("\xF4\x90\x80\x80"));  // over U+10FFFF
  EXPECT_TRUE(any.accept_bytes("\xF4\x8F\xBF\xBF"));
}

TEST(Matcher, RejectionLeavesStateUnchanged) {
  auto g = parse_gbnf("root ::= \"abc\" | \"abd\"");
  ASSERT_TRUE(g.ok());
  Matcher m(g.value());
  EXPECT_TRUE(m.accept_bytes("ab"));
  EXPECT_FALSE(m.accept_bytes("ce"));  // 'c' fits, 'e' does not: all or nothing
  EXPECT_TRUE(m.accept_bytes("d"));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.is_finished());
}

TEST(Matcher, RecursionAndNestedRules) {
  const char* g = R"(
    root ::= value
    value ::= "[" ws (value (ws "," ws value)*)? ws "]" | [0-9]+
    ws ::= " "?
  )";
  EXPECT_TRUE(matches(g, "[1, [2,[ ]], [[[3]]]]"));
  EXPECT_FALSE(matches(g, "[1,]"));
  EXPECT_FALSE(matches(g, "[[1]"));
}

TEST(Matcher, LongRepetitionKeepsStacksAndArenaSmall) {
  auto g = parse_gbnf("root ::= (\"a\" | \"b\")* \"c\"");
  ASSERT_TRUE(g.ok());
  Matcher m(g.value());
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(m.accept_bytes(i % 3 ? "a" : "b"));
  EXPECT_LE(m.num_stacks(), 3u);
  EXPECT_LT(m.arena_bytes(), 64u * 1024);  // tail calls do not grow the stacks
  EXPECT_TRUE(m.accept_bytes("c"));
  EXPECT_TRUE(m.can_end());
}

// Nested runs of nullable rules: bounded work and no recursion, refused as ambiguous.
TEST(Matcher, NullableRunsAreBoundedNotRecursive) {
  auto g = parse_gbnf("root ::= ((\"a\"?){4096}){4096} \"b\"");
  ASSERT_TRUE(g.ok()) << g.message();
  Matcher m(g.value());
  EXPECT_TRUE(m.overflowed());
  auto fine = parse_gbnf("root ::= (\"a\"?){200} \"b\"");
  ASSERT_TRUE(fine.ok());
  Matcher f(fine.value());
  EXPECT_FALSE(f.overflowed());
  EXPECT_TRUE(f.accept_bytes("aaab"));
  EXPECT_TRUE(f.can_end());
}

TEST(Matcher, AmbiguousGrammarDeduplicatesStacks) {
  auto g = parse_gbnf("root ::= (\"a\" | \"a\" | [a])*");
  ASSERT_TRUE(g.ok());
  Matcher m(g.value());
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(m.accept_bytes("a"));
  EXPECT_LE(m.num_stacks(), 4u);
  EXPECT_FALSE(m.overflowed());
}

}  // namespace
}  // namespace kvw::grammar
