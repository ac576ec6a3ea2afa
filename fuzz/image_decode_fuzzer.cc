// libFuzzer harness: image headers and decoding (JPEG, PNG, WebP through the
// system libraries) and the resize.
//
// Input: the bytes of an encoded image. ReadImageInfo and DecodeImage must
// either return a result consistent with the bytes or throw
// std::invalid_argument; never read outside the buffer, crash or hang. The
// pixel limit is small (2^20) so that a header may not ask for gigabytes.
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>

#include "shardkit/loader/image_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> bytes(data, size);
  constexpr shardkit::Index kLimit = 1 << 20;
  shardkit::ImageInfo info{};
  try {
    info = shardkit::ReadImageInfo(bytes, "image", kLimit);
    if (info.height < 1 || info.width < 1 || info.height * info.width > kLimit) __builtin_trap();
  } catch (const std::invalid_argument&) {
    return 0;
  }
  try {
    // The last byte picks the resize: none, a fixed size, or a pixel budget.
    const std::uint8_t pick = size ? data[size - 1] : 0;
    shardkit::ResizeOptions resize;
    if (pick % 3 == 1) resize = {1 + pick % 7, 1 + pick % 11, 0};
    if (pick % 3 == 2) resize = {0, 0, 1 + pick};
    const shardkit::Image image = shardkit::DecodeImage(bytes, "image", resize, kLimit);
    const auto [h, w] = shardkit::ResizedShape(info.height, info.width, resize);
    if (image.height != h || image.width != w) __builtin_trap();
    if (image.pixels.size() != static_cast<std::size_t>(h * w * 3)) __builtin_trap();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
