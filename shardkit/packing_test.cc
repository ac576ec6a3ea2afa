#include "shardkit/packing.h"

#include <gtest/gtest.h>

namespace shardkit {
namespace {

TEST(PackItems, SmallExampleCoversEveryItem) {
  std::vector<Index> lengths = {5, 3, 4, 2, 6};
  PackOptions o;
  o.capacity = 10;
  Packing p = PackItems(lengths, o);
  EXPECT_EQ(p.num_packs(), 2);
  EXPECT_EQ(p.tokens, 20);
}

}  // namespace
}  // namespace shardkit
