// Stop strings across token boundaries: held back while they might match, never sent.
#include "server/stop_matcher.h"

#include <gtest/gtest.h>

namespace kvw::server {
namespace {

TEST(StopMatcher, MatchSplitAcrossPiecesIsExcludedFromOutput) {
  StopMatcher m({"\n\nUser:"});
  std::string out;
  EXPECT_FALSE(m.push("Hello", out));
  EXPECT_FALSE(m.push(" world\n", out));
  EXPECT_EQ(out, "Hello world");  // "\n" held: it may start the stop string
  EXPECT_FALSE(m.push("\nUs", out));
  EXPECT_EQ(out, "Hello world");
  EXPECT_TRUE(m.push("er: more", out));
  EXPECT_EQ(out, "Hello world");
  EXPECT_TRUE(m.matched());
  EXPECT_TRUE(m.push("ignored", out));
  EXPECT_EQ(out, "Hello world");
}

TEST(StopMatcher, HeldTextIsReleasedWhenItStopsMatching) {
  StopMatcher m({"END"});
  std::string out;
  EXPECT_FALSE(m.push("xEN", out));
  EXPECT_EQ(out, "x");
  EXPECT_TRUE(m.push("D?", out));
  EXPECT_EQ(out, "x");
  StopMatcher n({"END"});
  std::string o2;
  n.push("xEN", o2);
  n.push("Z", o2);
  EXPECT_EQ(o2, "xENZ");
  n.push("E", o2);
  EXPECT_EQ(n.flush(), "E");
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"bb", "a"});
  std::string out;
  EXPECT_TRUE(m.push("xxbbya", out));
  EXPECT_EQ(out, "xx");
}

TEST(StopMatcher, EmptyStopStringsAreIgnored) {
  StopMatcher m({""});
  std::string out;
  EXPECT_FALSE(m.push("abc", out));
  EXPECT_EQ(out, "abc");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, MultibyteStopHeldByteExact) {
  StopMatcher m({"é!"});
  std::string out;
  EXPECT_FALSE(m.push("caf\xC3\xA9", out));
  EXPECT_EQ(out, "caf");
  EXPECT_TRUE(m.push("!", out));
  EXPECT_EQ(out, "caf");
}

// min_tokens (vLLM): text pushed unchecked never matches, even a whole stop string; a match
// must end in checked text, though it may start in the unchecked part.
TEST(StopMatcher, UncheckedTextNeverMatchesButMayStartAMatch) {
  StopMatcher m({"ab", "xyz"});
  std::string out;
  EXPECT_FALSE(m.push("1ab2x", out, /*check=*/false));
  EXPECT_EQ(out, "1ab2");  // "x" may start "xyz": held
  EXPECT_FALSE(m.push("y", out, /*check=*/false));
  EXPECT_TRUE(m.push("z", out));  // the match ends in checked text
  EXPECT_EQ(out, "1ab2");
  EXPECT_TRUE(m.matched());

  StopMatcher n({"ab", "abcab"});  // held text may hold a whole shorter stop string
  std::string o;
  EXPECT_FALSE(n.push("abca", o, false));
  EXPECT_EQ(o, "");
  EXPECT_FALSE(n.push("q", o));  // "ab" ended before this push: no match
  EXPECT_EQ(o, "abcaq");
  EXPECT_TRUE(n.push("ab", o));
  EXPECT_EQ(o, "abcaq");
}

}  // namespace
}  // namespace kvw::server
