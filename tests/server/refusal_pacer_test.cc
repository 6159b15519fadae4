// RefusalPacer (server/refusal_pacer.h): door refusals are held only in a storm, for at most the
// configured hold and never longer than the Retry-After they carry.
#include "server/refusal_pacer.h"

#include <gtest/gtest.h>

namespace kvw::server {
namespace {

TEST(RefusalPacer, HoldsOnlyOnceMoreThanHoldAfterRefusalsCameWithinASecond) {
  RefusalPacer p({.hold_s = 0.5, .hold_after = 3});
  EXPECT_EQ(p.on_refusal(10.0, 5), 0);
  EXPECT_EQ(p.on_refusal(10.1, 5), 0);
  EXPECT_EQ(p.on_refusal(10.2, 5), 0);
  EXPECT_EQ(p.on_refusal(10.3, 5), 0.5);  // the fourth within the second
  EXPECT_EQ(p.num_held(), 1u);
  // 10.3 s later the storm is over: a lone refusal is answered at once.
  EXPECT_EQ(p.on_refusal(20.6, 5), 0);
  EXPECT_EQ(p.num_held(), 1u);
}

TEST(RefusalPacer, TheLastSecondStillCountsAcrossTheBoundary) {
  RefusalPacer p({.hold_s = 1.0, .hold_after = 3});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(p.on_refusal(10.9, 5), 0);
  // 0.2 s later, in the next whole second: the three of 0.2 s ago are still in the window.
  EXPECT_EQ(p.on_refusal(11.1, 5), 1.0);
  // Two whole seconds later nothing recent remains.
  EXPECT_EQ(p.on_refusal(13.05, 5), 0);
}

TEST(RefusalPacer, AHoldNeverOutlastsTheRetryAfterItCarries) {
  RefusalPacer p({.hold_s = 3.0, .hold_after = 0});
  EXPECT_EQ(p.on_refusal(1.0, 1), 1.0);
  EXPECT_EQ(p.on_refusal(1.1, 2), 2.0);
  EXPECT_EQ(p.on_refusal(1.2, 60), 3.0);
}

TEST(RefusalPacer, HoldZeroTurnsItOff) {
  RefusalPacer p({.hold_s = 0, .hold_after = 0});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(p.on_refusal(1.0 + i * 1e-3, 5), 0);
  EXPECT_EQ(p.num_held(), 0u);
}

}  // namespace
}  // namespace kvw::server
