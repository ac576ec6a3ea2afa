// Vision tokens from image sizes: how many tokens a vision encoder makes of an
// image of height x width pixels, so that a sample table (multimodal_plan.h)
// can be built from image headers without decoding a pixel.
//
// QwenVisionTokens: Qwen2-VL / Qwen2.5-VL's smart_resize. With factor =
// patch_size * merge_size, each side is rounded to a multiple of factor
// (half to even, as Python's round), at least factor; if the area then exceeds
// max_pixels both sides are scaled by 1 / sqrt(h * w / max_pixels) and floored
// to multiples of factor (at least factor); if it is below min_pixels they are
// scaled by sqrt(min_pixels / (h * w)) and ceiled. The image gives
// (h / patch_size) * (w / patch_size) encoder patches and patches /
// merge_size^2 LM tokens.
//
// TileVisionTokens: nanoVLM's DynamicResize + SplitImage. The long side goes
// to min(max_side, ceil(long / tile) * tile) (or to max_side with
// resize_to_max_side), the short side is scaled by the same factor and ceiled
// to a multiple of tile (at least tile); the image is cut into rows x cols
// tiles of tile x tile pixels. With a global tile (nanoVLM's
// global_image_token) an image of more than one tile adds one, resized whole.
// Each tile gives tokens_per_tile LM tokens.
//
// Both are pure functions; they throw invalid_argument naming `height` /
// `width` (< 1), the option out of its domain, or `height` for Qwen's aspect
// ratio limit (max side / min side > 200).
#ifndef SHARDKIT_LOADER_VISION_TOKENS_H_
#define SHARDKIT_LOADER_VISION_TOKENS_H_

#include "shardkit/base/errors.h"

namespace shardkit {

struct QwenVisionOptions {
  Index patch_size = 14;                  // >= 1
  Index merge_size = 2;                   // >= 1
  Index min_pixels = 56 * 56;             // >= 1
  Index max_pixels = 14 * 14 * 4 * 1280;  // >= min_pixels
};

struct ResizedImage {
  Index height = 0, width = 0;  // pixels after the resize
  Index patches = 0;            // encoder patches (tiles for TileVisionTokens)
  Index tokens = 0;             // LM tokens
};

[[nodiscard]] ResizedImage QwenVisionTokens(Index height, Index width,
                                            const QwenVisionOptions& options = {});

struct TileOptions {
  Index tile_size = 512;  // >= 1
  Index max_side = 2048;  // >= tile_size
  bool resize_to_max_side = false;
  bool global_tile = true;
  Index tokens_per_tile = 64;  // >= 0
};

[[nodiscard]] ResizedImage TileVisionTokens(Index height, Index width,
                                            const TileOptions& options = {});

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_VISION_TOKENS_H_
