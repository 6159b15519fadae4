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

}  // namespace
}  // namespace kvw::grammar
