#include "shardkit/layout/loading_plan.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <stdexcept>
#include <vector>

namespace shardkit {
namespace {

// Reference: the rows of a process are the union of its devices' row blocks,
// computed from mesh coordinates by brute force.
std::vector<Index> ReferenceRows(const std::vector<MeshAxis>& axes, const std::vector<int>& dim0,
                                 const std::vector<Index>& owners, Index batch, Index process) {
  Index devices = owners.size(), parts = 1;
  for (int a : dim0) parts *= axes[a].size;
  std::set<Index> rows;
  for (Index d = 0; d < devices; ++d) {
    if (owners[d] != process) continue;
    std::vector<Index> coord(axes.size());
    Index rest = d;
    for (int a = static_cast<int>(axes.size()) - 1; a >= 0; --a) {
      coord[a] = rest % axes[a].size;
      rest /= axes[a].size;
    }
    Index tile = 0;
    for (int a : dim0) tile = tile * axes[a].size + coord[a];
    for (Index r = tile * (batch / parts); r < (tile + 1) * (batch / parts); ++r) rows.insert(r);
  }
  return {rows.begin(), rows.end()};
}

TEST(LoadingPlanTest, RowsAreTheUnionOfTheProcessDevicesBlocksAndHostsOfInvertsThem) {
  std::mt19937_64 rng(3);
  const char* names[] = {"a", "b", "c"};
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<MeshAxis> axes;
    Index devices = 1;
    const int num_axes = 1 + rng() % 3;
    for (int a = 0; a < num_axes; ++a) {
      axes.push_back({names[a], static_cast<Index>(1 + rng() % 4)});
      devices *= axes.back().size;
    }
    std::vector<int> dim0;
    SpecEntry entry{{}, true};
    for (int a = 0; a < num_axes; ++a) {
      if (rng() % 2) {
        dim0.push_back(a);
        entry.axes.push_back(names[a]);
      }
    }
    std::vector<Index> owners(devices);
    const Index processes = 1 + rng() % devices;
    for (auto& o : owners) o = rng() % processes;
    Index parts = 1;
    for (int a : dim0) parts *= axes[a].size;
    const Index batch = parts * static_cast<Index>(rng() % 5);
    LoadingPlan plan(NamedSharding(Mesh(axes, owners), {entry}), batch);
    std::vector<std::set<Index>> holders(batch);
    for (Index p : std::set<Index>(owners.begin(), owners.end())) {
      std::vector<Index> want = ReferenceRows(axes, dim0, owners, batch, p);
      std::vector<Index> got;
      Index previous_stop = -1;
      for (const Slice& s : plan.Rows(p)) {
        ASSERT_LT(previous_stop, s.start);  // merged and ascending
        previous_stop = s.stop;
        for (Index r = s.start; r < s.stop; ++r) got.push_back(r);
      }
      ASSERT_EQ(got, want);
      ASSERT_EQ(plan.NumRows(p), static_cast<Index>(want.size()));
      for (Index r : want) holders[r].insert(p);
    }
    for (Index r = 0; r < batch; ++r) {
      auto hosts = plan.HostsOf(r);
      ASSERT_EQ(std::vector<Index>(hosts.begin(), hosts.end()),
                std::vector<Index>(holders[r].begin(), holders[r].end()));
    }
  }
}

TEST(LoadingPlanTest, HostsReadOnlyTheirRowsOfEachStepAndTogetherCoverTheBatch) {
  // 8 devices, 4 hosts owning devices non-contiguously; batch split 8 ways.
  Mesh mesh({{"data", 8}}, {0, 1, 2, 3, 0, 1, 2, 3});
  LoadingPlan plan(NamedSharding(mesh, ParsePartitionSpec("data")), 16);
  ShardOptions shuffled;
  shuffled.shuffle = true;
  shuffled.seed = 5;
  ShardPlan order_plan(100, 1, shuffled);
  Shard order = order_plan.GetShard(0);
  EXPECT_EQ(plan.NumSteps(order), 6);
  for (Index step = 0; step < 6; ++step) {
    std::multiset<Index> seen;
    for (Index p = 0; p < 4; ++p) {
      const Index n = plan.NumRows(p);
      ASSERT_EQ(n, 4);
      std::vector<Index> items(n);
      std::vector<char> pad(n);
      plan.Items(order, step, p, items.data(), reinterpret_cast<bool*>(pad.data()));
      // Host p holds devices p and p + 4: rows [2p, 2p+2) and [2p+8, 2p+10).
      const Index rows[] = {2 * p, 2 * p + 1, 2 * p + 8, 2 * p + 9};
      for (Index j = 0; j < n; ++j) {
        ASSERT_EQ(items[j], order[step * 16 + rows[j]]);
        seen.insert(items[j]);
      }
    }
    std::multiset<Index> batch;
    for (Index r = 0; r < 16; ++r) batch.insert(order[step * 16 + r]);
    EXPECT_EQ(seen, batch);
  }
  std::vector<Index> items(4);
  std::vector<char> pad(4);
  EXPECT_THROW(plan.Items(order, 6, 0, items.data(), reinterpret_cast<bool*>(pad.data())),
               std::out_of_range);
}

TEST(LoadingPlanTest, PaddedEntriesOfTheOrderAreFlagged) {
  LoadingPlan plan(NamedSharding(Mesh({{"d", 2}}, {0, 1}), ParsePartitionSpec("d")), 4);
  ShardOptions pad_options;
  pad_options.remainder = Remainder::kPad;
  // torch DistributedSampler(7, 2): rank 1 gets 1, 3, 5 and the padded 0.
  Shard order = ShardPlan(7, 2, pad_options).GetShard(1);
  ASSERT_EQ(order.size(), 4);
  Index items[2];
  bool pad[2];
  plan.Items(order, 0, 1, items, pad);
  EXPECT_EQ(items[0], 5);
  EXPECT_EQ(items[1], 0);
  EXPECT_FALSE(pad[0]);
  EXPECT_TRUE(pad[1]);
}

TEST(LoadingPlanTest, BatchNotDivisibleByTheBatchAxesIsAnError) {
  NamedSharding s(Mesh({{"x", 2}, {"y", 3}}), ParsePartitionSpec("('x', 'y')"));
  try {
    LoadingPlan plan(s, 8);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "batch_size: 8 is not divisible by the 6 partitions of dimension 0 (axes "
                 "'x'=2, 'y'=3)");
  }
  EXPECT_THROW(LoadingPlan(s, -6), std::invalid_argument);
  LoadingPlan ok(s, 6);
  EXPECT_THROW((void)ok.HostsOf(6), std::out_of_range);
  EXPECT_THROW((void)ok.Rows(1), std::out_of_range);
}

}  // namespace
}  // namespace shardkit
