#include "shardkit/layout/mesh.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "shardkit/base/testing.h"

namespace shardkit {
namespace {

TEST(MeshTest, DevicesAreNumberedRowMajorWithTheLastAxisFastest) {
  Mesh mesh({{"x", 2}, {"y", 3}, {"z", 4}});
  EXPECT_EQ(mesh.size(), 24);
  Index d = 0;
  for (Index x = 0; x < 2; ++x) {
    for (Index y = 0; y < 3; ++y) {
      for (Index z = 0; z < 4; ++z, ++d) {
        EXPECT_EQ(mesh.Coordinate(d, 0), x);
        EXPECT_EQ(mesh.Coordinate(d, 1), y);
        EXPECT_EQ(mesh.Coordinate(d, 2), z);
      }
    }
  }
  EXPECT_EQ(mesh.stride(0), 12);
  EXPECT_EQ(mesh.stride(2), 1);
  EXPECT_EQ(mesh.FindAxis("y"), 1);
  EXPECT_EQ(mesh.FindAxis("w"), -1);
  EXPECT_EQ(mesh.ToString(), "x=2,y=3,z=4");
}

TEST(MeshTest, DefaultOwnerIsProcessZero) {
  Mesh mesh({{"x", 4}});
  EXPECT_EQ(mesh.processes(), std::vector<Index>{0});
  EXPECT_EQ(mesh.DevicesOf(0).size(), 4u);
  EXPECT_TRUE(mesh.DevicesOf(1).empty());
}

TEST(MeshTest, DevicesOfListsEachProcessesDevicesAscendingForAnyOwnerLayout) {
  std::vector<Index> owners = {3, 0, 3, 7, 0, 7, 7, 3};
  Mesh mesh({{"a", 2}, {"b", 4}}, owners);
  EXPECT_EQ(mesh.processes(), (std::vector<Index>{0, 3, 7}));
  EXPECT_EQ(mesh.ProcessSlot(7), 2);
  EXPECT_EQ(mesh.ProcessSlot(5), -1);
  for (Index p : {0, 3, 7}) {
    std::vector<Index> expected;
    for (Index d = 0; d < 8; ++d) {
      if (owners[d] == p) expected.push_back(d);
    }
    auto got = mesh.DevicesOf(p);
    EXPECT_EQ(std::vector<Index>(got.begin(), got.end()), expected) << p;
  }
  EXPECT_EQ(mesh.Owner(3), 7);
  EXPECT_THROW((void)mesh.Owner(8), std::out_of_range);
}

TEST(MeshTest, BadAxesAndOwnersAreRejectedNamingTheValue) {
  const auto message = base_testing::ErrorOf<std::invalid_argument>;
  EXPECT_EQ(message([] { Mesh({}); }), "axes: a mesh needs at least one axis");
  EXPECT_NE(message([] {
              Mesh({{"x", 2}, {"x", 2}});
            }).find("'x' appears twice"),
            std::string::npos);
  EXPECT_NE(message([] { Mesh({{"x", 0}}); }).find("size 0"), std::string::npos);
  EXPECT_NE(message([] { Mesh({{"x", 2}}, {0, 1, 2}); }).find("got 3 entries"), std::string::npos);
  EXPECT_NE(message([] {
              Mesh({{"x", 2}}, {0, -1});
            }).find("negative process -1"),
            std::string::npos);
  EXPECT_NE(message([] {
              Mesh({{"x", Index{1} << 20}, {"y", Index{1} << 20}});
            }).find("more than"),
            std::string::npos);
}

TEST(MeshTest, ParseMeshAxesReadsNameEqualsSizeLists) {
  auto axes = ParseMeshAxes(" data=4, model = 2 ");
  ASSERT_EQ(axes.size(), 2u);
  EXPECT_EQ(axes[0].name, "data");
  EXPECT_EQ(axes[1].size, 2);
  EXPECT_THROW((void)ParseMeshAxes("x=2,y"), std::invalid_argument);
  EXPECT_THROW((void)ParseMeshAxes("x=two"), std::invalid_argument);
  EXPECT_THROW((void)ParseMeshAxes("=2"), std::invalid_argument);
}

}  // namespace
}  // namespace shardkit
