#include "shardkit/loader/vision_tokens.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace shardkit {
namespace {

// Values worked by hand from Qwen2-VL's smart_resize (patch 14, merge 2).
TEST(VisionTokensTest, QwenMatchesSmartResizeWorkedByHand) {
  ResizedImage r = QwenVisionTokens(224, 224);
  EXPECT_EQ(r.height, 224);
  EXPECT_EQ(r.tokens, 64);  // 16 x 16 patches, 2 x 2 merged
  EXPECT_EQ(r.patches, 256);
  r = QwenVisionTokens(1000, 2000);  // over max_pixels: scaled down, floored
  EXPECT_EQ(r.height, 700);
  EXPECT_EQ(r.width, 1400);
  EXPECT_EQ(r.tokens, 1250);
  r = QwenVisionTokens(42, 70);  // 1.5 and 2.5 factors: half to even, 2 and 2
  EXPECT_EQ(r.height, 56);
  EXPECT_EQ(r.width, 56);
  r = QwenVisionTokens(10, 10);  // under min_pixels: scaled up, ceiled
  EXPECT_EQ(r.height, 56);
  EXPECT_EQ(r.tokens, 4);
}

TEST(VisionTokensTest, TilesFollowNanoVlmResizeAndSplit) {
  ResizedImage r = TileVisionTokens(1000, 2000);
  EXPECT_EQ(r.height, 1024);
  EXPECT_EQ(r.width, 2048);
  EXPECT_EQ(r.patches, 9);  // 2 x 4 tiles and the global one
  EXPECT_EQ(r.tokens, 9 * 64);
  r = TileVisionTokens(300, 400);  // one tile: no global tile
  EXPECT_EQ(r.patches, 1);
  TileOptions o;
  o.global_tile = false;
  EXPECT_EQ(TileVisionTokens(1000, 2000, o).tokens, 8 * 64);
}

TEST(VisionTokensTest, BadSizesNameTheParameter) {
  auto starts = [](auto f, const char* prefix) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what()).rfind(prefix, 0) == 0;
    }
    return false;
  };
  EXPECT_TRUE(starts([] { (void)QwenVisionTokens(0, 5); }, "height: "));
  EXPECT_TRUE(starts([] { (void)QwenVisionTokens(5, -1); }, "width: "));
  EXPECT_TRUE(starts([] { (void)QwenVisionTokens(1, 500); }, "height: aspect ratio"));
  QwenVisionOptions q;
  q.max_pixels = 1;
  EXPECT_TRUE(starts([&] { (void)QwenVisionTokens(5, 5, q); }, "max_pixels: "));
  TileOptions t;
  t.max_side = 10;
  EXPECT_TRUE(starts([&] { (void)TileVisionTokens(5, 5, t); }, "max_side: "));
}

}  // namespace
}  // namespace shardkit
