#include "shardkit/sharding/whale.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <stdexcept>
#include <string>

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
                 "WHALE_DROP_LAST_FILES: 'maybe' is not a boolean (expected 1/0, true/false, "
                 "yes/no or on/off, any case; empty is false)");
  }
}

TEST(WhaleTest, RegressionBadValueListsEveryAcceptedSpelling) {
  // The message said "expected true or false" though 1/0, yes/no, on/off are
  // accepted too.
  for (const char* yes : {"1", "true", "TRUE", "yes", "On"}) {
    EXPECT_TRUE(ParseWhaleBool("WHALE_UNBALANCED_IO_SLICING", yes)) << yes;
  }
  for (const char* no : {"0", "false", "No", "off", ""}) {
    EXPECT_FALSE(ParseWhaleBool("WHALE_UNBALANCED_IO_SLICING", no)) << no;
  }
  try {
    (void)ParseWhaleBool("WHALE_UNBALANCED_IO_SLICING", "2");
    FAIL();
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    for (const char* spelling : {"1/0", "true/false", "yes/no", "on/off"}) {
      EXPECT_NE(m.find(spelling), std::string::npos) << m;
    }
  }
}

TEST(WhaleTest, PolicyIsReadFromAnInjectedEnvironment) {
  std::map<std::string, std::string> env;
  auto lookup = [&](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  EXPECT_EQ(WhalePolicyFrom(lookup), (WhalePolicy{false, false}));
  env["WHALE_UNBALANCED_IO_SLICING"] = "yes";
  EXPECT_EQ(WhalePolicyFrom(lookup), (WhalePolicy{true, false}));
  env["WHALE_DROP_LAST_FILES"] = "1";
  EXPECT_EQ(WhalePolicyFrom(lookup), (WhalePolicy{true, true}));
  env["WHALE_DROP_LAST_FILES"] = "perhaps";
  EXPECT_THROW((void)WhalePolicyFrom(lookup), std::invalid_argument);
  EXPECT_EQ(ParseWhalePolicy("whale_policy", "drop_last"), (WhalePolicy{false, true}));
  EXPECT_EQ(ParseWhalePolicy("whale_policy", "unbalanced"), (WhalePolicy{true, false}));
  EXPECT_EQ(ParseWhalePolicy("whale_policy", "default"), (WhalePolicy{}));
  EXPECT_THROW((void)ParseWhalePolicy("whale_policy", "env"), std::invalid_argument);
}

}  // namespace
}  // namespace shardkit
