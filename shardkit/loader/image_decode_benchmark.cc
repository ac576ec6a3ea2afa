// Per-image cost of the decode path's steps, one core: Pillow's bilinear
// resize of a 620 x 620 RGB image to 224 x 224 (ResizeBilinear), and a
// photo-like 620 x 620 RGB PNG decoded (the libdeflate path when built with
// it) with and without that resize. The side-by-side comparison with Pillow
// in DataLoader workers is bench/multimodal_decode.py.
#include <benchmark/benchmark.h>
#include <zlib.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "shardkit/loader/image_decode.h"

namespace shardkit {
namespace {

constexpr Index kSide = 620;

// Smooth gradients plus noise (bench/multimodal_decode.py's kind of content).
Image Photo() {
  Image im{kSide, kSide, std::vector<std::uint8_t>(kSide * kSide * 3)};
  std::mt19937 rng(0);
  std::normal_distribution<double> noise(0, 8);
  for (Index y = 0; y < kSide; ++y) {
    for (Index x = 0; x < kSide; ++x) {
      const double base[3] = {127.0 + 100.0 * (x - y) / kSide, 255.0 * x / kSide,
                              255.0 * y / kSide};
      for (int c = 0; c < 3; ++c) {
        const double v = base[c] + noise(rng);
        im.pixels[(y * kSide + x) * 3 + c] = static_cast<std::uint8_t>(v < 0     ? 0
                                                                       : v > 255 ? 255
                                                                                 : v);
      }
    }
  }
  return im;
}

void Chunk(std::vector<std::uint8_t>& out, const char* type,
           const std::vector<std::uint8_t>& data) {
  const std::uint32_t n = static_cast<std::uint32_t>(data.size());
  for (int i = 3; i >= 0; --i) out.push_back(static_cast<std::uint8_t>(n >> (8 * i)));
  const std::size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  const auto crc = static_cast<std::uint32_t>(crc32(0, out.data() + start, 4 + n));
  for (int i = 3; i >= 0; --i) out.push_back(static_cast<std::uint8_t>(crc >> (8 * i)));
}

// An RGB PNG of `im`, every row with the Sub filter, zlib level 6.
std::vector<std::uint8_t> EncodePng(const Image& im) {
  std::vector<std::uint8_t> raw;
  for (Index y = 0; y < im.height; ++y) {
    raw.push_back(1);
    const std::uint8_t* row = im.pixels.data() + y * im.width * 3;
    for (Index i = 0; i < im.width * 3; ++i) {
      raw.push_back(static_cast<std::uint8_t>(row[i] - (i >= 3 ? row[i - 3] : 0)));
    }
  }
  uLongf size = compressBound(raw.size());
  std::vector<std::uint8_t> z(size);
  compress2(z.data(), &size, raw.data(), raw.size(), 6);
  z.resize(size);
  std::vector<std::uint8_t> png = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  std::vector<std::uint8_t> ihdr = {0, 0, 0, 0, 0, 0, 0, 0, 8, 2, 0, 0, 0};
  for (int i = 0; i < 4; ++i) {
    ihdr[i] = static_cast<std::uint8_t>(im.width >> (24 - 8 * i));
    ihdr[4 + i] = static_cast<std::uint8_t>(im.height >> (24 - 8 * i));
  }
  Chunk(png, "IHDR", ihdr);
  Chunk(png, "IDAT", z);
  Chunk(png, "IEND", {});
  return png;
}

void BM_ResizeBilinear(benchmark::State& state) {
  const Image im = Photo();
  for (auto _ : state) benchmark::DoNotOptimize(ResizeBilinear(im, 224, 224));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ResizeBilinear);

// range(0): 0 full size, 1 resized to 224 x 224.
void BM_DecodePng(benchmark::State& state) {
  const std::vector<std::uint8_t> png = EncodePng(Photo());
  const ResizeOptions resize = state.range(0) ? ResizeOptions{224, 224, 0} : ResizeOptions{};
  for (auto _ : state) benchmark::DoNotOptimize(DecodeImage(png, "png", resize));
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(std::to_string(png.size()) + " bytes encoded");
}
BENCHMARK(BM_DecodePng)->Arg(0)->Arg(1);

}  // namespace
}  // namespace shardkit
