// TokenSpan (a shared prompt + a sequence's outputs as one run) and TokenList (one immutable
// copy shared by the choices of a prompt): positions, sub-runs across the seam, and sharing.
#include "core/token_span.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/token_list.h"

namespace kvw {
namespace {

TEST(TokenSpan, IndexesAndCutsAcrossTheSeamAsOneRun) {
  const std::vector<int32_t> prompt = {1, 2, 3, 4}, outputs = {5, 6, 7};
  const TokenSpan t(prompt, outputs);
  ASSERT_EQ(t.size(), 7u);
  for (size_t i = 0; i < t.size(); ++i) EXPECT_EQ(t[i], int32_t(i + 1)) << i;
  EXPECT_EQ(t.back(), 7);
  EXPECT_EQ(t.to_vector(), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(t.subspan(2, 3).to_vector(), (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(t.subspan(5).to_vector(), (std::vector<int32_t>{6, 7}));
  EXPECT_EQ(t.first(2).to_vector(), (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(t.subspan(9, 2).empty()) << "clipped, not past the end";
  // Contiguous: a view inside one part, a copy across the seam.
  std::vector<int32_t> scratch;
  EXPECT_EQ(t.subspan(0, 3).contiguous(scratch).data(), prompt.data());
  EXPECT_EQ(t.subspan(4, 2).contiguous(scratch).data(), outputs.data());
  const auto across = t.subspan(3, 2).contiguous(scratch);
  EXPECT_EQ(across.data(), scratch.data());
  EXPECT_EQ(std::vector<int32_t>(across.begin(), across.end()), (std::vector<int32_t>{4, 5}));
}

TEST(TokenList, CopiesShareOneListAndLetGo) {
  TokenList a(std::vector<int32_t>{1, 2, 3});
  {
    const TokenList b = a;  // what each choice's engine request keeps
    EXPECT_TRUE(b.shares_with(a));
    EXPECT_EQ(b.data(), a.data());
    EXPECT_EQ(a.use_count(), 2);
  }
  EXPECT_EQ(a.use_count(), 1);
  const TokenList same_ids{1, 2, 3};
  EXPECT_EQ(same_ids, a);
  EXPECT_FALSE(same_ids.shares_with(a)) << "equal ids in another list are another copy";
  EXPECT_TRUE(TokenList().empty());
}

}  // namespace
}  // namespace kvw
