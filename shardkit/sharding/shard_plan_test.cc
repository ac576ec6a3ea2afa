#include "shardkit/sharding/shard_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

namespace shardkit {
namespace {

std::vector<Index> List(const Shard& shard) {
  std::vector<Index> out(shard.size());
  shard.Fill(0, shard.size(), out.data());
  return out;
}

// lmms-eval: itertools.islice(range(N), rank + offset, offset + limit, W).
std::vector<Index> Islice(Index n, Index start, Index stop, Index step) {
  std::vector<Index> out;
  for (Index i = start; i < std::min(n, stop); i += step) out.push_back(i);
  return out;
}

// torch.utils.data.DistributedSampler(shuffle=False), transcribed: the Python
// tests compare against the real torch as well.
std::vector<Index> TorchSampler(Index n, Index w, Index rank, bool drop_last) {
  // torch: ceil((n - w) / w) with drop_last and a remainder, else ceil(n / w).
  Index num_samples = (drop_last && n % w != 0) ? n / w : (n + w - 1) / w;
  Index total = num_samples * w;
  std::vector<Index> indices(n);
  for (Index i = 0; i < n; ++i) indices[i] = i;
  if (!drop_last) {
    Index padding = total - n;
    if (padding <= n) {
      indices.insert(indices.end(), indices.begin(), indices.begin() + padding);
    } else {
      std::vector<Index> base = indices;
      while (static_cast<Index>(indices.size()) < total) {
        for (Index x : base) {
          if (static_cast<Index>(indices.size()) == total) break;
          indices.push_back(x);
        }
      }
    }
  } else {
    indices.resize(total);
  }
  std::vector<Index> out;
  for (Index i = rank; i < total; i += w) out.push_back(indices[i]);
  return out;
}

TEST(ShardPlanTest, RoundRobinUnevenMatchesLmmsEvalIslice) {
  for (Index n : {0, 1, 7, 10, 33, 100}) {
    for (Index w : {1, 2, 3, 8, 13, 150}) {
      for (Index offset : {Index{0}, Index{1}, n / 2, n}) {
        if (offset > n) continue;
        for (std::optional<Index> limit : {std::optional<Index>(), std::optional<Index>(0),
                                           std::optional<Index>(5), std::optional<Index>(1000)}) {
          ShardOptions options;
          options.offset = offset;
          options.limit = limit;
          ShardPlan plan(n, w, options);
          Index stop = limit ? offset + *limit : n;
          for (Index r = 0; r < w; ++r) {
            ASSERT_EQ(List(plan.GetShard(r)), Islice(n, r + offset, stop, w))
                << "n=" << n << " w=" << w << " offset=" << offset;
          }
        }
      }
    }
  }
}

TEST(ShardPlanTest, ContiguousCountsMatchTfdsEvenSplits) {
  ShardOptions options;
  options.split = Split::kContiguous;
  ShardPlan plan(10000, 6, options);
  EXPECT_EQ(plan.Counts(), (std::vector<Index>{1667, 1667, 1667, 1667, 1666, 1666}));
  EXPECT_EQ(plan.ItemAt(0, 0), 0);
  EXPECT_EQ(plan.ItemAt(1, 0), 1667);
  EXPECT_EQ(plan.ItemAt(4, 0), 4 * 1667);
  EXPECT_EQ(plan.ItemAt(5, 1665), 9999);
}

TEST(ShardPlanTest, PadAndDropMatchTorchDistributedSampler) {
  for (Index n = 0; n <= 40; ++n) {
    for (Index w = 1; w <= 50; ++w) {
      for (bool drop_last : {false, true}) {
        ShardOptions options;
        options.remainder = drop_last ? Remainder::kDrop : Remainder::kPad;
        ShardPlan plan(n, w, options);
        for (Index r = 0; r < w; ++r) {
          Shard shard = plan.GetShard(r);
          ASSERT_EQ(List(shard), TorchSampler(n, w, r, drop_last))
              << "n=" << n << " w=" << w << " drop_last=" << drop_last;
          // Padded entries are exactly the ones past the real items.
          Index real = drop_last ? n / w : n / w + (r < n % w);
          ASSERT_EQ(shard.size() - shard.padding(), real);
        }
      }
    }
  }
}

// Checks every invariant of one plan by listing it.
void CheckPlan(const ShardPlan& plan, const std::string& what) {
  const Index m = plan.window_size(), w = plan.world_size();
  const auto& o = plan.options();
  std::vector<int> seen(m, 0);
  Index min_count = INT64_MAX, max_count = 0, padding_total = 0;
  for (Index r = 0; r < w; ++r) {
    Shard shard = plan.GetShard(r);
    std::vector<Index> list = List(shard);
    ASSERT_EQ(static_cast<Index>(list.size()), plan.Count(r)) << what;
    min_count = std::min(min_count, shard.size());
    max_count = std::max(max_count, shard.size());
    padding_total += shard.padding();
    std::vector<int> own(m, 0);
    for (Index k = 0; k < shard.size(); ++k) {
      ASSERT_EQ(list[k], shard[k]) << what;
      ASSERT_GE(list[k], plan.window_begin()) << what;
      ASSERT_LT(list[k], plan.window_end()) << what;
      if (shard.IsPadding(k)) continue;
      ++seen[list[k] - plan.window_begin()];
      ++own[list[k] - plan.window_begin()];
      if (o.remainder != Remainder::kReplicate) {
        Location loc = plan.Locate(list[k]);
        ASSERT_EQ(loc.rank, r) << what;
        ASSERT_EQ(loc.entry, k) << what;
      }
    }
    if (o.remainder == Remainder::kReplicate) {
      for (Index i = 0; i < m; ++i) ASSERT_EQ(own[i], 1) << what;
    }
    // Workers interleave: reading them in turn gives the rank's list back.
    for (Index workers : {2, 3}) {
      std::vector<Index> merged(list.size());
      Index total = 0;
      for (Index k = 0; k < workers; ++k) {
        Shard part = plan.GetShard(r, k, workers);
        std::vector<Index> items = List(part);
        total += part.size();
        for (Index j = 0; j < part.size(); ++j) {
          merged[k + j * workers] = items[j];
          ASSERT_EQ(part.IsPadding(j), shard.IsPadding(k + j * workers)) << what;
        }
      }
      ASSERT_EQ(total, shard.size()) << what;
      ASSERT_EQ(merged, list) << what;
    }
  }
  Index dropped = 0;
  for (Index i = 0; i < m; ++i) {
    if (o.remainder == Remainder::kReplicate) {
      ASSERT_EQ(seen[i], w) << what;
    } else {
      ASSERT_LE(seen[i], 1) << what << " item " << i;
      if (seen[i] == 0) {
        ASSERT_EQ(o.remainder, Remainder::kDrop) << what << " lost item " << i;
        ASSERT_EQ(plan.Locate(plan.window_begin() + i).rank, -1) << what;
        ++dropped;
      }
    }
  }
  ASSERT_EQ(dropped, plan.Dropped()) << what;
  if (o.split != Split::kBalanced || o.remainder != Remainder::kUneven) {
    ASSERT_LE(max_count - min_count, 1) << what;
  }
  if (o.remainder == Remainder::kPad || o.remainder == Remainder::kDrop) {
    ASSERT_EQ(max_count, min_count) << what;
  }
  AuditReport report = plan.Audit();
  ASSERT_TRUE(report.exactly_once) << what << " " << report.detail;
  ASSERT_EQ(report.method, "enumerated");
  ASSERT_EQ(report.padding, padding_total) << what;
  ASSERT_EQ(report.max_imbalance, max_count - min_count) << what;
  AuditReport sampled = plan.Audit(/*enumerate_limit=*/0);
  ASSERT_EQ(sampled.method, "arithmetic");
  ASSERT_TRUE(sampled.exactly_once) << what << " " << sampled.detail;
  ASSERT_EQ(sampled.padding, padding_total) << what;
  ASSERT_EQ(sampled.max_imbalance, report.max_imbalance) << what;
}

#ifdef SHARDKIT_SANITIZED_BUILD
constexpr int kRandomConfigurations = 20000;
#else
constexpr int kRandomConfigurations = 100000;
#endif

TEST(ShardPlanTest, CoversEveryIndexExactlyOnceOverRandomConfigurations) {
  std::mt19937_64 rng(20261121);
  const Split splits[] = {Split::kRoundRobin, Split::kContiguous, Split::kBalanced};
  const Remainder remainders[] = {Remainder::kUneven, Remainder::kDrop, Remainder::kPad,
                                  Remainder::kReplicate};
  int configurations = 0;
  for (int t = 0; t < kRandomConfigurations; ++t) {
    Index n = static_cast<Index>(rng() % 60);
    Index w = 1 + static_cast<Index>(rng() % (t % 10 == 0 ? 100 : 12));
    ShardOptions o;
    o.split = splits[rng() % 3];
    o.remainder = remainders[rng() % 4];
    if (o.split == Split::kBalanced && o.remainder == Remainder::kReplicate) {
      o.remainder = Remainder::kUneven;
    }
    o.offset = static_cast<Index>(rng() % (n + 1));
    if (rng() % 2) o.limit = static_cast<Index>(rng() % (n + 2));
    o.shuffle = rng() % 2;
    o.seed = rng() % 5;
    o.epoch = rng() % 3;
    o.equal_counts = rng() % 2;
    if (o.split == Split::kBalanced || rng() % 4 == 0) {
      for (Index i = 0; i < n; ++i) o.weights.push_back(static_cast<double>(rng() % 50));
    }
    std::string what = "n=" + std::to_string(n) + " w=" + std::to_string(w) +
                       " split=" + std::string(SplitName(o.split)) +
                       " rem=" + std::string(RemainderName(o.remainder)) +
                       " offset=" + std::to_string(o.offset) +
                       " shuffle=" + std::to_string(o.shuffle);
    ShardPlan plan(n, w, o);
    // The light checks run on every configuration, the full listing on a
    // tenth of them (it is quadratic in the worker count).
    if (t % 10 == 0) {
      CheckPlan(plan, what);
      if (::testing::Test::HasFatalFailure()) return;
    } else {
      AuditReport report = plan.Audit();
      ASSERT_TRUE(report.exactly_once) << what << " " << report.detail;
      if (o.split != Split::kBalanced) {
        ASSERT_LE(report.max_imbalance, 1) << what;
      }
    }
    // Determinism: the same parameters give the same lists.
    ShardPlan again(n, w, o);
    Index r = static_cast<Index>(rng() % w);
    ASSERT_EQ(List(plan.GetShard(r)), List(again.GetShard(r))) << what;
    ++configurations;
  }
  EXPECT_EQ(configurations, kRandomConfigurations);
}

TEST(ShardPlanTest, ShuffleIsOneGlobalPermutationSharedByAllRanks) {
  const Index n = 1000, w = 7;
  ShardOptions o;
  o.shuffle = true;
  o.seed = 11;
  o.epoch = 2;
  ShardPlan plan(n, w, o);
  Permutation perm(n, 11, 2);
  for (Index r = 0; r < w; ++r) {
    std::vector<Index> list = List(plan.GetShard(r));
    for (size_t j = 0; j < list.size(); ++j) ASSERT_EQ(list[j], perm.Forward(r + j * w));
  }
  // A plan built on another host with the same key agrees; another epoch differs.
  ShardPlan same(n, w, o);
  o.epoch = 3;
  ShardPlan next(n, w, o);
  EXPECT_EQ(List(plan.GetShard(3)), List(same.GetShard(3)));
  EXPECT_NE(List(plan.GetShard(3)), List(next.GetShard(3)));
}

// Replicate `n` items on `w` ranks, shuffle switched as given.
ShardPlan ReplicatePlan(Index n, Index w, bool shuffle) {
  ShardOptions o;
  o.remainder = Remainder::kReplicate;
  o.shuffle = shuffle;
  return ShardPlan(n, w, o);
}

TEST(ShardPlanTest, ReplicateGivesEachRankItsOwnShuffledOrder) {
  ShardPlan plan = ReplicatePlan(50, 4, /*shuffle=*/true);
  EXPECT_NE(List(plan.GetShard(0)), List(plan.GetShard(1)));
}

// Regression: replicate without shuffle gave every rank the same order, so
// every rank computed the same gradients. replicate now always shuffles per
// rank, and the plan says so.
TEST(ShardPlanTest, ReplicateWithoutShuffleStillGivesEachRankItsOwnOrder) {
  ShardPlan plan = ReplicatePlan(50, 4, /*shuffle=*/false);
  EXPECT_TRUE(plan.options().shuffle);
  for (Index r = 1; r < 4; ++r) EXPECT_NE(List(plan.GetShard(0)), List(plan.GetShard(r)));
  std::vector<Index> sorted = List(plan.GetShard(2));
  std::sort(sorted.begin(), sorted.end());
  for (Index i = 0; i < 50; ++i) EXPECT_EQ(sorted[i], i);
}

TEST(ShardPlanTest, HandlesCountsNearTwoToTheSixtyThreeByArithmetic) {
  const Index n = INT64_MAX;
  for (Split split : {Split::kRoundRobin, Split::kContiguous}) {
    for (Remainder rem : {Remainder::kUneven, Remainder::kDrop, Remainder::kPad}) {
      for (Index w : {Index{1}, Index{8}, Index{1000003}, Index{1} << 62, n}) {
        for (bool shuffle : {false, true}) {
          ShardOptions o;
          o.split = split;
          o.remainder = rem;
          o.shuffle = shuffle;
          ShardPlan plan(n, w, o);
          AuditReport report = plan.Audit();
          ASSERT_EQ(report.method, "arithmetic");
          ASSERT_TRUE(report.exactly_once) << SplitName(split) << " " << RemainderName(rem)
                                           << " w=" << w << " " << report.detail;
          ASSERT_LE(report.max_imbalance, 1);
          for (Index r : {Index{0}, w / 2, w - 1}) {
            Shard shard = plan.GetShard(r);
            if (shard.size() == 0) continue;
            for (Index k : {Index{0}, shard.size() / 2, shard.size() - 1}) {
              Index item = shard.At(k);
              ASSERT_GE(item, 0);
              ASSERT_LT(item, n);
              if (!shard.IsPadding(k)) {
                Location loc = plan.Locate(item);
                ASSERT_EQ(loc.rank, r);
                ASSERT_EQ(loc.entry, k);
              }
            }
          }
        }
      }
    }
  }
}

// Above 4096 ranks the audit derives the totals in closed form; they must
// equal the sums over every rank.
TEST(ShardPlanTest, AuditTotalsInClosedFormEqualTheSumOverRanks) {
  for (Index n : {0, 3, 4999, 5000, 12345, 100000}) {
    for (Index w : {4097, 5000, 7919}) {
      for (Split split : {Split::kRoundRobin, Split::kContiguous}) {
        for (Remainder rem :
             {Remainder::kUneven, Remainder::kDrop, Remainder::kPad, Remainder::kReplicate}) {
          ShardOptions o;
          o.split = split;
          o.remainder = rem;
          ShardPlan plan(n, w, o);
          Index real = 0, padding = 0, lo = INT64_MAX, hi = 0;
          for (Index r = 0; r < w; ++r) {
            real += plan.Count(r) - plan.Padding(r);
            padding += plan.Padding(r);
            lo = std::min(lo, plan.Count(r));
            hi = std::max(hi, plan.Count(r));
          }
          AuditReport report = plan.Audit();
          const std::string what = "n=" + std::to_string(n) + " w=" + std::to_string(w) + " " +
                                   std::string(SplitName(split)) + " " +
                                   std::string(RemainderName(rem));
          EXPECT_EQ(report.delivered, real) << what;
          EXPECT_EQ(report.padding, padding) << what;
          EXPECT_EQ(report.min_count, lo) << what;
          EXPECT_EQ(report.max_count, hi) << what;
          EXPECT_TRUE(report.exactly_once) << what << " " << report.detail;
        }
      }
    }
  }
}

TEST(ShardPlanTest, FirstIndexOfAHugeShuffledEpochIsImmediate) {
  ShardOptions o;
  o.shuffle = true;
  ShardPlan plan(Index{1} << 62, 8, o);
  Shard shard = plan.GetShard(5);
  std::vector<Index> head(4);
  shard.Fill(0, 4, head.data());
  EXPECT_EQ(head[0], shard[0]);
  EXPECT_EQ(shard.size(), (Index{1} << 62) / 8);
}

TEST(ShardPlanTest, BalancedKeepsTheHeaviestRankNearTheLowerBound) {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> lengths(6.0, 1.0);
  for (Index w : {2, 8, 32}) {
    ShardOptions o;
    o.split = Split::kBalanced;
    for (int i = 0; i < 5000; ++i) o.weights.push_back(std::floor(lengths(rng)));
    ShardPlan plan(5000, w, o);
    AuditReport report = plan.Audit();
    ASSERT_TRUE(report.exactly_once);
    // LPT is within 4/3 of the optimum; on many small items it is within a
    // fraction of a percent of the lower bound.
    EXPECT_LT(report.load_imbalance, 0.01) << "w=" << w;
    ShardOptions round_robin = o;
    round_robin.split = Split::kRoundRobin;
    EXPECT_LE(report.max_load, ShardPlan(5000, w, round_robin).Audit().max_load);
  }
}

TEST(ShardPlanTest, BalancedWithEqualCountsKeepsCountsWithinOne) {
  ShardOptions o;
  o.split = Split::kBalanced;
  o.equal_counts = true;
  // One huge item and many small ones: plain LPT would give the huge item's
  // rank a single entry.
  o.weights.assign(103, 1.0);
  o.weights[0] = 1000;
  ShardPlan plan(103, 4, o);
  auto counts = plan.Counts();
  EXPECT_LE(*std::max_element(counts.begin(), counts.end()) -
                *std::min_element(counts.begin(), counts.end()),
            1);
  ShardOptions free = o;
  free.equal_counts = false;
  auto free_counts = ShardPlan(103, 4, free).Counts();
  EXPECT_EQ(*std::min_element(free_counts.begin(), free_counts.end()), 1);
}

TEST(ShardPlanTest, RejectsBadConfigurationNamingTheParameter) {
  auto message = [](auto&& make) -> std::string {
    try {
      make();
    } catch (const std::invalid_argument& e) {
      return e.what();
    } catch (const std::out_of_range& e) {
      return std::string("range:") + e.what();
    }
    return "no error";
  };
  EXPECT_EQ(message([] { ShardPlan(10, 0); }), "world_size: must be at least 1, got 0");
  EXPECT_EQ(message([] { ShardPlan(-1, 2); }), "num_items: must be at least 0, got -1");
  ShardOptions o;
  o.offset = 11;
  EXPECT_EQ(message([&] { ShardPlan(10, 2, o); }),
            "offset: 11 lies beyond the data (num_items=10)");
  o.offset = 0;
  o.limit = -3;
  EXPECT_EQ(message([&] { ShardPlan(10, 2, o); }), "limit: must be at least 0, got -3");
  o.limit.reset();
  o.split = Split::kBalanced;
  EXPECT_EQ(message([&] { ShardPlan(10, 2, o); }),
            "weights: expected one weight per item (10), got 0");
  o.weights.assign(10, 1.0);
  o.weights[4] = std::nan("");
  EXPECT_EQ(message([&] { ShardPlan(10, 2, o); }).rfind("weights: weight of item 4 is", 0), 0u);
  o.weights[4] = -1;
  EXPECT_EQ(message([&] { ShardPlan(10, 2, o); }).rfind("weights: weight of item 4 is -1", 0), 0u);
  o.weights[4] = 1;
  o.remainder = Remainder::kReplicate;
  EXPECT_EQ(message([&] { ShardPlan(10, 2, o); }).rfind("remainder:", 0), 0u);
  ShardPlan plan(10, 2);
  EXPECT_EQ(message([&] { (void)plan.GetShard(2); }),
            "range:rank: 2 is outside [0, 2) (world_size=2)");
  EXPECT_EQ(message([&] { (void)plan.GetShard(0, 3, 2); }),
            "range:worker: 3 is outside [0, 2) (num_workers=2)");
  EXPECT_EQ(message([&] { (void)plan.GetShard(0, 0, 0); }),
            "num_workers: must be at least 1, got 0");
  EXPECT_EQ(message([&] { (void)plan.GetShard(0).At(5); }),
            "range:index: 5 is outside [0, 5) of rank 0's shard");
  EXPECT_EQ(message([] { (void)ParseSplit("stripes"); }),
            "split: unknown split 'stripes' (expected round_robin, contiguous or balanced)");
  EXPECT_EQ(message([] { (void)ParseRemainder("keep"); }).rfind("remainder: unknown", 0), 0u);
}

}  // namespace
}  // namespace shardkit

namespace shardkit {
namespace {

// Independent of Load/Loads: a rank's load from its listed entries (integer
// weights, so every summation order gives the same double).
double ListedLoad(const ShardPlan& plan, Index rank) {
  Shard shard = plan.GetShard(rank);
  double load = 0;
  for (Index k = 0; k < shard.size() - shard.padding(); ++k) {
    load += plan.options().weights[shard.At(k)];
  }
  return load;
}

const Split kAllSplits[] = {Split::kRoundRobin, Split::kContiguous, Split::kBalanced};
const Remainder kAllRemainders[] = {Remainder::kUneven, Remainder::kDrop, Remainder::kPad,
                                    Remainder::kReplicate};

TEST(ShardPlanTest, LoadGroupsAndLoadsMatchTheListedEntriesOverRandomConfigurations) {
  std::mt19937_64 rng(13);
  for (int trial = 0; trial < 400; ++trial) {
    const Index n = static_cast<Index>(rng() % 40);
    const Index w = 1 + static_cast<Index>(rng() % 60);
    ShardOptions o;
    o.split = kAllSplits[rng() % 3];
    o.remainder = kAllRemainders[rng() % 4];
    if (o.split == Split::kBalanced && o.remainder == Remainder::kReplicate) continue;
    o.offset = n > 0 ? static_cast<Index>(rng() % (n + 1)) : 0;
    if (rng() % 2) o.limit = static_cast<Index>(rng() % 30);
    o.shuffle = rng() % 2;
    o.seed = rng();
    for (Index i = 0; i < n; ++i) o.weights.push_back(static_cast<double>(rng() % 5));
    ShardPlan plan(n, w, o);
    std::vector<double> want(static_cast<size_t>(w));
    for (Index r = 0; r < w; ++r) want[r] = ListedLoad(plan, r);
    const std::string what = "trial " + std::to_string(trial) + ": " + plan.Describe();
    if (n == 0) {  // no weights: no loads, no groups
      EXPECT_TRUE(plan.Loads().empty() && plan.LoadGroups().empty()) << what;
      EXPECT_TRUE(plan.Audit().load_groups.empty()) << what;
      continue;
    }
    ASSERT_EQ(plan.Loads(), want) << what;
    for (Index r = 0; r < w; ++r) ASSERT_EQ(plan.Load(r), want[r]) << what;
    std::vector<double> sorted = want;
    std::sort(sorted.begin(), sorted.end());
    std::vector<LoadGroup> groups = plan.LoadGroups();
    std::vector<double> expanded;
    for (size_t g = 0; g < groups.size(); ++g) {
      ASSERT_GT(groups[g].ranks, 0) << what;
      if (g > 0) ASSERT_LT(groups[g - 1].load, groups[g].load) << what;
      expanded.insert(expanded.end(), static_cast<size_t>(groups[g].ranks), groups[g].load);
    }
    ASSERT_EQ(expanded, sorted) << what;
    AuditReport report = plan.Audit();
    ASSERT_EQ(report.loads, want) << what;
    ASSERT_EQ(report.max_load, sorted.back()) << what;
    // Counts over every rank (balanced walks only its lists now).
    Index real = 0, lo = INT64_MAX, hi = 0;
    for (Index r = 0; r < w; ++r) {
      real += plan.Count(r) - plan.Padding(r);
      lo = std::min(lo, plan.Count(r));
      hi = std::max(hi, plan.Count(r));
    }
    ASSERT_EQ(report.delivered, real) << what;
    ASSERT_EQ(report.min_count, lo) << what;
    ASSERT_EQ(report.max_count, hi) << what;
    ASSERT_TRUE(report.exactly_once) << what << " " << report.detail;
  }
}

// The sweep's finding: `audit --items 4 --world 2^62 --weights w.npy --remainder
// replicate --limit 4` allocated one load per rank (cannot create std::vector
// larger than max_size()); with split balanced the audit looped over 2^62 ranks.
TEST(ShardPlanTest, RegressionWeightedAuditOverTwoToThe62RanksIsBoundedByTheWindow) {
  const Index w = Index{1} << 62;
  for (Split split : kAllSplits) {
    for (Remainder rem : kAllRemainders) {
      if (split == Split::kBalanced && rem == Remainder::kReplicate) continue;
      ShardOptions o;
      o.split = split;
      o.remainder = rem;
      o.limit = 4;
      o.weights = {1, 2, 3, 4, 100};
      ShardPlan plan(5, w, o);
      const std::string what = plan.Describe();
      AuditReport report = plan.Audit();
      EXPECT_TRUE(report.exactly_once) << what << " " << report.detail;
      EXPECT_TRUE(report.loads.empty()) << what;
      // The groups cover every rank once and carry the window's weight:
      // 1 + 2 + 3 + 4 once, or on every rank (replicate), or nothing (drop).
      Index ranks = 0;
      double others = 0;
      for (const LoadGroup& g : report.load_groups) {
        ranks += g.ranks;
        if (g.load != 10) others += g.load * static_cast<double>(g.ranks);
      }
      EXPECT_EQ(ranks, w) << what;
      if (rem == Remainder::kReplicate) {
        ASSERT_EQ(report.load_groups.size(), 1u) << what;
        EXPECT_EQ(report.load_groups[0].load, 10) << what;
        EXPECT_EQ(report.max_load, 10) << what;
        EXPECT_EQ(report.load_imbalance, 0) << what;
      } else if (rem == Remainder::kDrop) {
        ASSERT_EQ(report.load_groups.size(), 1u) << what;
        EXPECT_EQ(report.load_groups[0].load, 0) << what;
      } else {
        EXPECT_EQ(others, 10) << what;
        EXPECT_EQ(report.max_load, 4) << what;
        EXPECT_EQ(plan.Load(3), ListedLoad(plan, 3)) << what;
        EXPECT_EQ(plan.Load(w - 1), 0) << what;
      }
      for (auto list : {+[](const ShardPlan& p) { (void)p.Loads(); },
                        +[](const ShardPlan& p) { (void)p.Counts(); }}) {
        try {
          list(plan);
          ADD_FAILURE() << "a per-rank list of 2^62 ranks was not refused: " << what;
        } catch (const std::invalid_argument& e) {
          EXPECT_EQ(std::string(e.what()).rfind("world_size: 4611686018427387904 ranks", 0), 0u)
              << e.what();
        }
      }
    }
  }
  // The largest listable world still lists.
  ShardOptions o;
  o.weights = {1, 2};
  EXPECT_EQ(ShardPlan(2, kMaxRankList, o).Loads().size(), static_cast<size_t>(kMaxRankList));
  EXPECT_THROW((void)ShardPlan(2, kMaxRankList + 1, o).Loads(), std::invalid_argument);
}

TEST(ShardPlanTest, DescribeNamesTheWindowSplitRemainderAndOrder) {
  ShardOptions o;
  o.offset = 2;
  o.limit = 5;
  o.remainder = Remainder::kPad;
  EXPECT_EQ(ShardPlan(10, 4, o).Describe(),
            "10 items, window [2, 7) over 4 ranks; split round_robin, remainder pad, order "
            "sequential");
  o.shuffle = true;
  o.seed = 18446744073709551615ull;
  o.epoch = 3;
  o.split = Split::kContiguous;
  EXPECT_EQ(ShardPlan(10, 4, o).Describe(),
            "10 items, window [2, 7) over 4 ranks; split contiguous, remainder pad, order "
            "shuffled (seed 18446744073709551615, epoch 3)");
}

}  // namespace
}  // namespace shardkit
