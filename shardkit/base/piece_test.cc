#include "shardkit/base/piece.h"

#include <gtest/gtest.h>

#include <limits>

namespace shardkit {
namespace {

constexpr Index kMax = std::numeric_limits<Index>::max();

TEST(PieceTest, RegressionStartPlusLengthNearTwoToThe63DoesNotWrap) {
  // [2^63 - 2, 2^63 - 2 + 2^20) wraps to a negative end with plain addition
  // and passed `start + length <= limit` checks.
  EXPECT_FALSE(PieceWithin(kMax - 1, Index{1} << 20, 100));
  EXPECT_FALSE(PieceWithin(4, kMax - 1, 100));
  EXPECT_FALSE(PieceWithin(kMax, kMax, kMax));
  EXPECT_TRUE(PieceWithin(kMax - 1, 1, kMax));
}

TEST(PieceTest, MatchesTheDefinitionOnSmallValues) {
  for (Index limit = 0; limit < 6; ++limit) {
    for (Index start = -2; start < 8; ++start) {
      for (Index length = -2; length < 8; ++length) {
        const bool inside = start >= 0 && length >= 0 && start + length <= limit;
        EXPECT_EQ(PieceWithin(start, length, limit), inside) << start << " " << length;
      }
    }
  }
}

TEST(PieceTest, AddWithoutOverflowRefusesWhatDoesNotFit) {
  EXPECT_EQ(AddWithoutOverflow(2, 3), 5);
  EXPECT_EQ(AddWithoutOverflow(kMax, 0), kMax);
  EXPECT_EQ(AddWithoutOverflow(kMax, 1), std::nullopt);
  EXPECT_EQ(AddWithoutOverflow(-kMax - 1, -1), std::nullopt);
}

}  // namespace
}  // namespace shardkit
