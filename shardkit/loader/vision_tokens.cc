#include "shardkit/loader/vision_tokens.h"

#include <algorithm>
#include <cmath>

namespace shardkit {

namespace {

void CheckSize(Index height, Index width) {
  CheckAtLeast("height", height, 1);
  CheckAtLeast("width", width, 1);
  // Keeps every product below 2^63 and every value exact in a double.
  constexpr Index kMaxSide = Index{1} << 24;
  if (height > kMaxSide) ThrowInvalid("height", Str(height) + " is over " + Str(kMaxSide));
  if (width > kMaxSide) ThrowInvalid("width", Str(width) + " is over " + Str(kMaxSide));
}

Index RoundBy(double x, Index f) {
  return static_cast<Index>(std::nearbyint(x / static_cast<double>(f))) * f;
}
Index FloorBy(double x, Index f) {
  return static_cast<Index>(std::floor(x / static_cast<double>(f))) * f;
}
Index CeilBy(double x, Index f) {
  return static_cast<Index>(std::ceil(x / static_cast<double>(f))) * f;
}

}  // namespace

ResizedImage QwenVisionTokens(Index height, Index width, const QwenVisionOptions& o) {
  CheckSize(height, width);
  CheckAtLeast("patch_size", o.patch_size, 1);
  CheckAtLeast("merge_size", o.merge_size, 1);
  CheckAtLeast("min_pixels", o.min_pixels, 1);
  CheckAtLeast("max_pixels", o.max_pixels, o.min_pixels);
  if (o.patch_size > 4096 || o.merge_size > 64) {
    ThrowInvalid("patch_size", "patch_size * merge_size must stay below 2^18");
  }
  if (std::max(height, width) > 200 * std::min(height, width)) {
    ThrowInvalid("height", "aspect ratio of " + Str(height) + " x " + Str(width) +
                               " is over 200 (Qwen-VL refuses it)");
  }
  const Index f = o.patch_size * o.merge_size;
  const double h = static_cast<double>(height), w = static_cast<double>(width);
  Index hb = std::max(f, RoundBy(h, f)), wb = std::max(f, RoundBy(w, f));
  if (static_cast<double>(hb) * static_cast<double>(wb) > static_cast<double>(o.max_pixels)) {
    double beta = std::sqrt(h * w / static_cast<double>(o.max_pixels));
    hb = std::max(f, FloorBy(h / beta, f));
    wb = std::max(f, FloorBy(w / beta, f));
  } else if (static_cast<double>(hb) * static_cast<double>(wb) <
             static_cast<double>(o.min_pixels)) {
    double beta = std::sqrt(static_cast<double>(o.min_pixels) / (h * w));
    hb = CeilBy(h * beta, f);
    wb = CeilBy(w * beta, f);
  }
  ResizedImage r;
  r.height = hb, r.width = wb;
  r.patches = (hb / o.patch_size) * (wb / o.patch_size);
  r.tokens = r.patches / (o.merge_size * o.merge_size);
  return r;
}

ResizedImage TileVisionTokens(Index height, Index width, const TileOptions& o) {
  CheckSize(height, width);
  CheckAtLeast("tile_size", o.tile_size, 1);
  CheckAtLeast("max_side", o.max_side, o.tile_size);
  CheckAtLeast("tokens_per_tile", o.tokens_per_tile, 0);
  if (o.max_side > (Index{1} << 24)) ThrowInvalid("max_side", "is over 2^24");
  const bool wide = width >= height;
  const Index long_side = wide ? width : height, short_side = wide ? height : width;
  const Index target_long =
      o.resize_to_max_side
          ? o.max_side
          : std::min(o.max_side, CeilBy(static_cast<double>(long_side), o.tile_size));
  const double scale = static_cast<double>(target_long) / static_cast<double>(long_side);
  const Index target_short =
      std::max(o.tile_size, CeilBy(static_cast<double>(short_side) * scale, o.tile_size));
  ResizedImage r;
  r.height = wide ? target_short : target_long;
  r.width = wide ? target_long : target_short;
  Index tiles = (r.height / o.tile_size) * (r.width / o.tile_size);
  if (o.global_tile && tiles > 1) ++tiles;
  r.patches = tiles;
  r.tokens = tiles * o.tokens_per_tile;
  return r;
}

}  // namespace shardkit
