#include "shardkit/loader/image_batch.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>

#include "shardkit/base/errors.h"
#include "shardkit/loader/internal/thread_pool.h"

namespace shardkit {

ImageBatchDecoder::ImageBatchDecoder(const ImageBatchOptions& options) : options_(options) {
  CheckAtLeast("max_pixels", options.max_pixels, 1);
  // Validates the resize options.
  (void)ResizedShape(1, 1, options.resize, options.max_pixels);
  if (options.threads < 0) ThrowInvalid("threads", "must be >= 0, got " + Str(options.threads));
  int threads = options.threads;
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  pool_ = std::make_unique<internal::ThreadPool>(threads);
}

ImageBatchDecoder::~ImageBatchDecoder() = default;

int ImageBatchDecoder::threads() const { return pool_->size(); }

DecodedImages ImageBatchDecoder::Decode(std::span<const std::span<const std::uint8_t>> images,
                                        std::span<const Index> samples) {
  const Index n = static_cast<Index>(images.size());
  if (!samples.empty() && static_cast<Index>(samples.size()) != n) {
    ThrowInvalid("samples",
                 "has " + Str(static_cast<Index>(samples.size())) + " entries, images " + Str(n));
  }
  std::vector<std::string> fields(n);
  for (Index i = 0, j = 0; i < n; ++i) {
    const Index s = samples.empty() ? i : samples[i];
    j = (i > 0 && !samples.empty() && samples[i - 1] == s) ? j + 1 : 0;
    fields[i] = "images: sample " + Str(s) + ", image " + Str(j);
  }
  DecodedImages out;
  out.heights.resize(n);
  out.widths.resize(n);
  out.offsets.assign(n + 1, 0);
  std::vector<std::exception_ptr> errors(n);
  // Pass 1: sizes from the headers (no pixel decoded), so that pass 2 writes
  // every image straight into its slot of one buffer.
  pool_->ParallelFor(n, [&](Index i) {
    try {
      const ImageInfo info = ReadImageInfo(images[i], fields[i], options_.max_pixels);
      std::tie(out.heights[i], out.widths[i]) =
          ResizedShape(info.height, info.width, options_.resize, options_.max_pixels);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  });
  for (Index i = 0; i < n; ++i) {
    if (errors[i]) std::rethrow_exception(errors[i]);
    out.offsets[i + 1] =
        CheckedAdd("images", out.offsets[i],
                   CheckedMul("images", CheckedMul("images", out.heights[i], out.widths[i]), 3));
  }
  out.pixels.resize(out.offsets[n]);
  pool_->ParallelFor(n, [&](Index i) {
    try {
      (void)DecodeImageInto(
          images[i], fields[i], options_.resize, options_.max_pixels,
          std::span(out.pixels).subspan(out.offsets[i], out.offsets[i + 1] - out.offsets[i]));
    } catch (...) {
      errors[i] = std::current_exception();
    }
  });
  for (Index i = 0; i < n; ++i) {
    if (errors[i]) std::rethrow_exception(errors[i]);
  }
  return out;
}

}  // namespace shardkit
