// Pillow's Image.resize((width, height), Image.BILINEAR) of RGB uint8 pixels,
// bit for bit (Resample.c, 8 bits per channel: a separable triangle filter
// whose support grows with the reduction factor, coefficients in 22-bit fixed
// point, the horizontal pass first, each pass rounded and clipped). The
// public entry is ResizeBilinear in shardkit/loader/image_decode.h; this one
// writes into a caller's buffer (a batch's slot).
//
// Thread-safety: stateless.
#ifndef SHARDKIT_LOADER_INTERNAL_BILINEAR_RESIZE_H_
#define SHARDKIT_LOADER_INTERNAL_BILINEAR_RESIZE_H_

#include <cstdint>

#include "shardkit/base/index.h"

namespace shardkit::internal {

// `src` (in_h x in_w x 3) resized into `out` (height x width x 3).
// REQUIRES: all sides >= 1, out does not overlap src (unchecked).
void ResizeBilinearInto(const std::uint8_t* src, Index in_h, Index in_w, Index height, Index width,
                        std::uint8_t* out);

}  // namespace shardkit::internal

#endif  // SHARDKIT_LOADER_INTERNAL_BILINEAR_RESIZE_H_
