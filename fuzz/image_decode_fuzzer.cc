// libFuzzer harness: image headers and decoding (JPEG, PNG, WebP through the
// system libraries) and the resize.
//
// Input: the bytes of an encoded image. ReadImageInfo and DecodeImage must
// either return a result consistent with the bytes or throw
// std::invalid_argument; never read outside the buffer, crash or hang. The
// pixel limit is small (2^20) so that a header may not ask for gigabytes.
// The last byte also picks whether a PNG's chunk CRCs are recomputed first
// (else nearly every mutation stops at a CRC, and the libdeflate path that
// only takes files whose CRCs hold would not be fuzzed) and the JPEG draft
// mode.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <vector>

#include "shardkit/loader/image_decode.h"

namespace {

std::uint32_t BigEndian32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

// Every whole chunk's CRC made right.
void FixPngCrcs(std::vector<std::uint8_t>& b) {
  for (std::size_t pos = 8; b.size() - pos >= 12;) {
    const std::uint32_t len = BigEndian32(b.data() + pos);
    if (len > b.size() - pos - 12) return;
    const auto crc = static_cast<std::uint32_t>(crc32(0, b.data() + pos + 4, 4 + len));
    for (int i = 0; i < 4; ++i)
      b[pos + 8 + len + i] = static_cast<std::uint8_t>(crc >> (24 - 8 * i));
    pos += 12 + std::size_t{len};
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::uint8_t pick = size ? data[size - 1] : 0;
  std::vector<std::uint8_t> fixed;
  if ((pick & 8) && size >= 8 && std::memcmp(data, "\x89PNG", 4) == 0) {
    fixed.assign(data, data + size);
    FixPngCrcs(fixed);
    data = fixed.data();
  }
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
    shardkit::ResizeOptions resize;
    if (pick % 3 == 1) resize = {1 + pick % 7, 1 + pick % 11, 0};
    if (pick % 3 == 2) resize = {0, 0, 1 + pick};
    resize.jpeg_draft = (pick & 16) != 0;
    const shardkit::Image image = shardkit::DecodeImage(bytes, "image", resize, kLimit);
    const auto [h, w] = shardkit::ResizedShape(info.height, info.width, resize);
    if (image.height != h || image.width != w) __builtin_trap();
    if (image.pixels.size() != static_cast<std::size_t>(h * w * 3)) __builtin_trap();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
