#include "model/seen_tokens.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvw {
namespace {

using Ids = std::vector<int32_t>;

TEST(SeenTokens, KeepsDistinctIdsSortedWithinTheReservedCapacity) {
  SeenTokens s(8);
  const size_t reserved = s.memory_bytes();
  EXPECT_EQ(reserved, 8 * sizeof(int32_t));
  const Ids prompt = {7, 3, 7, 7, 1, 3};
  s.add(prompt);
  EXPECT_EQ(Ids(s.ids().begin(), s.ids().end()), (Ids{1, 3, 7}));
  s.add(5);
  s.add(3);
  s.add(0);
  const Ids more = {9, 1, 5, 2, 9};
  s.add(more);
  EXPECT_EQ(Ids(s.ids().begin(), s.ids().end()), (Ids{0, 1, 2, 3, 5, 7, 9}));
  s.add(Ids{});
  s.add(Ids{4});
  EXPECT_EQ(Ids(s.ids().begin(), s.ids().end()), (Ids{0, 1, 2, 3, 4, 5, 7, 9}));
  EXPECT_EQ(s.memory_bytes(), reserved) << "adding within the capacity never reallocates";
}

}  // namespace
}  // namespace kvw
