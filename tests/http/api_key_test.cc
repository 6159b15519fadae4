// The --api-key check (issue 30): exact "Bearer <key>" only; no key set lets everything in.
#include "http/api_key.h"

#include <gtest/gtest.h>

namespace kvw::http {
namespace {

TEST(ApiKey, MatchesOnlyTheExactBearerHeader) {
  const ApiKey key("sk-abc");
  EXPECT_TRUE(key.required());
  EXPECT_TRUE(key.matches("Bearer sk-abc"));
  EXPECT_FALSE(key.matches(""));
  EXPECT_FALSE(key.matches("Bearer sk-ab"));    // a prefix
  EXPECT_FALSE(key.matches("Bearer sk-abcd"));  // longer
  EXPECT_FALSE(key.matches("Bearer sk-abC"));   // last byte differs
  EXPECT_FALSE(key.matches("bearer sk-abc"));   // scheme is compared as given
  EXPECT_FALSE(key.matches(std::string("Bearer sk-abc\0", 14)));
}

TEST(ApiKey, NoKeyLetsEverythingIn) {
  const ApiKey none("");
  EXPECT_FALSE(none.required());
  EXPECT_TRUE(none.matches(""));
  EXPECT_TRUE(none.matches("Bearer anything"));
}

TEST(ApiKey, ConstantTimeEqualsIsEquality) {
  EXPECT_TRUE(constant_time_equals("", ""));
  EXPECT_TRUE(constant_time_equals("abc", "abc"));
  EXPECT_FALSE(constant_time_equals("abc", "abd"));
  EXPECT_FALSE(constant_time_equals("abc", "ab"));
  EXPECT_FALSE(constant_time_equals("", "a"));
}

}  // namespace
}  // namespace kvw::http
