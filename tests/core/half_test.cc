#include "core/half.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kvw {
namespace {

TEST(Half, EveryF16RoundTripsThroughF32) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32((uint16_t)h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << "h=" << h;
  }
}

TEST(Half, F32ToF16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);            // rounds up to inf
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);  // tie goes to even
  EXPECT_EQ(f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(5.9604645e-08f), 0x0001);  // smallest subnormal
}

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_FLOAT_EQ(bf16_to_f32(f32_to_bf16(3.140625f)), 3.140625f);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808000u)), 0x3f80);  // tie to even
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f818000u)), 0x3f82);
}

}  // namespace
}  // namespace kvw
