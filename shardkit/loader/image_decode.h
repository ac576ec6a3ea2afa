// Decoding encoded images (JPEG, PNG, WebP) into RGB uint8 pixels, HWC, and
// resizing them by Pillow's bilinear rule; reading an image's size from its
// header without decoding.
//
// Formats are told by their signature, never by a file name: JPEG (FF D8 FF),
// PNG (89 'P' 'N' 'G' 0D 0A 1A 0A), WebP ("RIFF" .... "WEBP"). Each is decoded
// through the Debian library found at build time (libturbojpeg, libpng,
// libwebp); ImageFormatsBuilt() says which. 8-bit, non-interlaced PNGs
// inflate through libdeflate when it was found (libdeflate-dev: about 1.7x
// zlib's speed), unfiltered here; any other PNG, or one that path doubts (a
// bad CRC, a zlib stream that does not fill the rows exactly), goes through
// libpng, whose rules decide. Output is always 3 channels:
// grey is replicated, palette expanded, alpha dropped (not composited: the
// stored colour under the alpha, as Pillow's convert("RGB")), 16-bit samples
// keep their high byte (as Pillow). EXIF orientation is not applied (nor is
// it by Pillow's open()).
//
// Agreement with Pillow (python/tests/test_image_decode.py holds it):
// - PNG and lossless WebP: pixel for pixel equal to Image.open(..).convert("RGB").
// - JPEG: libjpeg-turbo's accurate integer IDCT (JDCT_ISLOW) with fancy
//   upsampling, the settings of Pillow's decoder; with the same libjpeg-turbo
//   major version the pixels are equal, otherwise within 2 per channel (the
//   tests allow max |diff| <= 2, mean <= 0.05).
// - Lossy WebP: libwebp's default decoder as Pillow; within 2 per channel
//   (libwebp versions may differ).
// - Resize: Pillow's Image.resize(size, Image.BILINEAR) bit for bit: a
//   separable triangle filter whose support grows with the reduction factor
//   (antialiased), coefficients in 22-bit fixed point, horizontal pass first.
//
// Hostile input: every function here either returns a result consistent with
// the bytes or throws std::invalid_argument naming `field` (the caller's name
// for the bytes, e.g. "images: sample 12 image 0"); never crashes, never
// reads outside the span, never allocates before the header's dimensions pass
// the pixel limit. Truncated or corrupt data is an error (no partial image:
// libjpeg-turbo's warnings are errors, as Pillow's "image file is truncated");
// stricter than Pillow in one place: a PNG whose last data chunk lacks its
// zlib or CRC checksum (cut in the 8 bytes before IEND) is refused, where
// Pillow returns its (whole) pixels.
//
// Thread-safety: stateless; every function may run on any thread concurrently.
#ifndef SHARDKIT_LOADER_IMAGE_DECODE_H_
#define SHARDKIT_LOADER_IMAGE_DECODE_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardkit/base/index.h"

namespace shardkit {

enum class ImageFormat { kJpeg, kPng, kWebp };

// "jpeg", "png", "webp".
[[nodiscard]] std::string_view ImageFormatName(ImageFormat format);

// The formats this build decodes (those whose library CMake found), e.g.
// {"jpeg", "png", "webp"}.
[[nodiscard]] std::vector<std::string> ImageFormatsBuilt();

// Pillow's decompression-bomb error threshold (2 * Image.MAX_IMAGE_PIXELS).
inline constexpr Index kDefaultMaxImagePixels = 178956970;

struct ImageInfo {
  ImageFormat format;
  Index height = 0;
  Index width = 0;
};

// The format and size from the header alone (no pixel is decoded).
// Throws invalid_argument "<field>: ..." for an unknown signature ("not a
// JPEG, PNG or WebP image (first bytes ..)"), a header that does not parse,
// a zero dimension, or height * width over max_pixels.
[[nodiscard]] ImageInfo ReadImageInfo(std::span<const std::uint8_t> bytes, std::string_view field,
                                      Index max_pixels = kDefaultMaxImagePixels);

// RGB pixels, row-major, 3 bytes per pixel: pixels.size() == height * width * 3.
struct Image {
  Index height = 0;
  Index width = 0;
  std::vector<std::uint8_t> pixels;
};

// How a decoded image is resized. Exactly one rule applies:
// - height > 0 and width > 0: to exactly height x width;
// - else max_pixels > 0: when height * width > max_pixels, both sides scaled
//   by s = sqrt(max_pixels / (height * width)), each floor(side * s), at least
//   1 (aspect kept within a pixel, never more than max_pixels); else unchanged;
// - else: unchanged.
// jpeg_draft (off by default; a faster mode with other pixels): a JPEG whose
// sides are both at least twice the target's is decoded at 1/s of its size by
// libjpeg-turbo's DCT scaling, s the largest of 8, 4, 2 with
// s <= min(width / target width, height / target height) (integer division),
// ceil(side / s) a side, then resized as above: Pillow's
// `im.draft("RGB", (target width, target height))` before convert("RGB") and
// resize (test_image_decode.py compares with that, within the JPEG
// tolerance). About 1.5x faster on JPEGs twice the target; other formats, and
// JPEGs under 8 px a side after scaling (where TurboJPEG would pick another
// factor), decode as without it.
struct ResizeOptions {
  Index height = 0;
  Index width = 0;
  Index max_pixels = 0;
  bool jpeg_draft = false;
};

// The size an h x w image has after `resize`. Throws invalid_argument naming
// "resize" for a negative value, only one of height/width set, or a target
// height x width over `pixel_limit` (the decoder's limit on a header).
[[nodiscard]] std::pair<Index, Index> ResizedShape(Index h, Index w, const ResizeOptions& resize,
                                                   Index pixel_limit = kDefaultMaxImagePixels);

// Decodes `bytes` (see the file comment) and resizes by `resize`.
// Throws invalid_argument "<field>: ..." (see ReadImageInfo; also for data
// the library refuses, and for a format this build does not decode, naming
// the Debian package that was missing at build time).
[[nodiscard]] Image DecodeImage(std::span<const std::uint8_t> bytes, std::string_view field,
                                const ResizeOptions& resize = {},
                                Index max_pixels = kDefaultMaxImagePixels);

// DecodeImage into `out` (a batch's slot: no copy; the full-size pixels of a
// resized image are decoded into a per-thread buffer that is kept between
// images up to 4 MiB). Returns the (height, width) written. Throws as
// DecodeImage, and invalid_argument naming "out" when out.size() is not
// height * width * 3 of ResizedShape (what ReadImageInfo's header gives).
[[nodiscard]] std::pair<Index, Index> DecodeImageInto(std::span<const std::uint8_t> bytes,
                                                      std::string_view field,
                                                      const ResizeOptions& resize, Index max_pixels,
                                                      std::span<std::uint8_t> out);

// Pillow's Image.resize((width, height), Image.BILINEAR) of an RGB image.
// REQUIRES: image.pixels.size() == image.height * image.width * 3, all sides >= 1.
[[nodiscard]] Image ResizeBilinear(const Image& image, Index height, Index width);

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_IMAGE_DECODE_H_
