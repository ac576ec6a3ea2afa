#include "shardkit/layout/named_sharding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "shardkit/base/testing.h"

namespace shardkit {
namespace {

std::string ErrorOf(auto&& call) { return base_testing::ErrorOf<std::exception>(call); }

// A reference built the way XLA tiles a NamedSharding: transpose the device
// grid so the axes of dimension 0 come first, then those of dimension 1, ...,
// then the unused axes; reshape to (p_0, ..., p_{n-1}, replicas); the
// row-major position of a device in that array gives its tile per dimension.
std::vector<std::vector<Slice>> ReferenceIndices(const std::vector<MeshAxis>& axes,
                                                 const PartitionSpec& spec,
                                                 const std::vector<Index>& shape) {
  auto find = [&](const std::string& name) {
    for (size_t a = 0; a < axes.size(); ++a) {
      if (axes[a].name == name) return static_cast<int>(a);
    }
    return -1;
  };
  std::vector<int> order;
  std::vector<Index> parts(shape.size(), 1);
  for (size_t i = 0; i < spec.size(); ++i) {
    for (const auto& name : spec[i].axes) {
      order.push_back(find(name));
      parts[i] *= axes[find(name)].size;
    }
  }
  for (size_t a = 0; a < axes.size(); ++a) {
    if (std::find(order.begin(), order.end(), static_cast<int>(a)) == order.end()) {
      order.push_back(static_cast<int>(a));
    }
  }
  Index devices = 1;
  std::vector<Index> stride(axes.size(), 1);
  for (int a = static_cast<int>(axes.size()) - 1; a >= 0; --a) {
    stride[a] = devices;
    devices *= axes[a].size;
  }
  Index replicas = devices;
  for (Index p : parts) replicas /= p;
  std::vector<std::vector<Slice>> out(devices);
  std::vector<Index> coord(axes.size(), 0);  // over `order`
  for (Index pos = 0; pos < devices; ++pos) {
    Index device = 0;
    for (size_t k = 0; k < order.size(); ++k) device += coord[k] * stride[order[k]];
    Index rest = pos / replicas;
    std::vector<Slice> index(shape.size());
    for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
      const Index tile = rest % parts[i];
      rest /= parts[i];
      const Index s = shape[i] / parts[i];
      index[i] = {tile * s, tile * s + s};
    }
    out[device] = index;
    for (int k = static_cast<int>(order.size()) - 1; k >= 0; --k) {
      if (++coord[k] < axes[order[k]].size) break;
      coord[k] = 0;
    }
  }
  return out;
}

struct Config {
  std::vector<MeshAxis> axes;
  std::vector<Index> owners;
  PartitionSpec spec;
  std::vector<Index> shape;
};

Config RandomConfig(std::mt19937_64& rng) {
  Config c;
  const int num_axes = 1 + rng() % 3;
  const char* names[] = {"x", "y", "z"};
  Index devices = 1;
  for (int a = 0; a < num_axes; ++a) {
    c.axes.push_back({names[a], static_cast<Index>(1 + rng() % 4)});
    devices *= c.axes.back().size;
  }
  const int ndim = 1 + rng() % 3;
  std::vector<int> free_axes;
  for (int a = 0; a < num_axes; ++a) free_axes.push_back(a);
  std::shuffle(free_axes.begin(), free_axes.end(), rng);
  const int spec_len = rng() % (ndim + 1);
  for (int i = 0; i < spec_len; ++i) {
    SpecEntry entry;
    const int take = free_axes.empty() ? 0 : rng() % (std::min<int>(2, free_axes.size()) + 1);
    entry.tuple = take > 1 || (take == 1 && rng() % 2);
    for (int k = 0; k < take; ++k) {
      entry.axes.push_back(names[free_axes.back()]);
      free_axes.pop_back();
    }
    c.spec.push_back(entry);
  }
  for (int i = 0; i < ndim; ++i) {
    Index parts = 1;
    if (i < spec_len) {
      for (const auto& name : c.spec[i].axes) {
        for (const auto& axis : c.axes) {
          if (axis.name == name) parts *= axis.size;
        }
      }
    }
    c.shape.push_back(parts * static_cast<Index>(rng() % 4));  // sometimes 0
  }
  const Index processes = 1 + rng() % devices;
  c.owners.resize(devices);
  if (rng() % 2) {
    for (Index d = 0; d < devices; ++d) c.owners[d] = d * processes / devices;
  } else {
    for (Index d = 0; d < devices; ++d) c.owners[d] = rng() % processes;
  }
  return c;
}

// A random configuration, its sharding, the sharding's layout of the
// configuration's shape, and every device's reference indices.
struct RandomCase {
  explicit RandomCase(std::mt19937_64& rng)
      : c(RandomConfig(rng)),
        sharding(Mesh(c.axes, c.owners), c.spec),
        layout(sharding.Layout(c.shape)),
        indices(ReferenceIndices(c.axes, c.spec, c.shape)) {}
  Config c;
  NamedSharding sharding;
  ArrayLayout layout;
  std::vector<std::vector<Slice>> indices;
};

TEST(ShardingTest, DevicesIndicesMapMatchesTheTransposedTileAssignment) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    RandomCase t(rng);
    auto& [c, sharding, layout, expected] = t;
    const int n = layout.ndim();
    std::vector<Slice> bulk(expected.size() * n);
    layout.DevicesIndicesMap(bulk.data());
    for (int i = 0; i < n; ++i) {
      std::vector<Index> tiles(expected.size());
      sharding.Tiles(i, tiles.data());
      for (size_t d = 0; d < expected.size(); ++d) {
        ASSERT_EQ(tiles[d], sharding.Tile(static_cast<Index>(d), i));
        if (layout.shard_shape()[i] > 0) {
          ASSERT_EQ(tiles[d] * layout.shard_shape()[i], expected[d][i].start);
        }
      }
    }
    for (size_t d = 0; d < expected.size(); ++d) {
      std::vector<Slice> one(n);
      layout.DeviceIndex(static_cast<Index>(d), one.data());
      ASSERT_EQ(one, expected[d]) << SpecToString(c.spec) << " device " << d;
      ASSERT_EQ(std::vector<Slice>(bulk.begin() + d * n, bulk.begin() + (d + 1) * n), expected[d]);
    }
    for (int i = 0; i < n; ++i) {
      if (!expected.empty()) {
        EXPECT_EQ(layout.shard_shape()[i], expected[0][i].stop - expected[0][i].start);
      }
    }
  }
}

TEST(ShardingTest, ReplicaIdCountsEarlierDevicesHoldingTheSameSlice) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    RandomCase t(rng);
    auto& [c, sharding, layout, indices] = t;
    std::map<std::vector<std::pair<Index, Index>>, Index> seen;
    std::vector<Index> ids(indices.size());
    layout.ReplicaIds(ids.data());
    for (size_t d = 0; d < indices.size(); ++d) {
      std::vector<std::pair<Index, Index>> key;
      for (const Slice& s : indices[d]) key.push_back({s.start, s.stop});
      ASSERT_EQ(layout.ReplicaId(static_cast<Index>(d)), seen[key]++)
          << SpecToString(c.spec) << " device " << d;
      ASSERT_EQ(ids[d], layout.ReplicaId(static_cast<Index>(d)));
    }
  }
}

TEST(ShardingTest, TileIsMixedRadixWithTheFirstListedAxisMostSignificant) {
  NamedSharding yx(Mesh({{"x", 2}, {"y", 4}}), {{{"y", "x"}, true}});
  NamedSharding xy(Mesh({{"x", 2}, {"y", 4}}), {{{"x", "y"}, true}});
  // Device 5 is (x=1, y=1): tile y*2+x = 3 in ('y','x'), x*4+y = 5 in ('x','y').
  EXPECT_EQ(yx.Tile(5, 0), 3);
  EXPECT_EQ(xy.Tile(5, 0), 5);
  ArrayLayout layout = yx.Layout(std::vector<Index>{16});
  EXPECT_EQ(layout.DeviceSlice(5, 0), (Slice{6, 8}));
}

TEST(ShardingTest, SizeOneAxesAreDroppedAndUnusedAxesReplicate) {
  NamedSharding s(Mesh({{"a", 1}, {"x", 2}, {"y", 2}}), {{{"a", "x"}, true}});
  EXPECT_EQ(s.Partitions(0), 2);
  EXPECT_EQ(s.Partitions(1), 1);
  ArrayLayout layout = s.Layout(std::vector<Index>{4, 3});
  EXPECT_EQ(layout.shard_shape(), (std::vector<Index>{2, 3}));
  // y replicates: devices 0 and 1 differ only in y.
  EXPECT_EQ(layout.DeviceSlice(0, 0), layout.DeviceSlice(1, 0));
  EXPECT_EQ(layout.ReplicaId(0), 0);
  EXPECT_EQ(layout.ReplicaId(1), 1);
  EXPECT_EQ(layout.DeviceSlice(2, 0), (Slice{2, 4}));
  EXPECT_EQ(layout.DeviceSlice(2, 1), (Slice{0, 3}));
}

TEST(ShardingTest, ErrorsNameTheDimensionSizesAndAxes) {
  Mesh mesh({{"x", 2}, {"y", 3}});
  EXPECT_EQ(
      ErrorOf([&] {
        (void)NamedSharding(mesh, ParsePartitionSpec("('x','y')")).Layout(std::vector<Index>{8});
      }),
      "shape: dimension 0 of (8,) has size 8, which is not divisible by its 6 partitions "
      "(mesh axes 'x', 'y' of sizes 2 * 3 in P(('x', 'y')))");
  EXPECT_EQ(
      ErrorOf([&] { NamedSharding(mesh, ParsePartitionSpec("None, z")); }),
      "spec: axis 'z' of dimension 1 in P(None, 'z') is not a mesh axis (mesh axes: x=2,y=3)");
  EXPECT_EQ(ErrorOf([&] { NamedSharding(mesh, ParsePartitionSpec("x, ('y', 'x')")); }),
            "spec: axis 'x' is used by dimension 0 and again by dimension 1 in P('x', ('y', 'x'))");
  EXPECT_NE(ErrorOf([&] {
              NamedSharding(mesh, ParsePartitionSpec("(x, x)"));
            }).find("used by dimension 0 and again by dimension 0"),
            std::string::npos);
  EXPECT_EQ(ErrorOf([&] {
              (void)NamedSharding(mesh, ParsePartitionSpec("x, y")).Layout(std::vector<Index>{4});
            }),
            "shape: (4,) has 1 dimensions, fewer than the 2 entries of P('x', 'y')");
  EXPECT_NE(ErrorOf([&] {
              (void)NamedSharding(mesh, {}).Layout(std::vector<Index>{-1});
            }).find("negative"),
            std::string::npos);
}

TEST(ShardingTest, ParsePartitionSpecReadsJaxSyntax) {
  PartitionSpec spec = ParsePartitionSpec("('x', \"y\"), None, z, (w,), ()");
  ASSERT_EQ(spec.size(), 5u);
  EXPECT_EQ(spec[0].axes, (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(spec[1].axes.empty());
  EXPECT_FALSE(spec[1].tuple);
  EXPECT_EQ(spec[2].axes, std::vector<std::string>{"z"});
  EXPECT_FALSE(spec[2].tuple);
  EXPECT_TRUE(spec[3].tuple);
  EXPECT_TRUE(spec[4].tuple && spec[4].axes.empty());
  EXPECT_EQ(SpecToString(spec), "P(('x', 'y'), None, 'z', ('w',), ())");
  EXPECT_EQ(SpecToString(ParsePartitionSpec("P('x', None)")), "P('x', None)");
  EXPECT_TRUE(ParsePartitionSpec("  ").empty());
  EXPECT_TRUE(ParsePartitionSpec("P()").empty());
  for (const char* bad : {"('x'", "x y", "(None)", "'x", ",", "x,,y"}) {
    EXPECT_NE(ErrorOf([&] { (void)ParsePartitionSpec(bad); }).find("spec: "), std::string::npos)
        << bad;
  }
}

// JAX's get_process_index_and_count, transcribed over (start, stop) sets of
// the universal shape (num_devices, ...), with the index defined by the first
// start of each distinct set.
std::optional<std::pair<Index, Index>> ReferenceIndexAndCount(const Config& c, int dim,
                                                              Index process) {
  std::set<Index> processes(c.owners.begin(), c.owners.end());
  const Index devices = static_cast<Index>(c.owners.size());
  bool replicated = true;
  for (const auto& entry : c.spec) {
    for (const auto& name : entry.axes) {
      for (const auto& axis : c.axes)
        replicated = replicated && !(axis.name == name && axis.size > 1);
    }
  }
  if (processes.size() == 1 || replicated) return std::make_pair(Index{0}, Index{1});
  std::vector<Index> universal(c.shape.size(), devices);
  auto indices = ReferenceIndices(c.axes, c.spec, universal);
  std::map<Index, std::set<std::pair<Index, Index>>> per_process;
  std::set<std::pair<Index, Index>> all;
  for (Index d = 0; d < devices; ++d) {
    std::pair<Index, Index> key{indices[d][dim].start, indices[d][dim].stop};
    per_process[c.owners[d]].insert(key);
    all.insert(key);
  }
  const size_t mine = per_process[process].size();
  for (const auto& [p, slices] : per_process) {
    if (slices.size() != mine) return std::nullopt;
  }
  std::set<std::set<std::pair<Index, Index>>> unique;
  for (const auto& [p, slices] : per_process) unique.insert(slices);
  size_t total = 0;
  for (const auto& u : unique) total += u.size();
  if (total != all.size()) return std::nullopt;
  std::vector<Index> firsts;
  for (const auto& u : unique) firsts.push_back(u.begin()->first);
  std::sort(firsts.begin(), firsts.end());
  const Index first = per_process[process].begin()->first;
  return std::make_pair(
      static_cast<Index>(std::find(firsts.begin(), firsts.end(), first) - firsts.begin()),
      static_cast<Index>(unique.size()));
}

// Regression (UBSan, found by fuzz/partition_spec_fuzzer): `layout` on a 0-d
// shape indexed an empty vector in ArrayLayout::Process.
TEST(ShardingTest, ZeroDimensionalArrayHasEmptySlicesOnEveryProcess) {
  Mesh mesh({{"x", 2}, {"y", 2}}, {0, 0, 1, 1});
  NamedSharding sharding(mesh, {});
  const ArrayLayout layout = sharding.Layout(std::vector<Index>{});
  EXPECT_EQ(layout.ndim(), 0);
  for (Index p : {0, 1}) {
    ProcessLayout view = layout.Process(p);
    EXPECT_TRUE(view.local_shape().empty());
    EXPECT_EQ(view.devices().size(), 2u);
  }
  for (Index d = 0; d < 4; ++d) EXPECT_EQ(layout.ReplicaId(d), d);
}

// Regression: SpecToString did not escape quotes, so the spec "x''" printed
// as P('x''') and did not parse back.
TEST(ShardingTest, SpecPrintingRoundTripsNamesWithQuotesAndBackslashes) {
  for (const std::string name : {"x''", "a\"b", "it's \"q\"", "back\\slash", "x, y", "()"}) {
    PartitionSpec spec = {SpecEntry{{name}, false}, SpecEntry{{name, "z"}, true}, SpecEntry{}};
    const std::string text = SpecToString(spec);
    PartitionSpec again = ParsePartitionSpec(text);
    ASSERT_EQ(again.size(), 3u) << text;
    EXPECT_EQ(again[0].axes, spec[0].axes) << text;
    EXPECT_EQ(again[1].axes, spec[1].axes) << text;
    EXPECT_TRUE(again[2].axes.empty()) << text;
  }
  EXPECT_EQ(SpecToString({SpecEntry{{"x''"}, false}}), "P(\"x''\")");  // as Python's repr
  EXPECT_EQ(ParsePartitionSpec("\"x''\"")[0].axes[0], "x''");
}

TEST(ShardingTest, ProcessIndexAndCountFollowsJaxUniformityRuleWithDeterministicOrder) {
  std::mt19937_64 rng(13);
  int non_uniform = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    Config c = RandomConfig(rng);
    NamedSharding sharding(Mesh(c.axes, c.owners), c.spec);
    for (int dim = 0; dim < static_cast<int>(c.shape.size()); ++dim) {
      for (Index p : sharding.mesh().processes()) {
        auto got = sharding.ProcessIndexAndCount(dim, p);
        auto want = ReferenceIndexAndCount(c, dim, p);
        ASSERT_EQ(got.has_value(), want.has_value()) << SpecToString(c.spec) << " dim " << dim;
        if (got) {
          ASSERT_EQ(*got, *want);
        }
        non_uniform += !got;
      }
    }
  }
  EXPECT_GT(non_uniform, 0);  // the random owners do produce non-uniform cases
  EXPECT_THROW((void)NamedSharding(Mesh({{"x", 2}}, {0, 2}), {}).ProcessIndexAndCount(0, 1),
               std::out_of_range);
}

TEST(ShardingTest, ProcessLayoutMapsLocalBlocksByPositionAmongSortedDistinctStarts) {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 1500; ++trial) {
    RandomCase t(rng);
    auto& [c, sharding, layout, indices] = t;
    const int n = layout.ndim();
    for (Index p : sharding.mesh().processes()) {
      ProcessLayout view = layout.Process(p);
      std::vector<std::set<Index>> starts(n);
      std::vector<std::set<std::pair<Index, Index>>> slices(n);
      for (Index d = 0; d < static_cast<Index>(c.owners.size()); ++d) {
        if (c.owners[d] != p) continue;
        for (int i = 0; i < n; ++i) {
          starts[i].insert(indices[d][i].start);
          slices[i].insert({indices[d][i].start, indices[d][i].stop});
        }
      }
      std::vector<Index> local(n), half(n);
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(view.Starts(i), std::vector<Index>(starts[i].begin(), starts[i].end()));
        local[i] = static_cast<Index>(slices[i].size()) * layout.shard_shape()[i];
        // A local extent that is the global one means "full": global slices.
        half[i] = (rng() % 2) ? c.shape[i] : local[i];
      }
      ASSERT_EQ(view.local_shape(), local);
      ProcessLayout::Mapping m = view.LocalToGlobal(half);
      std::vector<Index> devices(view.devices().begin(), view.devices().end());
      for (size_t k = 0; k < devices.size(); ++k) {
        for (int i = 0; i < n; ++i) {
          const Slice g = indices[devices[k]][i];
          ASSERT_EQ(m.global[k * n + i], g);
          Slice want = g;
          if (half[i] != c.shape[i]) {
            const Index pos = std::distance(starts[i].begin(), starts[i].find(g.start));
            want = {pos * layout.shard_shape()[i], (pos + 1) * layout.shard_shape()[i]};
          }
          ASSERT_EQ(m.local[k * n + i], want);
        }
      }
    }
  }
}

TEST(ShardingTest, LocalShapeMatchingNeitherGlobalNorAddressableIsAnError) {
  Mesh mesh({{"x", 4}}, {0, 0, 1, 1});
  ArrayLayout layout =
      NamedSharding(mesh, ParsePartitionSpec("x")).Layout(std::vector<Index>{8, 3});
  ProcessLayout view = layout.Process(1);
  EXPECT_EQ(view.local_shape(), (std::vector<Index>{4, 3}));
  EXPECT_EQ(ErrorOf([&] {
              (void)view.LocalToGlobal(std::vector<Index>{5, 3});
            }),
            "local_data: dimension 0 has 5 elements, but it must match the global size 8 or the "
            "4 elements process 1 addresses (global shape (8, 3))");
  EXPECT_NE(ErrorOf([&] { (void)view.LocalToGlobal(std::vector<Index>{4}); }).find("local_data: "),
            std::string::npos);
  EXPECT_THROW((void)layout.Process(2), std::out_of_range);
}

TEST(ShardingTest, GlobalShapeInferenceFailsClearlyOnlyInNonUniformDimensions) {
  // JAX's docstring example: rows uniform, columns overlap without matching.
  // Device grid (4x4 array, mesh 4x... ) built as 2 processes over x, interleaved over y.
  Mesh mesh({{"x", 2}, {"y", 4}}, {0, 0, 1, 1, 2, 3, 3, 2});
  NamedSharding s(mesh, ParsePartitionSpec("x, y"));
  auto inferred = s.InferGlobalShape(std::vector<Index>{2, 4});
  EXPECT_EQ(inferred[0], std::optional<Index>(4));
  EXPECT_EQ(inferred[1], std::nullopt);
  EXPECT_EQ(ErrorOf([&] {
              (void)s.ResolveGlobalShape(std::vector<Index>{2, 4}, std::nullopt);
            }),
            "global_shape: cannot be inferred from the local shape (2, 4): P('x', 'y') over mesh "
            "x=2,y=4 is non-uniform across processes in dimension(s) 1; pass global_shape "
            "explicitly");
  std::vector<Index> given = {4, 4};
  EXPECT_EQ(s.ResolveGlobalShape(std::vector<Index>{2, 4}, std::span<const Index>(given)), given);
  // One process: global = local.
  NamedSharding single(Mesh({{"x", 4}}), ParsePartitionSpec("x"));
  EXPECT_EQ(single.InferGlobalShape(std::vector<Index>{8})[0], std::optional<Index>(8));
}

}  // namespace
}  // namespace shardkit
