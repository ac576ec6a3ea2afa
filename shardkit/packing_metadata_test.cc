#include "shardkit/packing_metadata.h"

#include <gtest/gtest.h>

namespace shardkit {
namespace {

TEST(FillRowMetadata, PositionsRestartPerDocument) {
  std::vector<PackItem> row = {{0, 3, 0, 0}, {1, 2, 0, 0}};
  CollateOptions o;
  o.seq_len = 6;
  std::vector<std::int64_t> pos(6);
  FillRowMetadata(row, o, {pos.data(), nullptr, nullptr, nullptr});
  EXPECT_EQ(pos, (std::vector<std::int64_t>{0, 1, 2, 0, 1, 0}));
}

}  // namespace
}  // namespace shardkit
