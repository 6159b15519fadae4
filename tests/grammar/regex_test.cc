#include "grammar/regex.h"

#include <gtest/gtest.h>

#include "grammar/matcher.h"

namespace kvw::grammar {
namespace {

bool matches(std::string_view re, std::string_view text) {
  auto g = compile_regex(re);
  EXPECT_TRUE(g.ok()) << g.message();
  if (!g.ok()) return false;
  Matcher m(g.value());
  return m.accept_bytes(text) && m.can_end();
}

std::string error_of(std::string_view re) {
  auto g = compile_regex(re);
  return g.ok() ? "OK" : g.message();
}

TEST(Regex, PracticalSubset) {
  EXPECT_TRUE(matches(R"(\d{3}-\d{4})", "555-1234"));
  EXPECT_FALSE(matches(R"(\d{3}-\d{4})", "555-123"));
  EXPECT_TRUE(matches("^(yes|no)$", "yes"));
  EXPECT_FALSE(matches("^(yes|no)$", "yesno"));
  EXPECT_TRUE(matches(R"([A-Z][a-z]+(?: [A-Z][a-z]+)*)", "New York"));
  EXPECT_TRUE(matches(R"(\w+@\w+\.com)", "a_1@b.com"));
  EXPECT_FALSE(matches(R"(\w+@\w+\.com)", "a@bxcom"));
  EXPECT_TRUE(matches("a.c",
                      "a\xC3\xA9"
                      "c"));
  EXPECT_FALSE(matches("a.c", "a\nc"));
  EXPECT_TRUE(matches(R"([^\d\s]+)", "abc"));
  EXPECT_FALSE(matches(R"([^\d\s]+)", "a c"));
  EXPECT_TRUE(matches(R"(x{2,}?y?)", "xxx"));
  EXPECT_TRUE(matches(R"(\(\)\[\]\.\*)", "()[].*"));
  EXPECT_TRUE(matches(R"([\]"^-])", "\""));
  EXPECT_TRUE(matches(R"((?P<n>a)|(?<m>b))", "b"));
  EXPECT_TRUE(matches("", ""));
}

TEST(Regex, RefusesUnsupportedConstructsNamingThem) {
  EXPECT_NE(error_of(R"((a)\1)").find("escape \\1 is not supported"), std::string::npos);
  EXPECT_NE(error_of("(?=a)b").find("lookaround"), std::string::npos);
  EXPECT_NE(error_of(R"(\bword)").find("escape \\b"), std::string::npos);
  EXPECT_NE(error_of("a++").find("possessive"), std::string::npos);
  EXPECT_NE(error_of("*a").find("nothing to repeat"), std::string::npos);
  EXPECT_NE(error_of("a(b").find("missing ')'"), std::string::npos);
  EXPECT_NE(error_of("a)b").find("unbalanced"), std::string::npos);
  EXPECT_NE(error_of("a^b").find("anchors"), std::string::npos);
  EXPECT_NE(error_of("[abc").find("unterminated character class"), std::string::npos);
  EXPECT_NE(error_of("a{2,1}").find("n < m"), std::string::npos);
  EXPECT_NE(error_of(std::string(10000, '(') + std::string(10000, ')')).find("nested deeper"),
            std::string::npos);
}

TEST(Choice, ExactlyOneOfTheStrings) {
  auto g = compile_choice({"positive", "negative", "neu\"tral"});
  ASSERT_TRUE(g.ok());
  for (const char* s : {"positive", "negative", "neu\"tral"}) {
    Matcher m(g.value());
    EXPECT_TRUE(m.accept_bytes(s) && m.can_end()) << s;
  }
  Matcher m(g.value());
  EXPECT_FALSE(m.accept_bytes("pos") && m.can_end());
  EXPECT_FALSE(compile_choice({}).ok());
}

// Choices are factored by prefix like enums: class members that need escaping, UTF-8, a choice
// that is a prefix of others, and 300 single characters (one class, not 300 stacks).
TEST(Choice, FactoredChoicesKeepEveryStringExactly) {
  const std::vector<std::string> tricky = {"a]",
                                           "a\\",
                                           "a-",
                                           "a^",
                                           "a[",
                                           "a\n",
                                           "a\xc3\xa9",
                                           "a",
                                           "ab",
                                           "abc",
                                           "b\"",
                                           "\xe2\x82\xac"
                                           "1"};
  auto g = compile_choice(tricky);
  ASSERT_TRUE(g.ok()) << g.message();
  for (const std::string& s : tricky) {
    Matcher m(g.value());
    EXPECT_TRUE(m.accept_bytes(s) && m.can_end()) << s;
  }
  for (const char* bad : {"", "a]]", "abcd", "b", "\xe2\x82\xac", "ac", "a\xc3\xa8"}) {
    Matcher m(g.value());
    EXPECT_FALSE(m.accept_bytes(bad) && m.can_end()) << bad;
  }
  std::vector<std::string> cjk;
  for (uint32_t cp = 0x4E00; cp < 0x4E00 + 300; ++cp) {
    cjk.push_back(
        {char(0xE0 | (cp >> 12)), char(0x80 | ((cp >> 6) & 0x3F)), char(0x80 | (cp & 0x3F))});
  }
  auto chars = compile_choice(cjk);
  ASSERT_TRUE(chars.ok()) << chars.message();
  Matcher m(chars.value());
  EXPECT_EQ(m.num_stacks(), 1u);
  EXPECT_TRUE(m.accept_bytes(cjk[299]) && m.can_end());
  // 300 choices that still differ after their first character cannot share one class.
  for (std::string& s : cjk) s += "x";
  auto wide = compile_choice(cjk);
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.message().find("at most 256"), std::string::npos) << wide.message();
}

}  // namespace
}  // namespace kvw::grammar
