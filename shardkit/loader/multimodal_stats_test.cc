#include "shardkit/loader/multimodal_stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardkit {
namespace {

SampleTable RandomTable(std::mt19937_64& rng, Index n) {
  std::vector<Index> lengths, counts, vision;
  for (Index s = 0; s < n; ++s) {
    Index c = static_cast<Index>(rng() % 7);
    counts.push_back(c);
    lengths.push_back(20 + static_cast<Index>(rng() % 280) + 64 * c);
    for (Index i = 0; i < c; ++i) vision.push_back(64 * (1 + static_cast<Index>(rng() % 13)));
  }
  return SampleTable::Make(lengths, counts, vision);
}

// Per (step, rank), recomputed from the plan's rows and the table alone.
struct Cell {
  Index tokens = 0, images = 0;
  double vision = 0;
};

TEST(MultimodalStats, PlanDealMatchesTheRowsAndThePlansBalance) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    MultimodalOptions o;
    o.seq_len = 1024;
    o.world_size = 1 + static_cast<Index>(rng() % 8);
    o.rows_per_rank = 1 + static_cast<Index>(rng() % 3);
    o.max_images = 18;
    o.vision_cost = trial % 2 ? VisionCost::kSquared : VisionCost::kTokens;
    o.mode = trial % 3 == 0 ? MultimodalMode::kDrop : MultimodalMode::kPad;
    o.seed = rng();
    SampleTable table = RandomTable(rng, 50 + static_cast<Index>(rng() % 400));
    MultimodalPlan plan(table, o);
    MultimodalDealStats st = DealStats(plan, MultimodalDeal::kPlan);
    ASSERT_EQ(st.num_steps, plan.num_steps());
    Index total = 0;
    for (Index s = 0; s < plan.num_steps(); ++s) {
      for (Index r = 0; r < o.world_size; ++r) {
        Cell c;
        for (const auto& row : plan.Rows(r, s)) {
          for (Index x : row) {
            c.tokens += table.lengths[static_cast<std::size_t>(x)];
            c.images += table.Images(x);
            c.vision += table.Cost(x, o.vision_cost);
          }
        }
        const auto k = static_cast<std::size_t>(s * o.world_size + r);
        EXPECT_EQ(st.tokens[k], c.tokens);
        EXPECT_EQ(st.images[k], c.images);
        EXPECT_DOUBLE_EQ(st.vision[k], c.vision);
        total += c.tokens;
      }
    }
    if (o.mode == MultimodalMode::kPad) {
      EXPECT_EQ(total, plan.summary().tokens);
    }
    const MultimodalBalance& b = plan.balance();
    ASSERT_EQ(st.vision_ratio.per_step.size(), b.vision_ratio.size());
    for (std::size_t s = 0; s < b.vision_ratio.size(); ++s) {
      EXPECT_NEAR(st.vision_ratio.per_step[s], b.vision_ratio[s], 1e-12);
      EXPECT_NEAR(st.token_ratio.per_step[s], b.token_ratio[s], 1e-12);
    }
    EXPECT_NEAR(st.vision_ratio.mean, b.mean_vision_ratio, 1e-12);
    EXPECT_NEAR(st.vision_ratio.max, b.max_vision_ratio, 1e-12);
    const double cap = static_cast<double>(st.num_steps * o.world_size * o.rows_per_rank) * 1024;
    EXPECT_NEAR(st.padding, cap > 0 ? 1 - static_cast<double>(total) / cap : 0, 1e-12);
  }
}

TEST(MultimodalStats, RoundRobinDealsTheSamePacksInIdOrder) {
  std::mt19937_64 rng(11);
  SampleTable table = RandomTable(rng, 333);
  MultimodalOptions o;
  o.seq_len = 1024;
  o.world_size = 4;
  o.rows_per_rank = 2;
  o.max_images = 18;
  MultimodalPlan plan(table, o);
  MultimodalDealStats after = DealStats(plan, MultimodalDeal::kPlan);
  MultimodalDealStats before = DealStats(plan, MultimodalDeal::kRoundRobin);
  ASSERT_EQ(before.num_steps, after.num_steps);
  EXPECT_DOUBLE_EQ(before.padding, after.padding);
  // Pack ids 0..P-1 (pad mode deals every pack): pack j at step j / 8, rank j % 4.
  std::vector<Index> tokens(before.tokens.size(), 0), images(tokens.size(), 0);
  for (Index p = 0; p < plan.summary().packs; ++p) {
    const auto k = static_cast<std::size_t>((p / 8) * 4 + p % 4);
    tokens[k] += plan.PackTokens(p);
    for (Index x : plan.PackSamples(p)) images[k] += table.Images(x);
  }
  EXPECT_EQ(before.tokens, tokens);
  EXPECT_EQ(before.images, images);
  EXPECT_EQ(before.filler, after.filler);
  EXPECT_GT(before.vision_ratio.mean, after.vision_ratio.mean);
}

TEST(MultimodalStats, SampleTableFromJsonReadsPythonsSampleTable) {
  SampleTable t = SampleTableFromJson(
      R"({"lengths": [10, 20, 30], "vision_tokens": [[64, 4], [], [9]]})", "table");
  EXPECT_EQ(t.lengths, (std::vector<Index>{10, 20, 30}));
  EXPECT_EQ(t.image_offsets, (std::vector<Index>{0, 2, 2, 3}));
  EXPECT_EQ(t.vision_tokens, (std::vector<Index>{64, 4, 9}));
  SampleTable c = SampleTableFromJson(R"({"lengths": [1, 2], "image_counts": [0, 3]})", "table");
  EXPECT_EQ(c.vision_tokens, (std::vector<Index>{1, 1, 1}));
  EXPECT_EQ(SampleTableFromJson(R"({"lengths": [5]})", "table").vision_tokens.size(), 0u);
}

TEST(MultimodalStats, SampleTableFromJsonNamesTheBadField) {
  auto message = [](const char* json) {
    try {
      (void)SampleTableFromJson(json, "table");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message("[1]").rfind("table", 0), 0u);
  EXPECT_NE(message(R"({"lengths": [1, -2]})").find("sample 1 is negative"), std::string::npos);
  EXPECT_NE(message(R"({"lengths": [1], "vision_tokens": [["a"]]})").find("vision_tokens[0][0]"),
            std::string::npos);
  EXPECT_NE(message(R"({"lengths": [1, 2], "vision_tokens": [[1]]})").find("1 samples"),
            std::string::npos);
  EXPECT_NE(message(R"({"lengths": [1], "extra": 1})").find("extra"), std::string::npos);
  EXPECT_NE(
      message(R"({"lengths": [1], "image_counts": [1], "vision_tokens": [[1]]})").find("not both"),
      std::string::npos);
  EXPECT_NE(message("{").find("not valid JSON"), std::string::npos);
}

TEST(MultimodalStats, ParseVisionRuleNamesTheValue) {
  EXPECT_EQ(ParseVisionRule("qwen"), VisionRule::kQwen);
  EXPECT_THROW((void)ParseVisionRule("big"), std::invalid_argument);
}

}  // namespace
}  // namespace shardkit
