#include "shardkit/layout/data_roles.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardkit {
namespace {

// Coordinates of device d, computed by peeling the last axis first (an
// independent route from Mesh::Coordinate's strides).
std::vector<Index> Unravel(const std::vector<MeshAxis>& axes, Index d) {
  std::vector<Index> out(axes.size());
  for (size_t a = axes.size(); a-- > 0;) {
    out[a] = d % axes[a].size;
    d /= axes[a].size;
  }
  return out;
}

Index Ravel(const std::vector<MeshAxis>& axes, const std::vector<Index>& coords) {
  Index d = 0;
  for (size_t a = 0; a < axes.size(); ++a) d = d * axes[a].size + coords[a];
  return d;
}

std::vector<std::string> Pick(const std::vector<MeshAxis>& axes, const std::vector<int>& which) {
  std::vector<std::string> out;
  for (int a : which) out.push_back(axes[a].name);
  return out;
}

struct Config {
  std::vector<MeshAxis> axes;
  std::vector<int> data, broadcast;
  std::vector<Index> owners;  // a permutation: one device per rank
};

Config RandomConfig(std::mt19937_64& rng) {
  Config c;
  const int num_axes = 1 + static_cast<int>(rng() % 4);
  const char* names[] = {"dp", "tp", "pp", "cp"};
  std::vector<int> order = {0, 1, 2, 3};
  std::shuffle(order.begin(), order.end(), rng);
  Index size = 1;
  for (int a = 0; a < num_axes; ++a) {
    c.axes.push_back({names[order[a]], 1 + static_cast<Index>(rng() % 4)});
    size *= c.axes.back().size;
  }
  std::vector<int> positions(num_axes);
  std::iota(positions.begin(), positions.end(), 0);
  std::shuffle(positions.begin(), positions.end(), rng);
  const int num_data = static_cast<int>(rng() % (num_axes + 1));
  c.data.assign(positions.begin(), positions.begin() + num_data);
  for (int k = num_data; k < num_axes; ++k) {
    if (rng() % 2) c.broadcast.push_back(positions[k]);
  }
  c.owners.resize(size);
  std::iota(c.owners.begin(), c.owners.end(), Index{0});
  if (rng() % 2) std::shuffle(c.owners.begin(), c.owners.end(), rng);  // any rank order
  return c;
}

TEST(DataRolesTest, OneDevicePerRankMatchesBruteForceOverRandomMeshes) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    Config c = RandomConfig(rng);
    Mesh mesh(c.axes, c.owners);
    const Index size = mesh.size();
    Index dp_size = 1;
    for (int a : c.data) dp_size *= c.axes[a].size;
    std::vector<Index> device_of(size);
    for (Index d = 0; d < size; ++d) device_of[c.owners[d]] = d;
    auto data_coord = [&](Index d) {
      std::vector<Index> x = Unravel(c.axes, d);
      Index v = 0;
      for (int a : c.data) v = v * c.axes[a].size + x[a];
      return v;
    };
    auto at_origin = [&](Index d) {
      std::vector<Index> x = Unravel(c.axes, d);
      return std::all_of(c.broadcast.begin(), c.broadcast.end(), [&](int a) { return x[a] == 0; });
    };
    std::vector<std::set<Index>> groups(dp_size);
    std::map<Index, int> savers, loaders;
    for (Index rank = 0; rank < size; ++rank) {
      DataRoles roles(mesh, Pick(c.axes, c.data), rank, Pick(c.axes, c.broadcast));
      const Index d = device_of[rank];
      ASSERT_EQ(roles.dp_size(), dp_size);
      ASSERT_EQ(roles.dp_rank(), data_coord(d)) << trial << " rank " << rank;
      std::vector<Index> group;
      for (Index e = 0; e < size; ++e) {
        if (data_coord(e) == data_coord(d)) group.push_back(c.owners[e]);
      }
      std::sort(group.begin(), group.end());
      ASSERT_EQ(roles.replica_group(), group) << trial;
      ASSERT_EQ(roles.loads(), at_origin(d));
      std::vector<Index> x = Unravel(c.axes, d);
      for (int a : c.broadcast) x[a] = 0;
      ASSERT_EQ(roles.source(), c.owners[Ravel(c.axes, x)]);
      Index saver = -1;
      for (Index r : group) {
        if (at_origin(device_of[r])) {
          saver = r;
          break;
        }
      }
      ASSERT_EQ(roles.saver(), saver);
      groups[roles.dp_rank()].insert(rank);
      savers[roles.dp_rank()] += roles.saves();
      loaders[roles.dp_rank()] += roles.loads();
    }
    // The data-parallel ranks partition the ranks into groups of the size of
    // the non-data axes, one saver each; one loader each when every
    // non-data axis broadcasts.
    Index replicas = size / dp_size, broadcast_size = 1;
    for (int a : c.broadcast) broadcast_size *= c.axes[a].size;
    Index total = 0;
    for (Index g = 0; g < dp_size; ++g) {
      ASSERT_EQ(static_cast<Index>(groups[g].size()), replicas);
      ASSERT_EQ(savers[g], 1);
      ASSERT_EQ(loaders[g], replicas / broadcast_size);
      total += static_cast<Index>(groups[g].size());
    }
    ASSERT_EQ(total, size);
  }
}

TEST(DataRolesTest, TorchDeviceMeshDpByTpAndTpByDp) {
  // DeviceMesh("cpu", [[0, 1], [2, 3]], ("dp", "tp")): tp pairs {0,1}, {2,3}.
  Mesh dp_tp({{"dp", 2}, {"tp", 2}}, {0, 1, 2, 3});
  DataRoles r1(dp_tp, {"dp"}, 1);
  EXPECT_EQ(r1.dp_rank(), 0);
  EXPECT_EQ(r1.dp_size(), 2);
  EXPECT_EQ(r1.replica_group(), (std::vector<Index>{0, 1}));
  EXPECT_EQ(DataRoles(dp_tp, {"dp"}, 2).dp_rank(), 1);
  // Data axis inner: ("tp", "dp"), tp pairs {0,2}, {1,3}.
  Mesh tp_dp({{"tp", 2}, {"dp", 2}}, {0, 1, 2, 3});
  DataRoles r2(tp_dp, {"dp"}, 2);
  EXPECT_EQ(r2.dp_rank(), 0);
  EXPECT_EQ(r2.replica_group(), (std::vector<Index>{0, 2}));
  EXPECT_EQ(r2.saver(), 0);
  EXPECT_FALSE(r2.saves());
}

TEST(DataRolesTest, WhaleMastersReadAndLaterPipelineStagesTakeNone) {
  // Four workers, two pipeline stages: the data is split by the two masters
  // (stage 0); the stage-1 workers read nothing.
  Mesh mesh = RankOrderMesh({{"dp", 2}, {"pp", 2}});
  for (Index rank = 0; rank < 4; ++rank) {
    DataRoles roles(mesh, {"dp"}, rank, {"pp"});
    EXPECT_EQ(roles.dp_size(), 2);
    EXPECT_EQ(roles.dp_rank(), rank / 2);
    EXPECT_EQ(roles.loads(), rank % 2 == 0) << rank;
    EXPECT_EQ(roles.source(), rank - rank % 2);
    EXPECT_EQ(roles.saver(), rank - rank % 2);
  }
}

TEST(DataRolesTest, DataAxesOrderSetsTheDataParallelRankFirstListedMostSignificant) {
  Mesh mesh = RankOrderMesh({{"fsdp", 2}, {"tp", 2}, {"dp", 3}});
  // rank 7 = fsdp 1, tp 0, dp 1.
  EXPECT_EQ(DataRoles(mesh, {"dp", "fsdp"}, 7).dp_rank(), 1 * 2 + 1);
  EXPECT_EQ(DataRoles(mesh, {"fsdp", "dp"}, 7).dp_rank(), 1 * 3 + 1);
  EXPECT_EQ(DataRoles(mesh, {"fsdp", "dp"}, 7).replica_group(), (std::vector<Index>{7, 10}));
}

TEST(DataRolesTest, ProcessesHoldingSeveralDevicesShareOrSplitDataShards) {
  // 2 processes x 4 devices, mesh data=4 x model=2.
  std::vector<MeshAxis> axes = {{"data", 4}, {"model", 2}};
  // Interleaved along data: process p holds data coordinates {p, p + 2}.
  Mesh interleaved(axes, {0, 0, 1, 1, 0, 0, 1, 1});
  DataRoles p1(interleaved, {"data"}, 1);
  EXPECT_EQ(p1.dp_size(), 2);
  EXPECT_EQ(p1.dp_rank(), 1);
  EXPECT_EQ(p1.data_coordinates(), (std::vector<Index>{1, 3}));
  EXPECT_EQ(p1.replica_group(), std::vector<Index>{1});
  // Split along model: both hold every data coordinate, so they are replicas.
  Mesh by_model(axes, {0, 1, 0, 1, 0, 1, 0, 1});
  DataRoles q(by_model, {"data"}, 1);
  EXPECT_EQ(q.dp_size(), 1);
  EXPECT_EQ(q.replica_group(), (std::vector<Index>{0, 1}));
  EXPECT_EQ(q.saver(), 0);
}

std::string Message(auto&& make) {
  try {
    make();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

TEST(DataRolesTest, BadAxesRanksAndLayoutsAreRejectedNamingTheValue) {
  Mesh mesh = RankOrderMesh({{"dp", 2}, {"tp", 2}});
  EXPECT_EQ(Message([&] { DataRoles(mesh, {"data"}, 0); }),
            "data_axes: 'data' is not an axis of the mesh dp=2,tp=2");
  EXPECT_EQ(Message([&] { DataRoles(mesh, {"dp", "dp"}, 0); }), "data_axes: 'dp' is listed twice");
  EXPECT_EQ(Message([&] { DataRoles(mesh, {"dp"}, 0, {"dp"}); }),
            "broadcast_axes: 'dp' is a data axis; data is received only along axes that "
            "replicate it");
  EXPECT_THROW(DataRoles(mesh, {"dp"}, 4), std::out_of_range);
  EXPECT_EQ(Message([&] { DataRoles(mesh, {"dp"}, -1); }),
            "rank: -1 holds no device of the mesh dp=2,tp=2 (4 ranks)");
  std::vector<MeshAxis> axes = {{"data", 4}};
  EXPECT_EQ(Message([&] { DataRoles(Mesh(axes, {0, 0, 1, 1}), {"data"}, 0); }), "no error");
  EXPECT_EQ(Message([&] {
              DataRoles(Mesh(axes, {0, 0, 0, 1}), {"data"}, 0);
            }),
            "data_axes: rank 1 holds data coordinates {3} but rank 0 holds {0, 1, 2}; every "
            "rank must hold equally many whole data shards");
  Mesh overlap({{"data", 2}, {"model", 2}}, {0, 0, 0, 1});
  EXPECT_EQ(Message([&] { DataRoles(overlap, {"data"}, 1); }),
            "data_axes: ranks 0 and 1 hold overlapping but different data coordinates ({0, 1} "
            "and {1}); a rank's devices must hold whole data shards");
}

TEST(DataRolesTest, CpRanksShareTheDataShardButAreNotReplicas) {
  // dp=2, cp=2, tp=2 in torchrun order: rank = 4 dp + 2 cp + tp.
  Mesh mesh = RankOrderMesh({{"dp", 2}, {"cp", 2}, {"tp", 2}});
  for (Index rank = 0; rank < 8; ++rank) {
    DataRoles roles(mesh, {"dp"}, rank, {}, {"cp"});
    EXPECT_EQ(roles.dp_rank(), rank / 4);
    EXPECT_EQ(roles.dp_size(), 2);
    EXPECT_EQ(roles.cp_rank(), (rank / 2) % 2);
    EXPECT_EQ(roles.cp_size(), 2);
    // Replicas: the tensor-parallel pair inside one CP rank.
    EXPECT_EQ(roles.replica_group(), (std::vector<Index>{rank / 2 * 2, rank / 2 * 2 + 1}));
    EXPECT_EQ(roles.reporter(), rank / 2 * 2);
    EXPECT_EQ(roles.saver(), rank / 4 * 4);  // one saver per data shard
  }
  // Without cp_axes the CP ranks are replicas, as before.
  DataRoles plain(mesh, {"dp"}, 3);
  EXPECT_EQ(plain.cp_size(), 1);
  EXPECT_EQ(plain.replica_group(), (std::vector<Index>{0, 1, 2, 3}));
  // Two cp axes: mixed radix, the first listed most significant.
  Mesh two = RankOrderMesh({{"a", 2}, {"b", 3}});
  EXPECT_EQ(DataRoles(two, {}, 4, {}, {"a", "b"}).cp_rank(), 4);
  EXPECT_EQ(DataRoles(two, {}, 4, {}, {"b", "a"}).cp_rank(), 3);
  EXPECT_EQ(Message([&] { DataRoles(mesh, {"dp"}, 0, {}, {"dp"}); }),
            "cp_axes: 'dp' is also a data or broadcast axis; a context-parallel axis splits the "
            "rows of one data shard");
  EXPECT_EQ(Message([&] { DataRoles(mesh, {"dp"}, 0, {}, {"sp"}); }),
            "cp_axes: 'sp' is not an axis of the mesh dp=2,cp=2,tp=2");
  // A process holding devices of two CP ranks (a JAX-style mesh).
  Mesh jax({{"dp", 2}, {"cp", 2}}, {0, 0, 1, 1});
  EXPECT_EQ(Message([&] { DataRoles(jax, {"dp"}, 0, {}, {"cp"}); }),
            "cp_axes: rank 0 holds devices of different context-parallel ranks (0 and 1)");
}

TEST(DataRolesTest, NoDataAxesMakesEveryRankAReplica) {
  Mesh mesh = RankOrderMesh({{"tp", 3}});
  DataRoles roles(mesh, {}, 2, {"tp"});
  EXPECT_EQ(roles.dp_size(), 1);
  EXPECT_EQ(roles.replica_group(), (std::vector<Index>{0, 1, 2}));
  EXPECT_FALSE(roles.loads());
  EXPECT_EQ(roles.source(), 0);
}

TEST(DataRolesTest, FingerprintsAreOrderSensitiveAndDivergenceNamesTheGroup) {
  std::vector<Index> a = {1, 2, 3}, b = {1, 3, 2}, c = {1, 2};
  EXPECT_EQ(BatchFingerprint(a), BatchFingerprint(std::vector<Index>{1, 2, 3}));
  EXPECT_NE(BatchFingerprint(a), BatchFingerprint(b));
  EXPECT_NE(BatchFingerprint(a), BatchFingerprint(c));
  EXPECT_NE(BatchFingerprint({}), BatchFingerprint(std::vector<Index>{0}));
  const std::uint64_t x = BatchFingerprint(a), y = BatchFingerprint(b);
  std::vector<Index> dp = {0, 0, 1, 1, -1};
  EXPECT_TRUE(DivergentReplicas(dp, std::vector<std::uint64_t>{x, x, y, y, x}).empty());
  EXPECT_EQ(DivergentReplicas(dp, std::vector<std::uint64_t>{x, x, y, x, 5}),
            (std::vector<Index>{2, 3}));
  EXPECT_THROW((void)DivergentReplicas(dp, std::vector<std::uint64_t>{x}), std::invalid_argument);
}

TEST(DataRolesTest, RankOrderMeshRejectsTooManyDevices) {
  EXPECT_THROW((void)RankOrderMesh({{"a", Index{1} << 40}, {"b", Index{1} << 40}}),
               std::invalid_argument);
  EXPECT_THROW((void)RankOrderMesh({{"a", 0}}), std::invalid_argument);
}

}  // namespace
}  // namespace shardkit
