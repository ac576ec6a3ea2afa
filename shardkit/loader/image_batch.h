// ImageBatchDecoder: decodes the encoded images of a batch on a pool of C++
// threads into one uint8 buffer, images in the order given (the loader gives
// them in token order), each RGB HWC (see image_decode.h for the decode and
// resize rules).
//
// With a fixed size (resize.height, resize.width) the buffer is an
// [images, height, width, 3] tensor; otherwise images follow each other and
// offsets[i] is image i's first byte (a list of tiles of varying sizes).
//
// Errors: an image that does not decode throws std::invalid_argument
// "images: sample <s>, image <j>: <why>" (j: the image's position among its
// sample's images); when several fail, the first in input order is reported.
//
// Thread-safety: Decode may be called from one thread at a time per decoder
// (it waits for the batch); the pool's threads live as long as the decoder.
#ifndef SHARDKIT_LOADER_IMAGE_BATCH_H_
#define SHARDKIT_LOADER_IMAGE_BATCH_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "shardkit/base/index.h"
#include "shardkit/loader/image_decode.h"

namespace shardkit {

namespace internal {
class ThreadPool;
}

struct ImageBatchOptions {
  ResizeOptions resize;
  Index max_pixels = kDefaultMaxImagePixels;  // per encoded image, from its header
  int threads = 0;                            // 0: std::thread::hardware_concurrency()
};

struct DecodedImages {
  std::vector<std::uint8_t> pixels;  // every image, RGB HWC, one after another
  std::vector<Index> heights;
  std::vector<Index> widths;
  std::vector<Index> offsets;  // images + 1 entries: image i is pixels[offsets[i], offsets[i+1])
};

class ImageBatchDecoder {
 public:
  // Throws invalid_argument naming "resize" or "threads" (negative), "max_pixels" (< 1).
  explicit ImageBatchDecoder(const ImageBatchOptions& options);
  ~ImageBatchDecoder();
  ImageBatchDecoder(const ImageBatchDecoder&) = delete;
  ImageBatchDecoder& operator=(const ImageBatchDecoder&) = delete;

  // Decodes images[i]; samples[i] is the sample it belongs to (for messages;
  // may be empty: then the sample is i). REQUIRES: samples empty or the same
  // size as images.
  [[nodiscard]] DecodedImages Decode(std::span<const std::span<const std::uint8_t>> images,
                                     std::span<const Index> samples = {});

  [[nodiscard]] int threads() const;
  [[nodiscard]] const ImageBatchOptions& options() const { return options_; }

 private:
  ImageBatchOptions options_;
  std::unique_ptr<internal::ThreadPool> pool_;
};

}  // namespace shardkit

#endif  // SHARDKIT_LOADER_IMAGE_BATCH_H_
