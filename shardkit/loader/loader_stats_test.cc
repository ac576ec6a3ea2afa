#include "shardkit/loader/loader_stats.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "shardkit/loader/internal/test_corpus.h"
#include "shardkit/loader/loader.h"

namespace shardkit {
namespace {

using loader_testing::PlanOptions;

using Data = loader_testing::TestCorpus;
using loader_testing::RowOptions;

Data MakeData(std::mt19937_64& rng, Index docs, Index max_len) {
  return loader_testing::RandomCorpus(rng, docs, 0, max_len,
                                      [](Index, Index k) { return static_cast<std::int32_t>(k); });
}

std::vector<RankLoadStats> RunAllRanks(const Data& data, LoaderOptions o, Index max_batches = -1) {
  std::vector<RankLoadStats> out;
  for (Index r = 0; r < o.world_size; ++r) {
    RankLoadStats s;
    s.rank = r;
    o.rank = r;
    TokenLoader loader(data.source, o);
    Index n = 0;
    while (max_batches < 0 || n < max_batches) {
      auto b = loader.Next();
      if (!b) break;
      s.Add(*b);
      ++n;
    }
    s.dropped = loader.dropped();
    out.push_back(s);
  }
  return out;
}

TEST(LoaderStatsTest, AWholeEpochOnEveryRankIsCompleteAndAddsUp) {
  std::mt19937_64 rng(3);
  Data data = MakeData(rng, 300, 60);
  LoaderOptions o = RowOptions(32, 3, 4);
  auto ranks = RunAllRanks(data, o);
  LoadRunScope scope;
  scope.data_tokens = data.source->num_tokens();
  const LoadSummary s = SummarizeLoad(ranks, scope);
  EXPECT_TRUE(s.complete);
  EXPECT_EQ(s.tokens, static_cast<Index>(data.tokens.size()));
  Index batches = 0, lo = ranks[0].batches, hi = 0;
  for (const auto& r : ranks) {
    batches += r.batches;
    lo = std::min(lo, r.batches);
    hi = std::max(hi, r.batches);
    EXPECT_EQ(r.slots, r.batches * 3 * 32);
  }
  EXPECT_EQ(s.batches, batches);
  EXPECT_EQ(s.batch_imbalance, hi - lo);
  EXPECT_DOUBLE_EQ(s.padding, 1.0 - static_cast<double>(s.tokens) / (batches * 3 * 32));
}

TEST(LoaderStatsTest, CompleteOnlyWhenTheRunCanProveIt) {
  std::mt19937_64 rng(4);
  Data data = MakeData(rng, 200, 60);
  LoaderOptions o = RowOptions(32, 2, 2);
  LoadRunScope scope;
  scope.data_tokens = data.source->num_tokens();
  EXPECT_FALSE(SummarizeLoad(RunAllRanks(data, o, 3), scope).complete);  // stopped early
  scope.whole_epoch = false;
  EXPECT_FALSE(SummarizeLoad(RunAllRanks(data, o), scope).complete);
  scope.whole_epoch = true;
  scope.all_ranks = false;
  EXPECT_FALSE(SummarizeLoad(RunAllRanks(data, o), scope).complete);
  scope.all_ranks = true;
  o.oversize = Oversize::kDrop;  // documents over 32 tokens are dropped
  const LoadSummary dropped = SummarizeLoad(RunAllRanks(data, o), scope);
  EXPECT_GT(dropped.dropped, 0);
  EXPECT_FALSE(dropped.complete);
  scope.data_tokens = 0;  // an empty data set proves nothing
  EXPECT_FALSE(SummarizeLoad(std::vector<RankLoadStats>(1), scope).complete);
}

// Equal steps: drop mode's dropped final step and continuous mode's rows of
// the next epoch are not a complete epoch (was decided in the CLI).
TEST(LoaderStatsTest, EqualStepsCompleteOnlyInPadModeOrWithNothingDropped) {
  std::mt19937_64 rng(5);
  bool saw_dropped_step = false;
  for (Index docs = 195; docs < 205; ++docs) {
    Data data = MakeData(rng, docs, 60);
    for (TrainMode mode : {TrainMode::kPad, TrainMode::kDrop, TrainMode::kContinuous}) {
      LoaderOptions o = RowOptions(32, 2, 3);
      o.equal_steps = true;
      o.mode = mode;
      LoadRunScope scope;
      scope.data_tokens = data.source->num_tokens();
      scope.mode = mode;
      const auto ranks = RunAllRanks(data, o);
      scope.plan = TokenLoader(data.source, o).train_plan()->summary();
      const bool dropped_step = scope.plan->dropped_tokens > 0;
      saw_dropped_step = saw_dropped_step || dropped_step;
      const bool want = mode == TrainMode::kPad || (mode == TrainMode::kDrop && !dropped_step);
      EXPECT_EQ(SummarizeLoad(ranks, scope).complete, want) << TrainModeName(mode) << " " << docs;
    }
  }
  EXPECT_TRUE(saw_dropped_step) << "the test needs a run that drops its final step";
}

TEST(LoaderStatsTest, TokenImbalanceIsMaxOverMinMinusOne) {
  std::vector<RankLoadStats> ranks(3);
  ranks[0].tokens = 100;
  ranks[1].tokens = 150;
  ranks[2].tokens = 120;
  EXPECT_DOUBLE_EQ(SummarizeLoad(ranks, {}).token_imbalance, 0.5);
  ranks[0].tokens = 0;
  EXPECT_DOUBLE_EQ(SummarizeLoad(ranks, {}).token_imbalance, 0.0);
}

TEST(LoaderStatsTest, CpWorkOfOneRowUnderEachSplit) {
  // One row of a 64-token document over 2 CP ranks: contiguous gives rank 1
  // positions 32..63 (sum 33..64 = 1552) against rank 0's 528; both head-tail
  // splits even it. A 63-token document is padded to 64: rank 0 loses
  // position 63, so per-document head-tail gives 976 / 1040 (mean 1008).
  TrainOptions o = PlanOptions(64, 1);
  o.cp.size = 2;
  for (const Index length : {Index{64}, Index{63}}) {
    const std::vector<Index> lengths = {length};
    const TrainPlan plan(TrainDocuments::FromSpans(lengths), o);
    const CpWorkSummary s = SummarizeCpWork(plan);
    EXPECT_EQ(s.cp_size, 2);
    EXPECT_EQ(s.rows, 1);
    EXPECT_EQ(s.tokens, length);
    EXPECT_EQ(s.padding, 64 - length);
    const auto k = [](CpSplit split) { return static_cast<std::size_t>(split); };
    if (length == 64) {
      EXPECT_DOUBLE_EQ(s.mean_ratio[k(CpSplit::kContiguous)], 1552.0 / 1040.0);
      EXPECT_DOUBLE_EQ(s.mean_ratio[k(CpSplit::kHeadTail)], 1.0);
      EXPECT_DOUBLE_EQ(s.mean_ratio[k(CpSplit::kDocumentHeadTail)], 1.0);
    } else {
      EXPECT_DOUBLE_EQ(s.worst_ratio[k(CpSplit::kDocumentHeadTail)], 1040.0 / 1008.0);
    }
  }
}

}  // namespace
}  // namespace shardkit
