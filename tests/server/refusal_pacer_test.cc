// refusal_hold_s (server/refusal_pacer.h): a 429 is held only for a client back before its
// connection's last Retry-After ran out, until it runs out, and never longer than the hold.
#include "server/refusal_pacer.h"

#include <gtest/gtest.h>

namespace kvw::server {
namespace {

TEST(RefusalPacer, OnlyAClientBackEarlyIsHeldUntilItsRetryAfterRunsOut) {
  const RefusalPacing p{.hold_s = 2};
  EXPECT_EQ(refusal_hold_s(p, 0), 0);  // a first refusal, or a client that waited
  EXPECT_EQ(refusal_hold_s(p, 0.95), 0.95);
  EXPECT_EQ(refusal_hold_s(p, 7), 2);  // capped at the hold
}

TEST(RefusalPacer, HoldZeroTurnsItOff) {
  const RefusalPacing p{.hold_s = 0};
  EXPECT_EQ(refusal_hold_s(p, 0.5), 0);
  EXPECT_EQ(refusal_hold_s(p, 60), 0);
}

}  // namespace
}  // namespace kvw::server
