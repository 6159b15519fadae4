#include "grammar/gbnf_parser.h"

#include <gtest/gtest.h>

namespace kvw::grammar {
namespace {

std::string parse_error(const char* text) {
  auto r = parse_gbnf(text);
  return r.ok() ? std::string("OK") : r.message();
}

TEST(GbnfParser, ParsesRulesAlternationGroupsAndRepetition) {
  auto r = parse_gbnf(R"(
    # a comment
    root ::= item ("," item)* | "[]"
    item ::= [a-z]+ [0-9]? "\x41\u00e9\n" (x | y){2,3}
    x ::= "x"
    y ::= [^"\\]
  )");
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.value()->rules[r.value()->root].name, "root");
}

TEST(GbnfParser, ReportsSyntaxErrorsWithLineAndColumn) {
  EXPECT_EQ(parse_error("root ::= \"abc"),
            "grammar line 1, column 14: unterminated string literal");
  EXPECT_NE(parse_error("root = \"a\"").find("expected '::='"), std::string::npos);
  EXPECT_NE(parse_error("root ::= [abc").find("unterminated character class"), std::string::npos);
  EXPECT_NE(parse_error("root ::= (\"a\"").find("expected ')'"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"a\"{3,1}").find("n < m"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
  EXPECT_NE(parse_error("root ::= [z-a]").find("reversed"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"a\" }").find("unexpected character '}'"), std::string::npos);
  EXPECT_NE(parse_error("root ::= \"a\"{99999}").find("over 4096"), std::string::npos);
}

TEST(GbnfParser, RefusesUndefinedMissingRootAndDuplicateRules) {
  EXPECT_EQ(parse_error("root ::= foo"), "grammar rule 'foo' is used but not defined");
  EXPECT_EQ(parse_error("start ::= \"a\""), "grammar has no 'root' rule");
  EXPECT_NE(parse_error("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
}

TEST(GbnfParser, RefusesLeftRecursionNamingTheRule) {
  EXPECT_NE(parse_error("root ::= expr\nexpr ::= expr \"+\" num | num\nnum ::= [0-9]")
                .find("rule 'expr' is left-recursive"),
            std::string::npos);
  // Indirect, through a nullable prefix.
  EXPECT_NE(parse_error("root ::= a\na ::= b? c\nb ::= \"x\"\nc ::= a \"y\" | \"z\"")
                .find("left-recursive"),
            std::string::npos);
  // Right recursion is fine.
  EXPECT_EQ(parse_error("root ::= \"(\" root \")\" | \"\""), "OK");
}

TEST(GbnfParser, RefusesRulesThatCanNeverFinish) {
  EXPECT_NE(parse_error("root ::= \"a\" root").find("can never finish"), std::string::npos);
}

// Untrusted text must not be able to overflow the stack of the parser or the matcher.
TEST(GbnfParser, RefusesDeepNestingInsteadOfRecursingWithoutBound) {
  const std::string deep =
      "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
  EXPECT_NE(parse_error(deep.c_str()).find("nested deeper than 64"), std::string::npos);
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 2000; ++i)
    chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " \"x\"\n";
  chain += "r2000 ::= \"y\"\n";
  EXPECT_NE(parse_error(chain.c_str()).find("rules deep without consuming input"),
            std::string::npos);
  std::string many = "root ::= \"a\"\n";
  for (int i = 0; i < 25000; ++i) many += "q" + std::to_string(i) + " ::= \"a\"\n";
  EXPECT_NE(parse_error(many.c_str()).find("over the limit of 20000"), std::string::npos);
}

TEST(GbnfParser, RefusesGrammarsOverTheSizeLimit) {
  auto small = parse_gbnf("root ::= \"a\"", 64);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.message().find("over the limit of 64 bytes (max_grammar_bytes)"),
            std::string::npos);
  auto rep = parse_gbnf("root ::= \"a\"{4000} \"b\"{4000}", 16 * 1024);
  ASSERT_FALSE(rep.ok());
  EXPECT_NE(rep.message().find("max_grammar_bytes"), std::string::npos);
  EXPECT_TRUE(parse_gbnf("root ::= \"a\"{4000}", 1 << 20).ok());
}

}  // namespace
}  // namespace kvw::grammar
