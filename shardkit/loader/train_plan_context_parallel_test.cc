// TrainPlan with context parallelism (TrainOptions::cp): rows planned with
// room for the per-document padding, real pieces, resume across CP sizes and
// the CP cost of the deal.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "shardkit/base/testing.h"
#include "shardkit/loader/internal/test_corpus.h"
#include "shardkit/loader/train_plan.h"

namespace shardkit {
namespace {

using loader_testing::PlanOptions;

std::vector<Index> Lengths(std::mt19937_64& rng, Index n, Index seq_len) {
  std::lognormal_distribution<double> length(4.5, 1.0);
  std::vector<Index> out;
  for (Index d = 0; d < n; ++d) {
    Index l = static_cast<Index>(length(rng));
    if (d % 37 == 0) l = 2 * seq_len + d % 5;  // split into pieces
    if (d % 53 == 0) l = 0;
    out.push_back(l);
  }
  return out;
}

Index RoundUp(Index l, Index g) {
  while (l % g != 0) ++l;
  return l;
}

// Every piece of every rank's rows; checks each row fits seq_len with its
// pieces padded to g.
std::vector<PackItem> Delivered(const TrainPlan& plan, Index from, Index g) {
  std::vector<PackItem> out;
  for (Index s = from; s < plan.num_steps(); ++s) {
    for (Index r = 0; r < plan.options().world_size; ++r) {
      for (const auto& row : plan.Step(r, s).rows) {
        Index padded = 0;
        for (const PackItem& p : row) padded += RoundUp(p.length, g);
        EXPECT_LE(padded, plan.options().seq_len);
        out.insert(out.end(), row.begin(), row.end());
      }
    }
  }
  return out;
}

// The pieces tile every document exactly once (real lengths).
bool Tiles(const std::vector<Index>& lengths, std::vector<PackItem> pieces) {
  std::map<Index, std::vector<std::pair<Index, Index>>> by;
  for (const PackItem& p : pieces) by[p.item].push_back({p.start, p.length});
  for (Index d = 0; d < static_cast<Index>(lengths.size()); ++d) {
    auto& list = by[d];
    std::sort(list.begin(), list.end());
    Index at = 0;
    for (auto [start, length] : list) {
      if (start != at) return false;
      at += length;
    }
    if (at != lengths[static_cast<std::size_t>(d)] || list.empty()) return false;
  }
  return true;
}

TEST(TrainPlanContextParallel, RowsFitSeqLenWithEveryPiecePaddedAndTileTheDocuments) {
  std::mt19937_64 rng(7);
  for (const Index C : {2, 3, 4, 8}) {
    for (const bool coarse : {false, true}) {
      TrainOptions o = PlanOptions(48 * C, 2, 3);
      o.cp.size = C;
      if (coarse) o.cp.granularity = 8 * C;
      const Index g = coarse ? 8 * C : 2 * C;
      const std::vector<Index> lengths = Lengths(rng, 400, o.seq_len);
      TrainPlan plan(TrainDocuments::FromSpans(lengths), o);
      const TrainAudit audit = plan.Audit();
      EXPECT_TRUE(audit.exactly_once) << audit.error;
      EXPECT_TRUE(Tiles(lengths, Delivered(plan, 0, g))) << plan.Describe();
    }
  }
}

TEST(TrainPlanContextParallel, ResumesWithAnotherCpSizeUnderTheSameGranularity) {
  std::mt19937_64 rng(8);
  TrainOptions o = PlanOptions(256, 2, 2);
  o.cp.size = 2;
  o.cp.granularity = 16;
  const std::vector<Index> lengths = Lengths(rng, 300, o.seq_len);
  TrainPlan first(TrainDocuments::FromSpans(lengths), o);
  ASSERT_GT(first.num_steps(), 3);
  const Index k = first.num_steps() / 2;
  std::vector<PackItem> delivered;
  for (Index s = 0; s < k; ++s) {
    for (Index r = 0; r < o.world_size; ++r) {
      for (const auto& row : first.Step(r, s).rows)
        delivered.insert(delivered.end(), row.begin(), row.end());
    }
  }
  TrainOptions other = o;
  other.cp.size = 4;  // 16 is a multiple of 2 x 4 too
  other.world_size = 3;
  other.cost = CostModel::kSquaredLengths;
  TrainPlan second(TrainDocuments::FromSpans(lengths), other, first.StateAt(k));
  const std::vector<PackItem> rest = Delivered(second, 0, 16);
  delivered.insert(delivered.end(), rest.begin(), rest.end());
  EXPECT_TRUE(Tiles(lengths, delivered));
  // Another granularity is another pack stream: refused, naming the state.
  other.cp.granularity = 32;
  try {
    TrainPlan third(TrainDocuments::FromSpans(lengths), other, first.StateAt(k));
    ADD_FAILURE() << "a state of another granularity was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("state: ", 0), 0u) << e.what();
  }
}

// The causal work of the busiest CP rank of one row, from the rule: piece
// padded to g, cut into 2C chunks of c, rank r holds chunks r and 2C-1-r; a
// real token at piece position q attends q + 1 keys.
double BusiestCpRank(const std::vector<PackItem>& row, Index C, Index g) {
  std::vector<double> work(static_cast<std::size_t>(C), 0.0);
  for (const PackItem& p : row) {
    const Index c = RoundUp(p.length, g) / (2 * C);
    for (Index q = 0; q < p.length; ++q) {
      const Index chunk = q / c;
      const Index r = chunk < C ? chunk : 2 * C - 1 - chunk;
      work[static_cast<std::size_t>(r)] += static_cast<double>(q + 1);
    }
  }
  return *std::max_element(work.begin(), work.end());
}

TEST(TrainPlanContextParallel, SquaredCostDealsByTheBusiestCpRanksWork) {
  std::mt19937_64 rng(9);
  TrainOptions o = PlanOptions(512, 2, 4);
  o.cp.size = 4;
  o.cost = CostModel::kSquaredLengths;
  const std::vector<Index> lengths = Lengths(rng, 600, o.seq_len);
  TrainPlan plan(TrainDocuments::FromSpans(lengths), o);
  for (Index s = 0; s < plan.num_steps(); ++s) {
    for (Index r = 0; r < o.world_size; ++r) {
      const TrainStep t = plan.Step(r, s);
      double expect = 0;
      for (const auto& row : t.rows) expect += BusiestCpRank(row, 4, 8);
      EXPECT_DOUBLE_EQ(t.cost, expect);
    }
  }
}

TEST(TrainPlanContextParallel, BadCpOptionsNameTheParameter) {
  const std::vector<Index> lengths = {5, 6, 7};
  TrainOptions o = PlanOptions(12, 1);
  o.cp.size = 4;  // 12 is not a multiple of 8
  auto message = [&](const TrainOptions& x) {
    return base_testing::ErrorOf([&] { TrainPlan plan(TrainDocuments::FromSpans(lengths), x); });
  };
  EXPECT_EQ(message(o).rfind("seq_len: 12", 0), 0u);
  o.cp.size = 0;
  EXPECT_EQ(message(o).rfind("cp_size: ", 0), 0u);
  o.cp.size = 2;
  o.cp.granularity = 6;
  EXPECT_EQ(message(o).rfind("cp_granularity: 6", 0), 0u);
}

}  // namespace
}  // namespace shardkit
