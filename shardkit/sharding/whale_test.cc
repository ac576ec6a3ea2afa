#include "shardkit/sharding/whale.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace shardkit {
namespace {

TEST(WhaleTest, DefaultReplicatesWithShuffleWhenFilesDoNotDivide) {
  WhaleChoice c = WhaleSlicing(10, 3, false, false);
  EXPECT_EQ(c.remainder, Remainder::kReplicate);
  EXPECT_TRUE(c.shuffle);
  ShardPlan plan = WhalePlan(10, 3, false, false, 5, 0);
  EXPECT_EQ(plan.Counts(), (std::vector<Index>{10, 10, 10}));
}

TEST(WhaleTest, UnbalancedWinsOverDropAndWarnsAboutHangs) {
  WhaleChoice c = WhaleSlicing(10, 3, true, true);
  EXPECT_EQ(c.remainder, Remainder::kUneven);
  EXPECT_NE(c.warning.find("hang"), std::string::npos);
  EXPECT_EQ(WhalePlan(10, 3, true, true).Counts(), (std::vector<Index>{4, 3, 3}));
}

TEST(WhaleTest, DropLastSplitsEvenlyAndCountsTheDroppedFiles) {
  ShardPlan plan = WhalePlan(10, 3, false, true);
  EXPECT_EQ(plan.Counts(), (std::vector<Index>{3, 3, 3}));
  EXPECT_EQ(plan.Dropped(), 1);
}

TEST(WhaleTest, FewerFilesThanWorkersAlwaysReplicates) {
  for (bool unbalanced : {false, true}) {
    for (bool drop : {false, true}) {
      WhaleChoice c = WhaleSlicing(3, 8, unbalanced, drop);
      EXPECT_EQ(c.remainder, Remainder::kReplicate);
      EXPECT_EQ(c.warning.empty(), !(unbalanced || drop));
    }
  }
}

TEST(WhaleTest, EvenFileCountsSplitWithoutRemainder) {
  ShardPlan plan = WhalePlan(12, 3, false, false);
  EXPECT_EQ(plan.Counts(), (std::vector<Index>{4, 4, 4}));
  EXPECT_TRUE(plan.Audit().exactly_once);
}

TEST(WhaleTest, ParsesBooleanSwitches) {
  EXPECT_TRUE(ParseWhaleBool("WHALE_DROP_LAST_FILES", "True"));
  EXPECT_TRUE(ParseWhaleBool("WHALE_DROP_LAST_FILES", "1"));
  EXPECT_FALSE(ParseWhaleBool("WHALE_DROP_LAST_FILES", "False"));
  EXPECT_FALSE(ParseWhaleBool("WHALE_DROP_LAST_FILES", ""));
  try {
    (void)ParseWhaleBool("WHALE_DROP_LAST_FILES", "maybe");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "WHALE_DROP_LAST_FILES: 'maybe' is not a boolean (expected true or false)");
  }
}

}  // namespace
}  // namespace shardkit
