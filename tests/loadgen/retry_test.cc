// SDK-style retry decisions and delays (loadgen/retry.h), against the openai SDK's rules.
#include "loadgen/retry.h"

#include <gtest/gtest.h>

namespace kvw::loadgen {
namespace {

TEST(Retry, RetriesWhatTheSdkRetries) {
  for (int s : {0, 408, 409, 429, 500, 502, 503, 504}) EXPECT_TRUE(is_retryable(s, {})) << s;
  for (int s : {200, 400, 401, 404, 413, 422}) EXPECT_FALSE(is_retryable(s, {})) << s;
  EXPECT_FALSE(is_retryable(503, {std::nullopt, false}));  // x-should-retry: false wins
  EXPECT_TRUE(is_retryable(400, {std::nullopt, true}));
}

TEST(Retry, ParsesRetryAfterMsSecondsAndHttpDates) {
  EXPECT_DOUBLE_EQ(*parse_retry_hints({{"retry-after", "3"}}, 0).wait_s, 3.0);
  EXPECT_DOUBLE_EQ(*parse_retry_hints({{"retry-after", "1.5"}}, 0).wait_s, 1.5);
  // retry-after-ms wins; "0" there is no instruction and Retry-After is used.
  EXPECT_DOUBLE_EQ(*parse_retry_hints({{"retry-after", "3"}, {"retry-after-ms", "250"}}, 0).wait_s,
                   0.25);
  EXPECT_DOUBLE_EQ(*parse_retry_hints({{"retry-after-ms", "0"}, {"retry-after", "2"}}, 0).wait_s,
                   2.0);
  // Wed, 21 Oct 2015 07:28:00 GMT is 1445412480 s after the epoch.
  auto date = parse_retry_hints({{"retry-after", "Wed, 21 Oct 2015 07:28:00 GMT"}}, 1445412470);
  ASSERT_TRUE(date.wait_s.has_value());
  EXPECT_DOUBLE_EQ(*date.wait_s, 10.0);
  EXPECT_FALSE(parse_retry_hints({{"retry-after", "soon"}}, 0).wait_s.has_value());
  EXPECT_FALSE(parse_retry_hints({}, 0).wait_s.has_value());
  EXPECT_EQ(parse_retry_hints({{"x-should-retry", "false"}}, 0).should_retry, false);
}

TEST(Retry, HonoursAServerWaitUnderAMinuteElseBacksOff) {
  EXPECT_DOUBLE_EQ(retry_delay_s({2.0, std::nullopt}, 0, 0.9), 2.0);
  EXPECT_DOUBLE_EQ(retry_delay_s({59.0, std::nullopt}, 1, 0.9), 59.0);
  // 60 s or more, zero or negative (a date in the past): the SDK's own backoff.
  EXPECT_DOUBLE_EQ(retry_delay_s({60.0, std::nullopt}, 0, 0), 0.5);
  EXPECT_DOUBLE_EQ(retry_delay_s({0.0, std::nullopt}, 1, 0), 1.0);
  EXPECT_DOUBLE_EQ(retry_delay_s({-5.0, std::nullopt}, 2, 0), 2.0);
}

TEST(Retry, BackoffDoublesFromHalfASecondToEightWithUpTo25PercentJitter) {
  const double expected[] = {0.5, 1, 2, 4, 8, 8, 8};
  for (int n = 0; n < 7; ++n) {
    EXPECT_DOUBLE_EQ(retry_delay_s({}, n, 0), expected[n]) << n;
    EXPECT_DOUBLE_EQ(retry_delay_s({}, n, 1), 0.75 * expected[n]) << n;
    const double mid = retry_delay_s({}, n, 0.5);
    EXPECT_GT(mid, 0.75 * expected[n]);
    EXPECT_LT(mid, expected[n]);
  }
}

}  // namespace
}  // namespace kvw::loadgen
